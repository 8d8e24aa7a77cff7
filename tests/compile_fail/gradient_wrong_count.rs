use ovl::prelude::*;

#[operator(gradient = mul_grad)]
fn mul(a: Tensor<f64>, b: Tensor<f64>) -> Tensor<f64> {
    let i = position_in(a.shape())[0];
    let out = output_like(&a);
    out[[i]] = a[[i]] * b[[i]];
    out
}

// Two inputs need two gradients; this returns one.
fn mul_grad(a: Lazy<f64>, b: Lazy<f64>, dy: Lazy<f64>) -> Lazy<f64> {
    let _ = (a, b);
    dy
}

// A gradient of the wrong dtype for its input.
#[operator(gradient = cast_grad)]
fn cast(a: Tensor<f64>) -> Tensor<f32> {
    let i = position_in(a.shape())[0];
    let out = output(a.shape());
    out[[i]] = a[[i]] as f32;
    out
}

fn cast_grad(_a: Lazy<f64>, dy: Lazy<f32>) -> Lazy<f32> {
    dy
}

fn main() {}

use ovl::prelude::*;

#[operator(gradient = square_grad)]
fn square(x: Tensor<f64>) -> Tensor<f64> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = x[[i]] * x[[i]];
    out
}

// An f32 gradient operator for an f64 operator.
#[operator]
fn square_grad(x: Tensor<f32>, dy: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = 2.0 * x[[i]] * dy[[i]];
    out
}

fn main() {}

use ovl::prelude::*;

#[operator]
fn f(x: Tensor<f32>, scale: impl Into<f64>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = x[[i]] * scale.into() as f32;
    out
}

fn main() {}

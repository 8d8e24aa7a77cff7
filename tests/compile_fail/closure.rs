use ovl::prelude::*;

#[operator]
fn f(x: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    let square = |v: Expr<f32>| v * v;
    out[[i]] = square(x[[i]]);
    out
}

fn main() {}

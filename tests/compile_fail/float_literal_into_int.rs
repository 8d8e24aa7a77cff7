use ovl::prelude::*;

#[operator]
fn f(x: Tensor<i32>) -> Tensor<i32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = x[[i]] * 1.5;
    out
}

fn main() {}

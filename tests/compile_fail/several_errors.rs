use ovl::prelude::*;

#[operator]
fn f(x: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    let double = |v: Expr<f32>| v * 2.0;
    loop {}
    let v = match x.rank() {
        _ => x[[i]],
    };
    out
}

fn main() {}

use ovl::prelude::*;

#[operator]
fn f(x: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    let mut acc = variable(0.0f32);
    for _ in 0.. {
        acc += 1.0;
    }
    out[[i]] = acc;
    out
}

fn main() {}

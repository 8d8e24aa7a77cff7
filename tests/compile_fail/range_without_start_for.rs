use ovl::prelude::*;

#[operator]
fn f(x: Tensor<f32>) -> Tensor<f32> {
    let n = x.len();
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    let mut acc = variable(0.0f32);
    for _ in ..n {
        acc += 1.0;
    }
    out[[i]] = acc;
    out
}

fn main() {}

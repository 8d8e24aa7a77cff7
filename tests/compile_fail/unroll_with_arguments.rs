use ovl::prelude::*;

#[operator]
fn f(x: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    let mut acc = variable(0.0f32);
    #[unroll(4)]
    for k in 0..4 {
        acc += k as f32;
    }
    out[[i]] = x[[i]] + acc;
    out
}

fn main() {}

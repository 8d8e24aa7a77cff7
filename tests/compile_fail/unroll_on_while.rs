use ovl::prelude::*;

#[operator]
fn f(x: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    let mut k = 0;
    #[unroll]
    while k < 4 {
        k += 1;
    }
    out[[i]] = x[[i]];
    out
}

fn main() {}

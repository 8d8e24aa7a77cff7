use ovl::prelude::*;

#[operator]
fn f(x: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    if x[[i]] < 0.0 {
        return out;
    }
    out[[i]] = x[[i]];
    out
}

fn main() {}

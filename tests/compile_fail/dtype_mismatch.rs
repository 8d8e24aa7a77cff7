use ovl::prelude::*;

#[operator]
fn f(x: Tensor<f32>) -> Tensor<f64> {
    let i = position_in(x.shape())[0];
    let out = output::<f64>(x.shape());
    out[[i]] = x[[i]];
    out
}

fn main() {}

use ovl::prelude::*;

#[operator]
fn f(x: Tensor<f32>, scale: std::future::Ready<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = x[[i]] * scale.await;
    out
}

fn main() {}

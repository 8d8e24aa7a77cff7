use ovl::prelude::*;

#[operator]
fn f(x: Tensor<f32>) -> Tensor<f32> {
    let out = output_like(&x);
    let _scale = async { 2.0f32 };
    out
}

fn main() {}

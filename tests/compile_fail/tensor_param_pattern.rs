use ovl::prelude::*;

#[operator]
fn f(_: Tensor<f32>, ref y: Tensor<f32>) -> Tensor<f32> {
    output_like(y)
}

fn main() {}

use ovl::prelude::*;

#[operator]
fn f(&self, x: Tensor<f32>) -> Tensor<f32> {
    output_like(&x)
}

fn main() {}

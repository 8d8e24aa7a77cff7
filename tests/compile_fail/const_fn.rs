use ovl::prelude::*;

#[operator]
const fn f(x: Tensor<f32>) -> Tensor<f32> {
    output_like(&x)
}

fn main() {}

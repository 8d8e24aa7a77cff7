use ovl::prelude::*;

#[operator]
fn f(x: &Tensor<f32>, ys: &[Tensor<f32>]) -> Tensor<f32> {
    output_like(x)
}

fn main() {}

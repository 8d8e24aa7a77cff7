use ovl::prelude::*;

#[operator]
fn f(x: Tensor<f32>) -> impl Sized {
    output_like(&x)
}

fn main() {}

#[operator]
fn f(x: Tensor<f32>, scale: impl Into<f32>, fs: Vec<impl Fn(f32) -> f32>) -> impl Outputs {
    output_like(&x)
}

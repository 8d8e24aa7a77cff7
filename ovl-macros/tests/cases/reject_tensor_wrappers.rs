#[operator]
fn f(a: &Tensor<f32>, b: &[Tensor<f32>], c: [Tensor<f32>; 2], d: Option<Tensor<f32>>) -> Tensor<f32> {
    output_like(a)
}

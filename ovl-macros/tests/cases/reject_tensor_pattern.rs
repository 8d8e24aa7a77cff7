// Tensor parameters must be plain names; a constant may use any pattern.
#[operator]
fn f(ref x: Tensor<f32>, _: Tensor<f32>, y @ _: Tensor<f32>, (a, b): (usize, usize)) -> Tensor<f32> {
    output_like(&x)
}

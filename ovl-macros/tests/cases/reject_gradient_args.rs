#[operator(gradient = g, gradient = h)]
fn f(x: Tensor<f32>, (a, b): (f32, f32)) -> Tensor<f32> {
    output_like(&x)
}

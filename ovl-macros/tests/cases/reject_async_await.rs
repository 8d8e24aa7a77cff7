#[operator]
fn f(x: Tensor<f32>) -> Tensor<f32> {
    let out = output_like(&x);
    let fut = async { 1 };
    let v = fut.await;
    out
}

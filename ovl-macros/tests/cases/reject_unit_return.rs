#[operator]
fn f(x: Tensor<f32>) -> () {
    let out = output_like(&x);
}

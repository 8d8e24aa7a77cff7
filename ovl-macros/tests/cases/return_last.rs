// `return` as the last statement of the body is allowed.
#[operator]
fn f(x: Tensor<f32>) -> Tensor<f32> {
    let out = output_like(&x);
    return out;
}

#[operator]
fn f(x: Tensor<f32>) -> Tensor<f32> {
    let out = output_like(&x);
    let mut i = variable(0i64);
    loop {
        i += 1;
        if i > 3 {
            break;
        }
    }
    out
}

#[operator]
fn f(x: Tensor<f32>) -> Tensor<f32> {
    let out = output_like(&x);
    let p = unsafe { *(&3usize as *const usize) };
    out
}

// Every error is reported, in the signature and in the body; no item is emitted when the
// signature itself is wrong.
#[operator]
async fn f(&self, x: Tensor<f32>) {
    let out = output_like(&x);
    match 1 {
        _ => {}
    }
    loop {}
    let c = || 1;
    unsafe {}
    if true {
        return;
    }
}

// A `return` anywhere but as the last statement; the last one is fine.
#[operator]
fn f(x: Tensor<f32>, n: usize) -> Tensor<f32> {
    let out = output_like(&x);
    if n == 0 {
        return out;
    }
    let y = { return out };
    return out;
}

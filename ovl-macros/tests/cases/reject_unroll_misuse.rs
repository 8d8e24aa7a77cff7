#[operator]
fn f(x: Tensor<f32>, n: usize) -> Tensor<f32> {
    let out = output_like(&x);
    let mut i = 0;
    #[unroll]
    while i < n {
        i += 1;
    }
    #[unroll(4)]
    for k in 0..4 {
        i += k;
    }
    out
}

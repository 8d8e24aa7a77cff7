#[operator]
fn f(x: Tensor<f32>, n: usize) -> Tensor<f32> {
    let out = output_like(&x);
    for i in 0.. {
        out[[i]] = 1.0;
    }
    for i in (n..).step_by(2) {
        out[[i]] = 2.0;
    }
    for i in ..n {
        out[[i]] = 3.0;
    }
    #[unroll]
    for i in 0.. {
        break;
    }
    out
}

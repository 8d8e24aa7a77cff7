#[operator]
fn f(x: Tensor<f32>) -> Tensor<f32> {
    let out = output_like(&x);
    let square = |v: Expr<f32>| v * v;
    let sizes: Vec<usize> = x.shape().iter().map(move |d| d * 2).collect();
    out
}

#[operator(gradient = clip_grad)]
fn clip(x: Tensor<f64>, ws: Vec<Tensor<f32>>, lo: f64, hi: f64) -> (Tensor<f64>, Vec<Tensor<f32>>) {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = x[[i]];
    (out, ws)
}

// `break` out of a staged `for`, directly or from a nested Rust loop with a label; a `break` of
// the nested Rust loop itself is fine.
#[operator]
fn f(x: Tensor<f32>, n: usize) -> Tensor<f32> {
    let out = output_like(&x);
    'rows: for i in 0..n {
        if x[[i]] > 0.0 {
            break;
        }
        for k in [1, 2] {
            if k == 2 {
                break;
            }
            break 'rows;
        }
    }
    out
}

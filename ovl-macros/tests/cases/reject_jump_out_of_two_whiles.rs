#[operator]
fn f(x: Tensor<f32>, n: usize) -> Tensor<f32> {
    let out = output_like(&x);
    let mut i = 0;
    'outer: while i < n {
        while i < 2 * n {
            i += 1;
            if i == 7 {
                break 'outer;
            }
            continue 'outer;
        }
    }
    out
}

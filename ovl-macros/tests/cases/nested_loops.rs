// Inside a staged `for`: a nested `while` or Rust loop may use `break`/`continue` for itself.
#[helper]
fn f(x: &Tensor<f32>, n: usize, acc: Var<f32>) {
    for j in 0..n {
        let mut k = variable(0i64);
        while k < j {
            k += 1;
            if k == 4 {
                break;
            }
        }
        for w in [0.5f32, 0.25] {
            if w < 0.3 {
                continue;
            }
            acc += w * x[[j]];
        }
        'blk: {
            if n > 3 {
                break 'blk;
            }
            acc += 1.0;
        }
    }
    while acc < 3.0 {
        'blk: {
            if n > 2 {
                break 'blk;
            }
            acc += 1.0;
        }
        for v in [1] {
            if v > 0 {
                break;
            }
        }
        for v in [1] {
            'inner: while v > 0 {
                break 'inner;
            }
        }
    }
}

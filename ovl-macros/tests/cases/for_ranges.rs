// A `for` over a range is one staged RANGE: `..`, `..=`, `step_by`, through parentheses.
#[helper]
fn f(x: &Tensor<f32>, n: usize, m: Expr<i64>, acc: Var<f32>) {
    for j in 0..n {
        acc += x[[j]];
    }
    for j in 1..=m {
        acc += x[[j]];
    }
    for j in (0..n).step_by(2) {
        acc += x[[j]];
    }
    for _ in ((m..=2 * m)).step_by(n / 2) {
        acc += 1.0;
    }
    'rows: for j in (0..n) {
        acc *= 0.5;
    }
}

// Descending staged loops: `.rev()` of a range (with or without `step_by`), and `arange` with
// a step of either sign.
#[helper]
fn f(x: &Tensor<f32>, n: usize, m: Expr<i64>, acc: Var<f32>) {
    for k in (0..n).rev() {
        acc += x[[k]];
    }
    for k in ((1..=m).step_by(3)).rev() {
        acc += x[[k]];
    }
    for k in arange(n as i64 - 1, -1, -1) {
        acc += x[[k]];
    }
    #[unroll]
    for k in (0..4).rev() {
        acc += x[[k]];
    }
}

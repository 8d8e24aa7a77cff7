// `else if` chains: each `else` block holds the rewritten nested `if`.
#[helper]
fn f(v: Expr<f64>, out: &Tensor<i32>, i: Expr<i64>) {
    if isnan(v) {
        out[[i]] = -1;
    } else if v < 0.0 && v > -10.0 {
        out[[i]] = 1;
    } else if v == 0.0 || !(v < 100.0) {
        out[[i]] = 2;
    } else {
        out[[i]] = 3;
    }
    if v < 1.0 {
        out[[i]] = 4;
    } else if v < 2.0 {
        out[[i]] = 5;
    }
}

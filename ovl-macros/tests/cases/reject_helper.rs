// A helper is checked like an operator body; `self` is fine, `async` is not.
#[helper]
async fn g(&self, v: Expr<f32>) -> Expr<f32> {
    if v > 0.0 {
        return v;
    }
    match 0 {
        _ => v,
    }
}

// The body of a helper that returns a value ends in a value: a Rust `if`.
#[helper]
fn pick(a: Expr<f32>, b: Expr<f32>, first: bool) -> Expr<f32> {
    if first { a } else { b }
}

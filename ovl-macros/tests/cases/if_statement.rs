// `if` as a statement: with and without `else`, with and without `;`, in the middle of a block.
#[helper]
fn f(x: Expr<f32>, out: &Tensor<f32>, i: Expr<i64>) {
    if x > 0.0 {
        out[[i]] = x;
    }
    if x < 0.0 {
        out[[i]] = -x;
    } else {
        out[[i]] = 0.0;
    };
    let y = x * 2.0;
    if y == x { out[[i]] = y; }
    out[[i]] = 1.0;
}

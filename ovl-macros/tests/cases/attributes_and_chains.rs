// Attributes on a rewritten `if` / `for` / `while` move to the block that replaces it (`#[unroll]`
// is removed); `else if let` in a staged chain; a let-chain stays Rust.
#[helper]
fn f(c: Expr<bool>, opt: Option<usize>, n: usize, acc: Var<f32>) {
    #[allow(unused_variables)]
    for j in 0..n {
        acc += 1.0;
    }
    #[allow(unused_variables)]
    #[unroll]
    for j in 0..n {
        acc += 2.0;
    }
    #[allow(clippy::nonminimal_bool)]
    if c {
        acc += 3.0;
    } else if let Some(k) = opt {
        acc += 4.0;
    }
    #[allow(while_true)]
    while true && n > 3 {
        acc += 5.0;
    }
    if let Some(k) = opt && k > 2 && c {
        acc += 6.0;
    }
}

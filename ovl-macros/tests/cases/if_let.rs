// `if let` and `while let` stay Rust; their scrutinees, branches and bodies are rewritten.
#[helper]
fn f(xs: &[Tensor<f32>], opt: Option<usize>, i: Expr<i64>, out: &Tensor<f32>) {
    if let Some(k) = opt {
        if xs[k][[i]] > 0.0 {
            out[[i]] = 1.0;
        }
    } else if xs.len() > 2 {
        out[[i]] = 2.0;
    }
    let mut it = xs.iter();
    while let Some(t) = it.next() {
        out[[i]] = t[[i]];
    }
    let Some(k) = opt else { panic!("no k") };
    let w = if let Some(k) = opt { k as f32 } else { 0.0 };
}

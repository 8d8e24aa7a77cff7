// `if` whose value is used: a Rust `if` on `plain_cond(..)`. A chain without a final `else` has
// the value `()`, so it is a statement wherever it stands.
#[operator]
fn f(x: Tensor<f32>, n: usize, flip: bool) -> Tensor<f32> {
    let scale = if n > 1024 { 0.5 } else { 1.0 };
    let shift = if n < 16 { 1.0 } else if n < 256 { 2.0 } else { 3.0 };
    let i = position_in([n])[0];
    let out = output_like(&x);
    out[[i]] = select(x[[i]] > 0.0, x[[i]] * scale, if flip { -shift } else { shift });
    let unit = if x[[i]] > 0.0 { out[[i]] = 1.0; };
    consume(if flip { out[[i]] = 2.0; } else if n > 3 { out[[i]] = 3.0; });
    if flip { out } else { x }
}

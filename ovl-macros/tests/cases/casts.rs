// `as` becomes `RT::cast::<T, _>(..)`, nested and inside other rewrites.
#[helper]
fn f(i: Expr<i64>, n: usize, x: &Tensor<f32>) -> Expr<f64> {
    let a = i as f32;
    let b = n as i64 * 2;
    let c = x[[i as usize + 1]] as f64;
    let d = (i as f32) as f64 + (n as f64) / 2.0;
    let e = i as u8 as char;
    c + d
}

// Comparisons, `&&` and `||` become calls, nested anywhere: arguments, receivers, operands.
#[helper]
fn f(a: Expr<f32>, b: Expr<f32>, n: usize, flags: &[bool]) -> Expr<bool> {
    let lt = a < b;
    let le = a <= b;
    let gt = a > b;
    let ge = a >= b;
    let eq = a == b;
    let ne = a != b;
    let mixed = a < b && b >= 0.0 || !(a == b) && n != 3;
    let called = select(a > b, a, b);
    let recv = (a > b).cast::<f32>();
    let plain = flags.len() > 2 && flags[0] || flags.is_empty();
    (lt && le) || (gt && ge && eq && ne)
}

// `place = v` dispatches on the place (ASSIGN for a `Var`, Rust otherwise); other targets and
// the initialization of a local declared without an initializer stay Rust.
#[helper]
fn f(x: Expr<f32>, p: &mut usize, pair: &mut (Var<f32>, usize)) {
    let mut acc = variable(0.0f32);
    acc = acc + x;
    acc += 1.0;
    *p = *p + 1;
    pair.0 = x;
    pair.1 = 3;
    let mut n = 1usize;
    n = n * 2;
    _ = n;
    let (mut a, mut b) = (1, 2);
    (a, b) = (b, a);
    let later;
    later = 4;
    let mut shadow;
    shadow = 1;
    {
        let mut shadow = 2;
        shadow = 3;
    }
    shadow = 5;
    (acc) = x;
}

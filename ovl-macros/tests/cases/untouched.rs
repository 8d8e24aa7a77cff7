// Not rewritten: macro invocations, nested items, `const` blocks, types, patterns, array-repeat
// lengths, const generic arguments.
#[helper]
fn f<const N: usize>(a: usize, b: usize, x: Expr<f32>) -> [f32; N] {
    println!("{}", a < b && b == 2);
    assert!(a as f32 <= 3.0, "{}", x[[0]]);
    fn plain(a: usize, b: usize) -> bool {
        if a < b { a as u8 == 0 } else { b == 1 }
    }
    struct S([u8; if 1 < 2 { 3 } else { 4 }]);
    const C: bool = 1 < 2;
    let k = const { 3 < 4 };
    let arr = [a < b; N * 2];
    let t = dims::<{ N < 3 }>();
    if let 1..=5 = a {}
    [0.0; N]
}

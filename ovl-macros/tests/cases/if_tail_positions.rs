// The tail of a block is a statement when the block's value is discarded: loop bodies, branches
// of a statement `if`, statement blocks, the body of a function returning `()`. It is a value in
// a `let` initializer or the body of a function returning a value.
#[helper]
fn unit_body(c: Expr<bool>, v: Var<f32>, n: usize) {
    for j in 0..n {
        if c { v = 1.0 }
    }
    while v < 10.0 {
        if c { v = 2.0 }
    }
    {
        if c { v = 3.0 }
    }
    if c {
        if c { v = 4.0 }
    }
    let k = {
        let m = n * 2;
        if m > 4 { m } else { 4 }
    };
    if c { v = 5.0 }
}

// `while` is a Rust `loop` driven by a `WhileLoop` guard; `break`/`continue` that leave it (or
// continue it) tell the guard first; those of a nested Rust loop are that loop's.
#[helper]
fn f(x: &Tensor<f32>, n: usize, i: Var<i64>) {
    while i < 10 {
        i += 1;
    }
    'outer: while x[[i]] > 0.0 && i < n {
        if i == 3 {
            continue;
        }
        for k in 0..2usize.pow(2) {
            i += 1;
        }
        for v in [1, 2] {
            if v == 2 {
                break;
            }
            if v == 3 {
                continue 'outer;
            }
        }
        while i > 5 {
            i -= 1;
            if i == 7 {
                break;
            }
        }
        if i == 9 {
            break 'outer;
        }
    }
    let mut k = 0;
    while k < 3 {
        k += 1;
    }
}

// A `for` over anything but a range, or marked `#[unroll]`, is a Rust loop unrolled at trace
// time; `break` and `continue` in it are Rust's.
#[operator]
fn f(xs: Vec<Tensor<f32>>, gates: [f32; 4]) -> Tensor<f32> {
    let n = xs[0].len();
    let i = position_in([n])[0];
    let out = output_like(&xs[0]);
    let mut acc = variable(0.0f32);
    for x in &xs {
        if x.len() != n {
            continue;
        }
        acc += x[[i]];
    }
    #[unroll]
    for g in 0..4 {
        if g == 3 {
            break;
        }
        acc += gates[g] * xs[g][[i]];
    }
    #[unroll]
    for k in (0..n).rev() {
        acc += k as f32;
    }
    out[[i]] = acc;
    out
}

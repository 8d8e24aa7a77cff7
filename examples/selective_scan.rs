//! A Mamba-style selective scan written as one `#[operator]`, with its backward pass derived by
//! ovl (no gradient written): per batch `b` and channel `d` (one worker each), the state `h[n]`
//! in worker-local memory,
//!
//! ```text
//! h_n = exp(dt[b, d, t] A[d, n]) h_n + dt[b, d, t] B[b, t, n] x[b, d, t]
//! y[b, d, t] = sum_n C[b, t, n] h_n
//! ```
//!
//! The derived backward records the state per iteration of the time loop (or checkpoints it
//! when the record passes the worker's 64 KiB, docs/gradients.md#derived-gradients). The
//! example checks forward and gradients against a scan and its hand-written backward in f64,
//! then prints the times of forward and forward + backward on the CPU.
//!
//! Run with `cargo run --release --example selective_scan`.

use ndarray::{ArrayD, IxDyn};
use ovl::prelude::*;
use std::time::Instant;

/// The scan: `x`, `dt` `[batch, channels, steps]`, `a` `[channels, state]`, `bm`, `cm`
/// `[batch, steps, state]`; returns `y` `[batch, channels, steps]`.
#[operator]
pub fn selective_scan(
    x: Tensor<f32>,
    dt: Tensor<f32>,
    a: Tensor<f32>,
    bm: Tensor<f32>,
    cm: Tensor<f32>,
) -> Tensor<f32> {
    let [batch, channels, steps] = x.dims::<3>();
    let [_, state] = a.dims::<2>();
    let p = position_in([batch, channels]);
    let (b, d) = (p[0], p[1]);
    let y = output_like(&x);
    let h = zeros::<f32>([state]);
    for t in 0..steps {
        let delta = dt[[b, d, t]];
        let xt = x[[b, d, t]];
        let mut acc = variable(0.0f32);
        for n in 0..state {
            h[[n]] = exp(delta * a[[d, n]]) * h[[n]] + delta * bm[[b, t, n]] * xt;
            acc += cm[[b, t, n]] * h[[n]];
        }
        y[[b, d, t]] = acc;
    }
    y
}

/// The inputs of one size `(batch, channels, steps, state)`, from a formula.
pub fn inputs(size: (usize, usize, usize, usize)) -> [ArrayD<f32>; 5] {
    let (bs, ds, ls, ns) = size;
    let f = |shape: &[usize], seed: usize, lo: f32, hi: f32| {
        let mut k = 0usize;
        ArrayD::from_shape_simple_fn(IxDyn(shape), || {
            k += 1;
            let u = ((k * 2654435761 + seed * 40503) % 10007) as f32 / 10007.0;
            lo + (hi - lo) * u
        })
    };
    [
        f(&[bs, ds, ls], 1, -1.0, 1.0),
        f(&[bs, ds, ls], 2, 0.01, 0.1),
        f(&[ds, ns], 3, -2.0, -0.1),
        f(&[bs, ls, ns], 4, -1.0, 1.0),
        f(&[bs, ls, ns], 5, -1.0, 1.0),
    ]
}

/// The scan and its hand-written backward in f64 for the loss `sum(y * g)`: `(y, [dx, ddt,
/// da, dbm, dcm])`.
pub fn reference(xs: &[ArrayD<f32>; 5], g: &ArrayD<f32>) -> (ArrayD<f64>, Vec<ArrayD<f64>>) {
    let w: Vec<ArrayD<f64>> = xs.iter().map(|v| v.mapv(f64::from)).collect();
    let (x, dt, a, bm, cm) = (&w[0], &w[1], &w[2], &w[3], &w[4]);
    let (bs, ds, ls) = (x.shape()[0], x.shape()[1], x.shape()[2]);
    let ns = a.shape()[1];
    let mut y = ArrayD::<f64>::zeros(x.raw_dim());
    let mut grads: Vec<ArrayD<f64>> = w.iter().map(|v| ArrayD::zeros(v.raw_dim())).collect();
    for b in 0..bs {
        for d in 0..ds {
            // Forward, keeping every state.
            let mut hs = vec![vec![0.0f64; ns]; ls + 1];
            for t in 0..ls {
                for n in 0..ns {
                    let e = (dt[[b, d, t]] * a[[d, n]]).exp();
                    hs[t + 1][n] = e * hs[t][n] + dt[[b, d, t]] * bm[[b, t, n]] * x[[b, d, t]];
                    y[[b, d, t]] += cm[[b, t, n]] * hs[t + 1][n];
                }
            }
            // Backward.
            let mut gh = vec![0.0f64; ns];
            for t in (0..ls).rev() {
                let gy = f64::from(g[[b, d, t]]);
                let (delta, xt) = (dt[[b, d, t]], x[[b, d, t]]);
                for n in 0..ns {
                    grads[4][[b, t, n]] += gy * hs[t + 1][n];
                    gh[n] += gy * cm[[b, t, n]];
                    let e = (delta * a[[d, n]]).exp();
                    grads[1][[b, d, t]] += gh[n] * (a[[d, n]] * e * hs[t][n] + bm[[b, t, n]] * xt);
                    grads[2][[d, n]] += gh[n] * delta * e * hs[t][n];
                    grads[3][[b, t, n]] += gh[n] * delta * xt;
                    grads[0][[b, d, t]] += gh[n] * delta * bm[[b, t, n]];
                    gh[n] *= e;
                }
            }
        }
    }
    (y, grads)
}

/// The largest difference relative to the reference's largest magnitude.
pub fn rel_error(got: &ArrayD<f32>, want: &ArrayD<f64>) -> f64 {
    let scale = want.iter().fold(1e-30f64, |m, v| m.max(v.abs()));
    got.iter()
        .zip(want.iter())
        .map(|(&a, &b)| (f64::from(a) - b).abs() / scale)
        .fold(0.0, f64::max)
}

#[allow(dead_code)]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let size = (2, 8, 64, 8);
    let xs = inputs(size);
    let g = inputs((size.0, size.1, size.2, 1))[0].clone();
    let (want_y, want_grads) = reference(&xs, &g);
    let lazies: Vec<Lazy<f32>> = xs.iter().map(|v| Lazy::from(v.clone())).collect();
    let y = selective_scan(&lazies[0], &lazies[1], &lazies[2], &lazies[3], &lazies[4]);
    let seed = Lazy::from(g);
    let wrt: Vec<&Lazy<f32>> = lazies.iter().collect();
    let grads = ovl::backward(&[(&y, &seed)], &wrt)?;
    let got = ovl::evaluate(&y)?;
    println!("y: max relative error {:.2e}", rel_error(&got, &want_y));
    let names = ["x", "dt", "A", "B", "C"];
    for (i, x) in lazies.iter().enumerate() {
        let gi = ovl::evaluate(&grads.of(x).expect("a gradient"))?;
        println!(
            "d{}: max relative error {:.2e}",
            names[i],
            rel_error(&gi, &want_grads[i])
        );
    }
    let time = |f: &dyn Fn()| {
        f();
        let t = Instant::now();
        for _ in 0..5 {
            f();
        }
        t.elapsed().as_secs_f64() / 5.0 * 1e3
    };
    let forward = time(&|| {
        ovl::evaluate(&y).unwrap();
    });
    let backward = time(&|| {
        let all: Vec<Lazy<f32>> = lazies.iter().map(|x| grads.of(x).unwrap()).collect();
        ovl::evaluate((&all[0], &all[1], &all[2], &all[3], &all[4])).unwrap();
    });
    println!(
        "batch {} x channels {} x steps {} x state {}: forward {forward:.3} ms, derived backward \
         {backward:.3} ms (CPU; the backward recomputes the forward)",
        size.0, size.1, size.2, size.3
    );
    Ok(())
}

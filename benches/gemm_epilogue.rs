//! Does running the consumer of a GEMM as its epilogue pay (`ovl-fuse/src/gemm_pair.rs`,
//! `ovl-runtime/src/gemm/epilogue.rs`)? `tanh(x · W + b)` (f32, compiled once at the default level: the
//! library GEMM and one fused `add+tanh` kernel) run with the pair as one step (C by blocks of
//! rows, each block's `add+tanh` right after it on the same thread) and as two kernels one
//! after the other (`Options::gemm_epilogue`: `Off`; `WherePays`, which pairs
//! only where the extra reads of W per block cost less than reading C back; `Always`), and
//! the GEMM alone for scale. Best of 20 calls per round, in alternating rounds (5, or 2 with
//! `--quick`), the smallest per cell; threads: one per core.
//!
//! `cargo bench --bench gemm_epilogue [-- --quick]`

mod common;

use common::{machine, Args};
use ndarray::{ArrayD, Dimension, IxDyn};
use ovl::{EpilogueMode, Lazy, Options};
use ovl_stdlib as ops;
use std::time::Instant;

/// `(m, k, n)`: `[m, k] x [k, n]`. An LSTM step's products at B = 64, H = 1024 (`x_t W`) and at
/// B = 20, H = 650, a square-ish one with more rows, and a short sum over many rows (C large
/// next to W: where the pair pays by its rule).
const SIZES: [(usize, usize, usize); 4] = [
    (64, 1024, 4096),
    (512, 1024, 1024),
    (20, 650, 2600),
    (4096, 64, 1024),
];

/// A compiled graph and its inputs.
struct Case {
    compiled: ovl::Compiled,
    feeds: [Lazy<f32>; 3],
    out: Vec<ArrayD<f32>>,
}

fn case((m, k, n): (usize, usize, usize), gemm_only: bool, mode: EpilogueMode) -> Case {
    let x = ovl::placeholder::<f32>("x", &[m, k]);
    let w = ovl::placeholder::<f32>("w", &[k, n]);
    let b = ovl::placeholder::<f32>("b", &[n]);
    let c = ops::matmul(&x, &w);
    let y = if gemm_only {
        c
    } else {
        ops::tanh(ops::add(&c, &b))
    };
    let options = Options::cpu().with_gemm_epilogue(mode);
    let compiled = ovl::compile((&x, &w, &b), std::slice::from_ref(&y), &options).expect("compile");
    let fill = |shape: &[usize], s: usize| {
        Lazy::from(ArrayD::from_shape_fn(IxDyn(shape), |i| {
            ((i.slice().iter().sum::<usize>() * 7 + s) % 13) as f32 * 0.01
        }))
    };
    Case {
        compiled,
        feeds: [fill(&[m, k], 1), fill(&[k, n], 2), fill(&[n], 3)],
        out: vec![ArrayD::zeros(IxDyn(&[m, n]))],
    }
}

/// Best milliseconds of `calls` runs.
fn time(c: &mut Case, calls: usize) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..calls {
        let start = Instant::now();
        c.compiled
            .run_into((&c.feeds[0], &c.feeds[1], &c.feeds[2]), &mut c.out[..])
            .expect("run");
        best = best.min(start.elapsed().as_secs_f64() * 1e3);
    }
    best
}

fn main() {
    let args = Args::parse("target/gemm-epilogue-bench");
    let rounds = if args.quick { 2 } else { 5 };
    println!(
        "tanh(x W + b): the consumer as the GEMM's epilogue or a separate kernel (ovl, CPU, f32), {}",
        machine()
    );
    println!(
        "| m x k x n | GEMM alone (ms) | separate (ms) | where it pays (ms) | always paired \
         (ms) | pays / separate | always / separate |"
    );
    println!("|---|---|---|---|---|---|---|");
    for size in SIZES {
        let mut alone = case(size, true, EpilogueMode::Off);
        let mut separate = case(size, false, EpilogueMode::Off);
        let mut pays = case(size, false, EpilogueMode::WherePays);
        let mut always = case(size, false, EpilogueMode::Always);
        let (mut a, mut s, mut d, mut e) = (f64::MAX, f64::MAX, f64::MAX, f64::MAX);
        for _ in 0..rounds {
            a = a.min(time(&mut alone, 20));
            s = s.min(time(&mut separate, 20));
            d = d.min(time(&mut pays, 20));
            e = e.min(time(&mut always, 20));
        }
        let (m, k, n) = size;
        println!(
            "| {m} x {k} x {n} | {a:.3} | {s:.3} | {d:.3} | {e:.3} | {:.2}x | {:.2}x |",
            d / s,
            e / s
        );
    }
}

//! Is stacking products worth its copies (`ovl-fuse/src/stack.rs`)? The T products of an LSTM
//! layer that share a weight, in the forward's form (`x_t W`: `[B, I] x [I, 4H]`) and the
//! backward's (`dz_t Wᵀ`: `[B, 4H] x [4H, I]` read transposed), compiled once (`opt_level` 1)
//! stacked and not stacked: the unstacked graph gives each product its own placeholder for the
//! weight, all fed the same array (the same memory: the same reads as one shared weight, but
//! nothing to stack). The stacked graph's time includes its copies (the stacked operand, fused
//! with the split of `x`, and the cut of the result into T outputs). Best of 15 calls, in
//! alternating rounds (3, or 1 with `--quick`), the smallest per cell; f32.
//!
//! `cargo bench --bench gemm_stack [-- --quick]`

mod common;

use common::{machine, Args};
use ndarray::{ArrayD, IxDyn};
use ovl::{Lazy, Options};
use ovl_stdlib as ops;
use std::time::Instant;

/// (T, B, H = I), as `benches/lstm_layer.rs`.
const SIZES: [(usize, usize, usize); 3] = [(35, 20, 650), (35, 20, 1500), (20, 64, 1024)];

/// Best milliseconds of 15 calls of the T products of one form, stacked or not.
fn time((t, b, h): (usize, usize, usize), transposed: bool, stacked: bool) -> f64 {
    let (k, n) = if transposed { (4 * h, h) } else { (h, 4 * h) };
    let w_shape = if transposed { [n, k] } else { [k, n] };
    ovl::clear_caches();
    let x = ovl::placeholder::<f32>("x", &[t, b, k]);
    let ws: Vec<Lazy<f32>> = (0..if stacked { 1 } else { t })
        .map(|s| ovl::placeholder::<f32>(&format!("w{s}"), &w_shape))
        .collect();
    let ys: Vec<Lazy<f32>> = ops::split(&x, 0, t)
        .iter()
        .enumerate()
        .map(|(s, x_t)| {
            let w = &ws[s % ws.len()];
            ops::matmul_t(ops::reshape(x_t, &[b, k]), w, false, transposed)
        })
        .collect();
    let options = Options::cpu().with_opt_level(1);
    let compiled = ovl::compile((&x, &ws[..]), &ys[..], &options).expect("compile");
    let xv = Lazy::from(ArrayD::from_shape_fn(IxDyn(&[t, b, k]), |i| {
        ((i[0] * 7 + i[1] * 3 + i[2]) % 13) as f32 * 0.1
    }));
    let wv = Lazy::from(ArrayD::from_shape_fn(IxDyn(&w_shape), |i| {
        ((i[0] + 5 * i[1]) % 11) as f32 * 0.01
    }));
    let feeds: Vec<Lazy<f32>> = vec![wv; ws.len()];
    let mut dests = vec![ArrayD::<f32>::zeros(IxDyn(&[b, n])); t];
    let mut best = f64::MAX;
    for _ in 0..15 {
        let start = Instant::now();
        compiled
            .run_into((&xv, &feeds[..]), &mut dests[..])
            .expect("run");
        best = best.min(start.elapsed().as_secs_f64() * 1e3);
    }
    best
}

fn main() {
    let args = Args::parse("target/gemm-stack-bench");
    let rounds = if args.quick { 1 } else { 3 };
    println!(
        "T products sharing a weight, stacked or not (ovl, CPU, f32), {}",
        machine()
    );
    println!("| T, B, H=I | form | stacked (ms) | not stacked (ms) | stacked / not |");
    println!("|---|---|---|---|---|");
    for size in SIZES {
        for transposed in [false, true] {
            let (mut s, mut u) = (f64::MAX, f64::MAX);
            for _ in 0..rounds {
                s = s.min(time(size, transposed, true));
                u = u.min(time(size, transposed, false));
            }
            let form = if transposed { "x_t Wᵀ" } else { "x_t W" };
            let (t, b, h) = size;
            println!(
                "| {t}, {b}, {h} | {form} | {s:.2} | {u:.2} | {:.2}x |",
                s / u
            );
        }
    }
}

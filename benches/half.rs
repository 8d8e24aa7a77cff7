//! bf16 and f16 beside f32 on the CPU (issue 50): the LSTM cell's nonlinearity (stdlib
//! operators, fused automatically) and the four row reductions along the last axis (softmax,
//! layer norm, RMS norm, logsumexp; stdlib functions) and a matrix product (`ovl::gemm`,
//! `[m, k] x [k, k]`: the half types widened into the f32 kernels), each recorded once on
//! placeholders and
//! compiled (`ovl::compile`, then `run_into` per call), forward only. Half tensors move half the
//! bytes; every operation computes in f32 and rounds once (`docs/half.md`), the reductions
//! accumulate in f32.
//!
//! `cargo bench --bench half -- [--quick] [--out DIR]` prints a table and writes
//! `DIR/half.json` (default `target/half-bench`). Each figure is the best of its repetitions,
//! and each measurement is repeated `rounds` times (3; 2 with `--quick`) with the minimum kept,
//! so that a machine shared with other work still gives its quietest run.
//! `scripts/bench-half.sh` runs it.
//!
//! Bytes counted: the LSTM cell reads the 4 gate pre-activations and `c` and writes `new_c` and
//! `new_h` (7 values per hidden unit); a row reduction reads `x` once and writes its result
//! once (`rows * cols` values, `rows` for logsumexp).

mod common;

use common::{machine, time_calls, Args, Timing};
use ndarray::{ArrayD, IxDyn};
use ovl::half::{bf16, f16};
use ovl::prelude::*;
use ovl_stdlib as ops;
use serde_json::json;
use std::time::Duration;

type BoxError = Box<dyn std::error::Error>;

/// An element type measured here, with a conversion from f32.
trait Elem: Float {
    fn of(x: f32) -> Self;
}
impl Elem for f32 {
    fn of(x: f32) -> Self {
        x
    }
}
impl Elem for bf16 {
    fn of(x: f32) -> Self {
        bf16::from_f32(x)
    }
}
impl Elem for f16 {
    fn of(x: f32) -> Self {
        f16::from_f32(x)
    }
}

/// Deterministic values in [-2, 2).
fn values<T: Elem>(shape: &[usize], seed: u64) -> ArrayD<T> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    ArrayD::from_shape_simple_fn(IxDyn(shape), || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        T::of(((s >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0)
    })
}

/// The kernels measured.
#[derive(Clone, Copy)]
enum Kernel {
    LstmCell,
    Softmax,
    LayerNorm,
    RmsNorm,
    LogSumExp,
    Gemm,
}

impl Kernel {
    const ALL: [Kernel; 6] = [
        Kernel::LstmCell,
        Kernel::Softmax,
        Kernel::LayerNorm,
        Kernel::RmsNorm,
        Kernel::LogSumExp,
        Kernel::Gemm,
    ];
    fn name(self) -> &'static str {
        match self {
            Kernel::LstmCell => "lstm cell",
            Kernel::Softmax => "softmax",
            Kernel::LayerNorm => "layernorm",
            Kernel::RmsNorm => "rmsnorm",
            Kernel::LogSumExp => "logsumexp",
            Kernel::Gemm => "gemm",
        }
    }
    /// (rows, cols) for the reductions, (batch, hidden) for the cell, (m, k) for the product.
    fn sizes(self, quick: bool) -> Vec<(usize, usize)> {
        match (self, quick) {
            (Kernel::LstmCell, true) => vec![(512, 1024)],
            (Kernel::Gemm, true) => vec![(512, 512)],
            (Kernel::Gemm, false) => vec![(20, 1024), (512, 512), (1024, 1024)],
            (Kernel::LstmCell, false) => vec![(128, 512), (512, 1024), (1024, 2048)],
            (_, true) => vec![(1024, 4096)],
            (_, false) => vec![(256, 1024), (1024, 4096), (8192, 1024)],
        }
    }
    /// Values read and written per call.
    fn values_moved(self, (a, b): (usize, usize)) -> usize {
        match self {
            Kernel::LstmCell => 7 * a * b,
            Kernel::LogSumExp => a * b + a,
            Kernel::Gemm => 2 * a * b + b * b,
            _ => 2 * a * b,
        }
    }
}

/// The kernel on `T`, compiled once; the best time of a call over `rounds` rounds.
fn measure<T: Elem>(
    kernel: Kernel,
    size: (usize, usize),
    reps: usize,
    rounds: usize,
) -> Result<Timing, BoxError> {
    let opts = Options::cpu();
    let (a, b) = size;
    let mut best: Option<Timing> = None;
    let mut keep = |t: Timing| {
        best = Some(match best {
            Some(b) if b.best <= t.best => b,
            _ => t,
        })
    };
    match kernel {
        Kernel::LstmCell => {
            let z = ovl::placeholder::<T>("z", &[a, 4 * b]);
            let c = ovl::placeholder::<T>("c", &[a, b]);
            let gates = ops::split(&z, 1, 4);
            let new_c = ops::add(
                ops::mul(&c, ops::sigmoid(&gates[2])),
                ops::mul(ops::sigmoid(&gates[0]), ops::tanh(&gates[1])),
            );
            let new_h = ops::mul(ops::tanh(&new_c), ops::sigmoid(&gates[3]));
            let step = ovl::compile((&z, &c), (&new_c, &new_h), &opts)?;
            let (zv, cv) = (
                Lazy::from(values::<T>(&[a, 4 * b], 1)),
                Lazy::from(values::<T>(&[a, b], 2)),
            );
            let mut outs = vec![ArrayD::from_elem(IxDyn(&[a, b]), T::of(0.0)); 2];
            for _ in 0..rounds {
                keep(time_calls(3, reps, || {
                    step.run_into((&zv, &cv), &mut outs)
                })?);
            }
        }
        Kernel::Gemm => {
            let x = ovl::placeholder::<T>("x", &[a, b]);
            let w = ovl::placeholder::<T>("w", &[b, b]);
            let y = ovl::gemm(&x, &w, false, false);
            let step = ovl::compile((&x, &w), &y, &opts)?;
            let (xv, wv) = (
                Lazy::from(values::<T>(&[a, b], 4)),
                Lazy::from(values::<T>(&[b, b], 5)),
            );
            let mut outs = vec![ArrayD::from_elem(IxDyn(&[a, b]), T::of(0.0))];
            for _ in 0..rounds {
                keep(time_calls(3, reps, || {
                    step.run_into((&xv, &wv), &mut outs)
                })?);
            }
        }
        _ => {
            let x = ovl::placeholder::<T>("x", &[a, b]);
            let (y, shape) = match kernel {
                Kernel::Softmax => (ops::softmax(&x), vec![a, b]),
                Kernel::LayerNorm => (ops::layernorm(&x, 1e-5), vec![a, b]),
                Kernel::RmsNorm => (ops::rmsnorm(&x, 1e-5), vec![a, b]),
                _ => (ops::logsumexp(&x), vec![a]),
            };
            let step = ovl::compile(&x, &y, &opts)?;
            let xv = Lazy::from(values::<T>(&[a, b], 3));
            let mut outs = vec![ArrayD::from_elem(IxDyn(&shape), T::of(0.0))];
            for _ in 0..rounds {
                keep(time_calls(3, reps, || step.run_into(&xv, &mut outs))?);
            }
        }
    }
    Ok(best.expect("at least one round"))
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() -> Result<(), BoxError> {
    let args = Args::parse("target/half-bench");
    if args.flag("--gpu") || args.flag("--gpu-only") {
        println!("half: GPU EXECUTION DID NOT RUN: this benchmark measures the CPU only");
    }
    let (reps, rounds) = if args.quick { (10, 2) } else { (30, 3) };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "half-precision benchmark on {} ({threads} threads)",
        machine()
    );
    println!(
        "{:<10} {:>12} {:>10} {:>10} {:>10} {:>9} {:>9} {:>9}",
        "kernel", "size", "f32 us", "bf16 us", "f16 us", "bf16 x", "f16 x", "bf16 GB/s"
    );
    let mut rows = Vec::new();
    for kernel in Kernel::ALL {
        for size in kernel.sizes(args.quick) {
            let f = measure::<f32>(kernel, size, reps, rounds)?;
            let b = measure::<bf16>(kernel, size, reps, rounds)?;
            let h = measure::<f16>(kernel, size, reps, rounds)?;
            let n = kernel.values_moved(size) as f64;
            println!(
                "{:<10} {:>12} {:>10.1} {:>10.1} {:>10.1} {:>9.2} {:>9.2} {:>9.1}",
                kernel.name(),
                format!("{}x{}", size.0, size.1),
                micros(f.best),
                micros(b.best),
                micros(h.best),
                f.best.as_secs_f64() / b.best.as_secs_f64(),
                f.best.as_secs_f64() / h.best.as_secs_f64(),
                b.gb_per_s(2.0 * n),
            );
            rows.push(json!({
                "kernel": kernel.name(),
                "size": [size.0, size.1],
                "values_moved": n,
                "f32_us": micros(f.best),
                "bf16_us": micros(b.best),
                "f16_us": micros(h.best),
                "f32_gb_s": f.gb_per_s(4.0 * n),
                "bf16_gb_s": b.gb_per_s(2.0 * n),
                "f16_gb_s": h.gb_per_s(2.0 * n),
            }));
        }
    }
    std::fs::create_dir_all(&args.out_dir)?;
    let path = args.out_dir.join("half.json");
    let report =
        json!({"machine": machine(), "threads": threads, "quick": args.quick, "results": rows});
    std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
    println!("wrote {}", path.display());
    Ok(())
}

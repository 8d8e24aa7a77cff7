//! A whole LSTM layer, ovl side (issue 32): input `x [T, B, I]`, per step
//! `z = x_t W + h U + b` (two matrix products, library calls) and the cell on `z` (gates in
//! Keras's order i, f, g, o: `c = σ(f) c + σ(i) tanh(g)`, `h = σ(o) tanh(c)`), from `h = c = 0`,
//! written the natural way with `ovl_stdlib` (T steps unrolled in one lazy graph), recorded once
//! on placeholders and compiled once (`ovl::compile`, f32, CPU). Forward returns every `h`;
//! forward + backward returns the gradients of `sum(h * g)` for `x`, `W`, `U` and `b`
//! (`ovl::backward`). Fusion stacks the T input products `x_t W` into one `[T B, I] x [I, 4H]`
//! product (and, in the backward, the `dz_t Wᵀ`), as cuDNN computes them: `ovl-fuse`'s
//! `stack.rs`, no rewriting by hand. Compile time (recording, fusing, compiling) is measured too.
//!
//! Fusion runs at the library's default level (3) unless `--opt N` says otherwise: the products
//! are library calls at every level; at level 3 each step's sums and cell are one kernel (the
//! epilogue of its `h U`), at level 1 the sum and the cell are separate kernels.
//!
//! `cargo bench --bench lstm_layer -- [--quick] [--out DIR]` writes `DIR/ovl.json` (times) and,
//! per size, the outputs of one run (`DIR/ovl_TxBxH_{h,dx,dw,du,db}.f32`, little-endian) that
//! `benches/lstm_layer_peers.py` checks against its NumPy reference before any peer runs;
//! the inputs come from the formula both sides share (`input`). `scripts/bench-lstm-layer.sh`
//! runs everything and writes the table.
//!
//! `-- --profile [--backward] [--iterations N] [--size T,B,H]` lists each kernel's
//! best time over N runs (5 unless told) of the forward (or forward + backward) pass of one
//! size, then the sums per operator name: where the layer's time goes.

mod common;
#[path = "common/lstm_layer_model.rs"]
mod model;

use common::{machine, time_calls, Args, Timing};
use model::{graph, inputs, outputs, write_f32, SIZES};
use ndarray::{ArrayD, IxDyn};
use ovl::{Lazy, Options};
use serde_json::json;
use std::time::{Duration, Instant};

struct Measured {
    /// Recording, fusing and compiling with an empty operator cache.
    compile_cold: Duration,
    /// The same after `ovl::clear_caches` (in-memory caches empty, compiled operators on disk).
    compile_warm: Duration,
    /// C++ compiler runs of the cold compile (one per distinct kernel): where its time goes.
    compiler_runs: u64,
    timing: Timing,
}

/// `--opt N`: another fusion level than the library's default (see the module's
/// documentation).
fn opt_level() -> u8 {
    let all: Vec<String> = std::env::args().collect();
    all.iter()
        .position(|a| a == "--opt")
        .and_then(|i| all.get(i + 1))
        .map_or(Options::cpu().opt_level.get(), |s| {
            s.parse().expect("--opt N")
        })
}

fn run(
    (t, b, h): (usize, usize, usize),
    backward: bool,
    reps: usize,
    out: &std::path::Path,
) -> Measured {
    let cache = out.join(format!("operator-cache-{t}x{b}x{h}"));
    let _ = std::fs::remove_dir_all(&cache);
    let options = Options {
        cache_dir: Some(cache),
        ..Options::cpu().with_opt_level(opt_level())
    };
    let [xv, wv, uv, bv, gv] = inputs(t, b, h);
    let build = || {
        ovl::clear_caches();
        let (ins, outs) = graph(t, b, h, backward);
        let c = ovl::compile(&ins[..], &outs[..], &options).expect("compile");
        let dests: Vec<ArrayD<f32>> = outs
            .iter()
            .map(|o| ArrayD::zeros(IxDyn(o.shape())))
            .collect();
        (c, dests)
    };
    let runs = ovl::compiler_invocations();
    let start = Instant::now();
    drop(build());
    let compile_cold = start.elapsed();
    let compiler_runs = ovl::compiler_invocations() - runs;
    let start = Instant::now();
    let (compiled, mut dests) = build();
    let compile_warm = start.elapsed();
    let feeds = [xv, wv, uv, bv, gv].map(Lazy::from);
    let call = |dests: &mut [ArrayD<f32>]| -> Result<(), ovl::Error> {
        if backward {
            compiled.run_into(
                (&feeds[0], &feeds[1], &feeds[2], &feeds[3], &feeds[4]),
                dests,
            )
        } else {
            compiled.run_into((&feeds[0], &feeds[1], &feeds[2], &feeds[3]), dests)
        }
    };
    call(&mut dests).expect("first run");
    let name = format!("ovl_{t}x{b}x{h}");
    if backward {
        for (k, which) in ["dx", "dw", "du", "db"].iter().enumerate() {
            write_f32(&out.join(format!("{name}_{which}.f32")), [&dests[k]]);
        }
    } else {
        write_f32(&out.join(format!("{name}_h.f32")), &dests);
    }
    let timing = time_calls(0, reps, || call(&mut dests)).expect("run");
    Measured {
        compile_cold,
        compile_warm,
        compiler_runs,
        timing,
    }
}

fn main() {
    let args = Args::parse("target/lstm-layer-bench");
    std::fs::create_dir_all(&args.out_dir).expect("output directory");
    let reps = if args.quick { 3 } else { 7 };
    // `--size T,B,H` runs one size only; `--forward-only` skips forward + backward.
    let all: Vec<String> = std::env::args().collect();
    let one = all
        .iter()
        .position(|a| a == "--size")
        .and_then(|i| all.get(i + 1))
        .map(|s| {
            let v: Vec<usize> = s
                .split(',')
                .map(|d| d.parse().expect("--size T,B,H"))
                .collect();
            (v[0], v[1], v[2])
        });
    let sizes: Vec<_> = match one {
        Some(size) => vec![size],
        None if args.quick => SIZES[..1].to_vec(),
        None => SIZES.to_vec(),
    };
    let forward_only = args.flag("--forward-only");
    if args.flag("--profile") {
        // Each kernel's best time in the forward pass of the first size, from host data.
        let (t, b, h) = sizes[0];
        let [xv, wv, uv, bv, gv] = inputs(t, b, h);
        let [x, w, u, bias, g] = [xv, wv, uv, bv, gv].map(Lazy::from);
        let outs = outputs([&x, &w, &u, &bias], args.flag("--backward").then_some(&g));
        let options = Options::cpu().with_opt_level(opt_level());
        let iterations = all
            .iter()
            .position(|a| a == "--iterations")
            .and_then(|i| all.get(i + 1))
            .map_or(5, |s| s.parse().expect("--iterations N"));
        let (_, profile) = ovl::profile(&outs[..], &options, iterations).expect("profile");
        // Each kernel's best time, then the sum per operator name.
        let mut sums: Vec<(String, f64, usize)> = Vec::new();
        for op in &profile.operators {
            let ms = op.min().as_secs_f64() * 1e3;
            println!("{ms:>10.3} ms  {}", op.name);
            match sums.iter_mut().find(|s| s.0 == op.name) {
                Some(s) => {
                    s.1 += ms;
                    s.2 += 1;
                }
                None => sums.push((op.name.clone(), ms, 1)),
            }
        }
        sums.sort_by(|a, b| b.1.total_cmp(&a.1));
        println!("-- per name (sum of best times, kernels)");
        for (name, ms, n) in sums {
            println!("{ms:>10.3} ms  {n:>4}  {name}");
        }
        return;
    }
    println!("LSTM layer, ovl (CPU, f32), {}", machine());
    let mut rows = Vec::new();
    for &(t, b, h) in &sizes {
        let fwd = run((t, b, h), false, reps, &args.out_dir);
        if forward_only {
            println!(
                "T={t} B={b} H=I={h}: forward {:.2} ms (median {:.2}); compile (cold / warm \
                 operator cache) {:.2} / {:.2} s",
                fwd.timing.best.as_secs_f64() * 1e3,
                fwd.timing.median.as_secs_f64() * 1e3,
                fwd.compile_cold.as_secs_f64(),
                fwd.compile_warm.as_secs_f64()
            );
            continue;
        }
        let fb = run((t, b, h), true, reps, &args.out_dir);
        println!(
            "T={t} B={b} H=I={h}: forward {:.2} ms (median {:.2}), forward + backward {:.2} ms \
             (median {:.2}); compile (cold / warm operator cache) {:.2} / {:.2} s and \
             {:.2} / {:.2} s; C++ compiler runs (cold) {} and {}",
            fwd.timing.best.as_secs_f64() * 1e3,
            fwd.timing.median.as_secs_f64() * 1e3,
            fb.timing.best.as_secs_f64() * 1e3,
            fb.timing.median.as_secs_f64() * 1e3,
            fwd.compile_cold.as_secs_f64(),
            fwd.compile_warm.as_secs_f64(),
            fb.compile_cold.as_secs_f64(),
            fb.compile_warm.as_secs_f64(),
            fwd.compiler_runs,
            fb.compiler_runs,
        );
        rows.push(json!({
            "t": t, "b": b, "h": h,
            "forward_ms": fwd.timing.best.as_secs_f64() * 1e3,
            "forward_median_ms": fwd.timing.median.as_secs_f64() * 1e3,
            "backward_ms": fb.timing.best.as_secs_f64() * 1e3,
            "backward_median_ms": fb.timing.median.as_secs_f64() * 1e3,
            "compile_forward_cold_s": fwd.compile_cold.as_secs_f64(),
            "compile_forward_warm_s": fwd.compile_warm.as_secs_f64(),
            "compile_backward_cold_s": fb.compile_cold.as_secs_f64(),
            "compile_backward_warm_s": fb.compile_warm.as_secs_f64(),
            "compiler_runs_forward": fwd.compiler_runs,
            "compiler_runs_backward": fb.compiler_runs,
        }));
    }
    let report = json!({
        "machine": machine(),
        "reps": reps,
        "opt_level": opt_level(),
        "sizes": rows,
    });
    let path = args.out_dir.join("ovl.json");
    std::fs::write(&path, serde_json::to_string_pretty(&report).expect("json"))
        .expect("write ovl.json");
    println!("wrote {}", path.display());
}

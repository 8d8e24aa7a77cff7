//! What a batch size given at run time costs: the fused LSTM cell forward kernel
//! (`tests/support/lstm_small_ops.rs`, fused into one operator) exported for any batch size with
//! `ovl::as_tensorflow_polymorphic` and compiled twice: as exported (the batch given at run
//! time) and specialised for the batch (every size a literal of the generated C++), timed in interleaved repetitions on all cores at B=20,H=650 and
//! B=1024,H=4096. Reports the time per element of each and how much faster the specialised
//! kernel is (issue 15's target: at most 5% at batch 1024). Both kernels' outputs are checked
//! to be bit-identical first.
//!
//! Run with `scripts/bench-dynamic-batch.sh` (or `cargo bench --bench dynamic_batch`, `--quick`
//! for fewer repetitions, `--out DIR` for where `dynamic_batch.md` goes).

#[path = "common/mod.rs"]
mod common;
#[path = "../tests/support/lstm_small_ops.rs"]
mod lstm_small_ops;

use lstm_small_ops::{lstm_cell, pseudo_random};
use ovl::prelude::*;
use ovl_codegen::CompileOptions;
use ovl_core::ir;
use ovl_core::{DType, HostTensor};
use ovl_runtime::{compile, CompiledOperator};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// The fused LSTM cell exported for any batch size (`ovl::as_tensorflow_polymorphic`, as a
/// TensorFlow user would): its one operator, with the batch given at run time.
fn symbolic_cell(h: usize) -> Result<ir::ExpressionDag, ovl::Error> {
    let bundle = ovl::as_tensorflow_polymorphic(|b| {
        let z = ovl::placeholder::<f32>("z", &[b, 4 * h]);
        let c = ovl::placeholder::<f32>("c", &[b, h]);
        let (new_c, new_h) = lstm_cell(&z, &c, 1.0);
        ovl::as_tensorflow((&z, &c), (&new_c, &new_h)).options(&Options::interpreter())
    })
    .build()?;
    let ops = &bundle.program.graph.as_ref().expect("a graph").operators;
    assert_eq!(ops.len(), 1, "the cell fuses into one kernel");
    assert_eq!(ops[0].symbol_count, 1, "the batch is given at run time");
    Ok(ops[0].clone())
}

fn tensors(list: &[ir::TensorType], seed: u64) -> Vec<HostTensor> {
    list.iter()
        .enumerate()
        .map(|(k, t)| {
            assert_eq!(t.dtype, DType::F32.to_ir() as i32);
            let shape: Vec<usize> = t.shape.iter().map(|&d| d as usize).collect();
            let data = pseudo_random((shape[0], shape[1..].iter().product()), seed + k as u64);
            HostTensor::from_vec(&shape, data.into_raw_vec_and_offset().0).expect("shape")
        })
        .collect()
}

fn time_once(
    op: &CompiledOperator,
    ins: &[&HostTensor],
    outs: &mut [HostTensor],
    s: &[u64],
) -> Duration {
    let start = Instant::now();
    op.run(ins, outs, s, 0).expect("the kernel runs");
    start.elapsed()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let args = common::Args::parse("target/dynamic-batch-bench");
    let reps = if args.quick { 15 } else { 60 };
    let options = CompileOptions::default();
    let mut report = String::new();
    let _ = writeln!(
        report,
        "# Batch size given at run time: the fused LSTM cell forward kernel\n\n{}; f32, all \
         cores, {reps} interleaved repetitions each; time per element of the [B, H] outputs.\n",
        common::machine()
    );
    let _ = writeln!(
        report,
        "| B | H | specialised best | symbolic best | specialised median | symbolic median | \
         specialised faster by (median) |\n|---|---|---|---|---|---|---|"
    );
    println!("{report}");
    for (b, h) in [(20usize, 650usize), (1024, 4096)] {
        let symbolic = symbolic_cell(h).expect("the cell exports for any batch");
        // The same operator with the batch a literal: what `ovl::as_tensorflow` at batch `b`
        // compiles.
        let concrete = ovl_core::symbolic::specialize_operator(&symbolic, &[b as u64])
            .expect("the cell specialises");
        let spec = compile(&concrete, &options).expect("the specialised kernel compiles");
        let sym = compile(&symbolic, &options).expect("the symbolic kernel compiles");
        let inputs = tensors(&concrete.inputs, 7);
        let ins: Vec<&HostTensor> = inputs.iter().collect();
        let mut out_spec: Vec<HostTensor> = tensors(&concrete.outputs, 100);
        let mut out_sym: Vec<HostTensor> = tensors(&concrete.outputs, 200);
        let batch = [b as u64];
        // Warm up (page in, wake the pool) and check that both compute the same bits.
        for _ in 0..3 {
            time_once(&spec, &ins, &mut out_spec, &[]);
            time_once(&sym, &ins, &mut out_sym, &batch);
        }
        for (x, y) in out_spec.iter().zip(&out_sym) {
            let (x, y) = (x.as_slice::<f32>().unwrap(), y.as_slice::<f32>().unwrap());
            assert!(
                x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits()),
                "the specialised and symbolic kernels differ"
            );
        }
        let (mut ts, mut tv) = (Vec::new(), Vec::new());
        for r in 0..reps {
            if r % 2 == 0 {
                ts.push(time_once(&spec, &ins, &mut out_spec, &[]));
                tv.push(time_once(&sym, &ins, &mut out_sym, &batch));
            } else {
                tv.push(time_once(&sym, &ins, &mut out_sym, &batch));
                ts.push(time_once(&spec, &ins, &mut out_spec, &[]));
            }
        }
        let elements = (b * h) as f64;
        let per = |d: Duration| d.as_secs_f64() * 1e9 / elements;
        let (bs, bv) = (*ts.iter().min().unwrap(), *tv.iter().min().unwrap());
        let (ms, mv) = (median(ts), median(tv));
        let faster = (mv.as_secs_f64() / ms.as_secs_f64() - 1.0) * 100.0;
        let line = format!(
            "| {b} | {h} | {:.3} ns | {:.3} ns | {:.3} ns | {:.3} ns | {faster:+.1}% |",
            per(bs),
            per(bv),
            per(ms),
            per(mv)
        );
        println!("{line}");
        let _ = writeln!(report, "{line}");
    }
    let _ = writeln!(
        report,
        "\nA positive last column: the specialised kernel is that much faster per element."
    );
    if std::fs::create_dir_all(&args.out_dir).is_ok() {
        let path = args.out_dir.join("dynamic_batch.md");
        if std::fs::write(&path, &report).is_ok() {
            println!("\nwrote {}", path.display());
        }
    }
}

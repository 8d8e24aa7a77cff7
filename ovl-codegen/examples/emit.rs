//! Prints the C++ generated for a few small operators, compiles and runs them, and reports the
//! cold (compiler) and warm (in-memory cache) times of `compile` and the cost of a tiny `run`.
//!
//! `cargo run -p ovl-codegen --release --example emit [-- --quiet]`

#[path = "../tests/common/mod.rs"]
mod common;

use common::*;
use ovl_codegen::CompileOptions;
use ovl_ir::ir::Op;
use ovl_ir::{DType, HostTensor};
use ovl_runtime::compile_with_outcome;
use std::time::Instant;

fn main() -> anyhow::Result<()> {
    let quiet = std::env::args().any(|a| a == "--quiet");
    let cache = tempfile::tempdir()?;
    let options = CompileOptions::default().with_cache_dir(cache.path());

    // out[i, j] = a[i, j] * 2 + b[i, j]
    let mut b = Builder::new("axpy", &[64, 1000]);
    b.input(DType::F32, &[64, 1000]);
    b.input(DType::F32, &[64, 1000]);
    b.output(DType::F32, &[64, 1000]);
    let i = b.position(0);
    let j = b.position(1);
    let x = b.read(IN, 0, &[i, j]);
    let y = b.read(IN, 1, &[i, j]);
    let two = b.f32(2.0);
    let t = b.op(Op::Mul, &[x, two]);
    let s = b.op(Op::Add, &[t, y]);
    b.write(OUT, 0, &[i, j], s);
    let axpy = b.build();

    // Row cumsum and a gather.
    let mut b = Builder::new("cumsum", &[64]);
    b.input(DType::F32, &[64, 100]);
    b.output(DType::F32, &[64, 100]);
    let r = b.position(0);
    let z = b.f32(0.0);
    let acc = b.var(z);
    let lo = b.i64(0);
    let hi = b.i64(100);
    let one = b.i64(1);
    let c = b.range(lo, hi, one);
    let x = b.read(IN, 0, &[r, c]);
    let s = b.op(Op::Add, &[acc, x]);
    b.assign(acc, s);
    b.write(OUT, 0, &[r, c], acc);
    b.end_range();
    let cumsum = b.build();

    let mut b = Builder::new("gather", &[8]);
    b.input(DType::F64, &[10]);
    b.input(DType::I32, &[8]);
    b.output(DType::F64, &[8]);
    let i = b.position(0);
    let k = b.read(IN, 1, &[i]);
    let v = b.read(IN, 0, &[k]);
    b.write(OUT, 0, &[i], v);
    let gather = b.build();

    for dag in [&axpy, &cumsum, &gather] {
        let t0 = Instant::now();
        let (op, outcome) = compile_with_outcome(dag, &options)?;
        let cold = t0.elapsed();
        let t1 = Instant::now();
        let (_, warm_outcome) = compile_with_outcome(dag, &options)?;
        let warm = t1.elapsed();
        if !quiet {
            println!("{}", std::fs::read_to_string(op.source_path())?);
        }
        println!(
            "{}: cold compile {cold:.3?} ({outcome:?}), warm compile {warm:.3?} ({warm_outcome:?}); \
             source {}",
            dag.name,
            op.source_path().display()
        );
    }

    // Warm path cost of a tiny operator: compile (memory hit) + run.
    let x = HostTensor::from_vec(&[10], (0..10).map(|v| v as f64).collect::<Vec<_>>()).unwrap();
    let idx = HostTensor::from_vec(&[8], vec![0i32, 1, 2, 3, 4, 5, 6, 9]).unwrap();
    let n = 100_000;
    let t = Instant::now();
    for _ in 0..n {
        let (op, _) = compile_with_outcome(&gather, &options)?;
        let mut out = zero_outputs(&gather);
        op.run(&[&x, &idx], &mut out, &[], 0)?;
    }
    println!(
        "tiny operator, warm: compile + run = {:.2?} per call",
        t.elapsed() / n
    );
    let (op, _) = compile_with_outcome(&gather, &options)?;
    let t = Instant::now();
    for _ in 0..n {
        let mut out = zero_outputs(&gather);
        op.run(&[&x, &idx], &mut out, &[], 0)?;
    }
    println!("tiny operator, run only = {:.2?} per call", t.elapsed() / n);
    let t = Instant::now();
    for _ in 0..n {
        std::hint::black_box(ovl_ir::hash::canonical_hash(std::hint::black_box(&gather)));
    }
    println!("canonical_hash of it = {:.2?}", t.elapsed() / n);

    // Bandwidth of a vectorized elementwise kernel: out = a + 1.5 * b over 2^25 f32 (384 MiB of
    // traffic), rank 1 and rank 2 workgroups.
    for shape in [vec![1u64 << 25], vec![4096, 8192]] {
        let mut b = Builder::new("triad", &shape);
        b.input(DType::F32, &shape);
        b.input(DType::F32, &shape);
        b.output(DType::F32, &shape);
        let pos: Vec<u32> = (0..shape.len() as u32).map(|a| b.position(a)).collect();
        let x = b.read(IN, 0, &pos);
        let y = b.read(IN, 1, &pos);
        let k = b.f32(1.5);
        let t = b.op(Op::Mul, &[y, k]);
        let s = b.op(Op::Add, &[x, t]);
        b.write(OUT, 0, &pos, s);
        let dag = b.build();
        let dims: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
        let n: usize = dims.iter().product();
        let a = HostTensor::from_vec(&dims, vec![1.0f32; n]).unwrap();
        let c = HostTensor::from_vec(&dims, vec![2.0f32; n]).unwrap();
        let op = ovl_runtime::compile(&dag, &options)?;
        let mut out = zero_outputs(&dag);
        for threads in [1, 0] {
            let mut best = std::time::Duration::MAX;
            for _ in 0..5 {
                let t = Instant::now();
                op.run(&[&a, &c], &mut out, &[], threads)?;
                best = best.min(t.elapsed());
            }
            let gbs = (3 * 4 * n) as f64 / best.as_secs_f64() / 1e9;
            println!("triad {shape:?}, threads {threads}: best {best:.2?} = {gbs:.1} GB/s");
        }
        assert!(out[0].as_slice::<f32>().unwrap().iter().all(|&v| v == 4.0));
    }
    Ok(())
}

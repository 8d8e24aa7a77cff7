//! Helpers of the integration tests: a hand builder of expression DAGs, a private cache
//! directory per test, and a comparison against the reference interpreter.

#![allow(dead_code)]

use ovl_codegen::{CacheOutcome, CompileOptions};
use ovl_ir::ir::{self, TensorKind};
use ovl_ir::{DType, HostTensor};
use ovl_runtime::{compile_with_outcome, CompiledOperator};
use std::sync::Arc;

#[allow(unused_imports)]
pub use TensorKind::{Input as IN, Local as LOC, Output as OUT};

pub use ovl_ir::builder::Builder;

/// A private cache directory (removed when dropped) and options using it.
pub struct TestCache {
    pub dir: tempfile::TempDir,
}

impl TestCache {
    pub fn new() -> TestCache {
        TestCache {
            dir: tempfile::tempdir().expect("a temporary directory"),
        }
    }

    pub fn options(&self) -> CompileOptions {
        CompileOptions::default().with_cache_dir(self.dir.path())
    }
}

/// Compiles `dag` into a fresh private cache.
pub fn compiled(dag: &ir::ExpressionDag) -> (Arc<CompiledOperator>, TestCache) {
    let cache = TestCache::new();
    let (op, outcome) = compile_with_outcome(dag, &cache.options())
        .unwrap_or_else(|e| panic!("compilation failed: {e}"));
    assert_eq!(outcome, CacheOutcome::Compiled);
    (op, cache)
}

/// Zero-filled outputs of the operator's declared types.
pub fn zero_outputs(dag: &ir::ExpressionDag) -> Vec<HostTensor> {
    dag.outputs
        .iter()
        .map(|t| {
            let shape: Vec<usize> = t.shape.iter().map(|&d| d as usize).collect();
            HostTensor::zeros(DType::from_ir(t.dtype).expect("dtype"), &shape)
        })
        .collect()
}

/// Runs the compiled operator with `threads` threads.
pub fn run(
    op: &CompiledOperator,
    dag: &ir::ExpressionDag,
    inputs: &[&HostTensor],
    threads: usize,
) -> Result<Vec<HostTensor>, ovl_codegen::RunError> {
    let mut outputs = zero_outputs(dag);
    op.run(inputs, &mut outputs, &[], threads)?;
    Ok(outputs)
}

/// Bit patterns of every element, so that 0.0 != -0.0; every NaN is mapped to one pattern
/// (the sign and payload of a NaN are not specified: they depend on operand order in the
/// hardware, which compilers may commute).
pub fn bits(t: &HostTensor) -> Vec<u64> {
    use ovl_ir::TensorData as D;
    match &t.data {
        D::F32(v) => v
            .iter()
            .map(|x| {
                if x.is_nan() {
                    u64::MAX
                } else {
                    x.to_bits() as u64
                }
            })
            .collect(),
        D::F64(v) => v
            .iter()
            .map(|x| if x.is_nan() { u64::MAX } else { x.to_bits() })
            .collect(),
        D::I8(v) => v.iter().map(|&x| x as u8 as u64).collect(),
        D::I16(v) => v.iter().map(|&x| x as u16 as u64).collect(),
        D::I32(v) => v.iter().map(|&x| x as u32 as u64).collect(),
        D::I64(v) => v.iter().map(|&x| x as u64).collect(),
        D::U8(v) => v.iter().map(|&x| x as u64).collect(),
        D::U16(v) => v.iter().map(|&x| x as u64).collect(),
        D::U32(v) => v.iter().map(|&x| x as u64).collect(),
        D::U64(v) => v.clone(),
        D::Bool(v) => v.iter().map(|&x| x as u64).collect(),
        D::F16(v) => v
            .iter()
            .map(|x| {
                if x.is_nan() {
                    u64::MAX
                } else {
                    x.to_bits() as u64
                }
            })
            .collect(),
        D::BF16(v) => v
            .iter()
            .map(|x| {
                if x.is_nan() {
                    u64::MAX
                } else {
                    x.to_bits() as u64
                }
            })
            .collect(),
    }
}

/// Element `i` of a tensor, printed.
pub fn element(t: &HostTensor, i: usize) -> String {
    ovl_ir::with_tensor_data!(&t.data, v => format!("{:?}", v[i]))
}

/// Runs the operator compiled and in the reference interpreter and asserts bit-identical
/// outputs (NaN matching any NaN) and the same error-or-not; returns the compiled outputs.
pub fn same_as_interpreter(
    dag: &ir::ExpressionDag,
    inputs: &[&HostTensor],
    threads: usize,
) -> Vec<HostTensor> {
    let (op, _cache) = compiled(dag);
    let got = run(&op, dag, inputs, threads);
    let mut expected = zero_outputs(dag);
    let interp = ovl_core::interp::interpret(dag, inputs, &mut expected);
    match (&got, &interp) {
        (Ok(g), Ok(())) => {
            for (k, (g, e)) in g.iter().zip(&expected).enumerate() {
                assert_eq!(g.dtype(), e.dtype());
                let (gb, eb) = (bits(g), bits(e));
                for (i, (x, y)) in gb.iter().zip(&eb).enumerate() {
                    assert_eq!(
                        x,
                        y,
                        "output {k} element {i} differs: compiled {:?} interpreter {:?}\ninputs \
                         {:?}\n{}",
                        g.data.dtype(),
                        e.data.dtype(),
                        inputs.iter().map(|t| element(t, i)).collect::<Vec<_>>(),
                        ovl_ir::text::to_text(dag)
                    );
                }
            }
            got.expect("checked")
        }
        _ => panic!("compiled: {got:?}\ninterpreter: {interp:?}"),
    }
}

/// The issue's `first_negative`, one worker per row of `x: f32[rows, cols]`: `out0[p] = 7`,
/// then `j` walks along row `p` while `x[p, j] >= 0`, then `out1[p] = j`. A row without a
/// negative element walks past its end: an out-of-bounds read that, unless it ends the worker,
/// repeats forever.
pub fn first_negative_dag(rows: u64, cols: u64) -> ir::ExpressionDag {
    use ovl_ir::ir::Op;
    let mut b = Builder::new("first_negative", &[rows]);
    b.input(DType::F32, &[rows, cols]);
    b.output(DType::I64, &[rows]);
    b.output(DType::I64, &[rows]);
    let p = b.position(0);
    let seven = b.i64(7);
    b.write(OUT, 0, &[p], seven);
    let zero = b.i64(0);
    let j = b.var(zero);
    b.while_begin();
    let x = b.read(IN, 0, &[p, j]);
    let z = b.f32(0.0);
    let c = b.op(Op::Ge, &[x, z]);
    b.while_cond(c);
    let one = b.i64(1);
    let next = b.op(Op::Add, &[j, one]);
    b.assign(j, next);
    b.while_end();
    b.write(OUT, 1, &[p], j);
    b.build()
}

/// The index of the first negative element of `row` at or after `start`, or None.
pub fn first_negative_from(row: &[f32], start: usize) -> Option<usize> {
    (start..row.len()).find(|&k| row[k] < 0.0)
}

/// A fault three loops deep, one worker per row of `x: f32[rows, cols]`: for a in 0..2, for b
/// in 0..3, a while loop walks from `k = 3a + b` to the next negative element of the row and
/// adds `k` to the sum written to `out0[p]` (cols must be at least 6).
pub fn nested_walk_dag(rows: u64, cols: u64) -> ir::ExpressionDag {
    use ovl_ir::ir::Op;
    let mut b = Builder::new("nested_walk", &[rows]);
    b.input(DType::F32, &[rows, cols]);
    b.output(DType::I64, &[rows]);
    let p = b.position(0);
    let (zero, one, two, three) = (b.i64(0), b.i64(1), b.i64(2), b.i64(3));
    let sum = b.var(zero);
    let a = b.range(zero, two, one);
    let bi = b.range(zero, three, one);
    let a3 = b.op(Op::Mul, &[a, three]);
    let start = b.op(Op::Add, &[a3, bi]);
    let k = b.var(start);
    b.while_begin();
    let x = b.read(IN, 0, &[p, k]);
    let z = b.f32(0.0);
    let c = b.op(Op::Ge, &[x, z]);
    b.while_cond(c);
    let next = b.op(Op::Add, &[k, one]);
    b.assign(k, next);
    b.while_end();
    let s = b.op(Op::Add, &[sum, k]);
    b.assign(sum, s);
    b.end_range();
    b.end_range();
    b.write(OUT, 0, &[p], sum);
    b.build()
}

/// What [`nested_walk_dag`] computes for one row: the sum, or None when a walk leaves the row.
pub fn nested_walk_row(row: &[f32]) -> Option<i64> {
    let mut sum = 0i64;
    for a in 0..2 {
        for b in 0..3 {
            sum += first_negative_from(row, 3 * a + b)? as i64;
        }
    }
    Some(sum)
}

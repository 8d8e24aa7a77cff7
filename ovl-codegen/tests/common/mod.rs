//! Helpers of the integration tests: a hand builder of expression DAGs, a private cache
//! directory per test, and a comparison against the reference interpreter.

#![allow(dead_code)]

use ovl_codegen::{compile_with_outcome, CacheOutcome, CompileOptions, CompiledOperator};
use ovl_ir::ir::{self, TensorKind};
use ovl_ir::{DType, HostTensor};
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
    op.run(inputs, &mut outputs, threads)?;
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

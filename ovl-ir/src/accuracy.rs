//! The math contract across backends: how far a backend's math function may be from the
//! reference interpreter's, in units in the last place, per function, dtype and backend. Every
//! operation not listed here (arithmetic, `sqrt`, `rsqrt`'s `1 / sqrt`, `fma`, `fmod`, `floor`,
//! `ceil`, `round`, casts, comparisons) gives the same bits on every backend.
//!
//! The interpreter computes with Rust's `std` (the host's C library) and the `libm` crate for
//! `erf`. The bounds, vs. the interpreter, for finite results:
//!
//! - **C++**: f32 `exp` (the prelude's, at most 1 ulp from the correctly rounded value), `tanh`
//!   (the prelude's rational approximation, at most 6 ulp; `tests/core/math_accuracy.rs`), `sigmoid`
//!   (the prelude's, at most 4 ulp from the f32 formula the interpreter computes), `erf` (the C
//!   library's, 1 ulp from the `libm` crate's), f64 `erf` 1; every other function is the same C
//!   library the interpreter calls.
//! - **CUDA**: the device math library (f32 `tan`, `pow` and `atan2` computed in f64 and
//!   rounded). f32: the largest differences measured on an NVIDIA H200 over 262,156 inputs per
//!   function (issue 29): `exp`, `exp2`, `log10`, `asin` 2; `sinh`, `cosh`, `tanh`, `sigmoid` 3;
//!   `sin`, `cos`, `tan`, `atan`, `atan2`, `log`, `log1p`, `expm1`, `erf`, `pow` 1; `log2` 1 and
//!   `acos` 2 (the CUDA Math API's documented maxima). f64: the CUDA Math API's documented
//!   maximum plus 1 for the host's own rounding (measured: 1 to 3).
//!
//! A value computed through several functions may be off by up to the sum of their bounds
//! ([`value_ulps`]) in ulps of the value, or, where terms cancel (`atan2(x, y) - log(|y|)`, two
//! results near 1 whose difference is near 0.01), in ulps of the largest function result it is
//! computed from: each result's error is in ulps of that result, and a sum or difference keeps
//! the errors' size while the value shrinks (measured on an H200: 64 ulps of such a
//! difference, within 7 ulps of its terms). [`with_function_results`] gives those results.
//! Tests compare a backend with the interpreter within these bounds and bit for bit
//! everywhere else.

use crate::dtype::DType;
use crate::ir::{self, Op};
use crate::typed::{Expr, Inst, Kernel, TensorId};

/// A backend whose math functions are not the interpreter's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MathBackend {
    /// The C++ backend (`ovl-codegen`'s prelude and the host's C library).
    Cpp,
    /// The CUDA backend (the device's math library).
    Cuda,
}

/// The most ulps `op` on `d`, computed by `backend`, may be from the interpreter's result
/// (finite results; a NaN matches any NaN). 0: the same bits. A half type computes in f32 and
/// rounds once, so a function off by any ulps of f32 is off by at most one of the half type.
pub fn ulps(op: Op, d: DType, backend: MathBackend) -> u32 {
    use MathBackend::{Cpp, Cuda};
    if d.is_half() {
        return ulps(op, DType::F32, backend).min(1);
    }
    match (backend, d) {
        (Cpp, DType::F32) => match op {
            Op::Exp | Op::Erf => 1,
            Op::Tanh => 6,
            Op::Sigmoid => 4,
            _ => 0,
        },
        (Cpp, DType::F64) => match op {
            Op::Erf => 1,
            _ => 0,
        },
        (Cuda, DType::F32) => match op {
            Op::Sin
            | Op::Cos
            | Op::Tan
            | Op::Atan
            | Op::Atan2
            | Op::Log
            | Op::Log2
            | Op::Log1p
            | Op::Expm1
            | Op::Erf
            | Op::Pow => 1,
            Op::Exp | Op::Exp2 | Op::Log10 | Op::Asin | Op::Acos => 2,
            Op::Sinh | Op::Cosh | Op::Tanh | Op::Sigmoid => 3,
            _ => 0,
        },
        (Cuda, DType::F64) => match op {
            Op::Exp | Op::Exp2 | Op::Expm1 | Op::Log | Op::Log2 | Op::Log10 | Op::Log1p => 2,
            Op::Cosh | Op::Tanh | Op::Sigmoid => 2,
            Op::Sin
            | Op::Cos
            | Op::Tan
            | Op::Asin
            | Op::Acos
            | Op::Atan
            | Op::Atan2
            | Op::Sinh
            | Op::Erf
            | Op::Pow => 3,
            _ => 0,
        },
        _ => 0,
    }
}

/// The bound of the value of expression `k` of `dag` on `backend`: the sum of [`ulps`] over the
/// math functions it is computed from (each expression counted once; through arithmetic,
/// selects and casts, not through reads, variables or accumulators, whose values a test
/// compares where they are written).
pub fn value_ulps(dag: &ir::ExpressionDag, k: usize, backend: MathBackend) -> u32 {
    functions_of(dag, k, backend)
        .into_iter()
        .map(|(_, u)| u)
        .fold(0u32, u32::saturating_add)
}

/// The math functions with a bound on `backend` that the value of expression `k` is computed
/// from (as [`value_ulps`] walks), with their bounds.
fn functions_of(dag: &ir::ExpressionDag, k: usize, backend: MathBackend) -> Vec<(usize, u32)> {
    let mut seen = vec![false; dag.expressions.len()];
    let mut stack = vec![k];
    let mut found = Vec::new();
    while let Some(i) = stack.pop() {
        let Some(e) = dag.expressions.get(i) else {
            continue;
        };
        if std::mem::replace(&mut seen[i], true) {
            continue;
        }
        let Ok(op) = Op::try_from(e.code) else {
            continue;
        };
        if matches!(
            op,
            Op::Read | Op::Variable | Op::Accumulator | Op::Range | Op::Position | Op::Const
        ) {
            continue;
        }
        if let Some(d) = DType::from_ir(e.dtype) {
            let u = ulps(op, d, backend);
            if u > 0 {
                found.push((i, u));
            }
        }
        stack.extend(e.operands.iter().map(|&o| o as usize).filter(|&o| o < i));
    }
    found.sort_unstable();
    found
}

/// `dag` with the results of the math functions its outputs are computed from (those with a
/// bound on `backend`) written to new outputs, at the same indices as the value they feed, and
/// for each original output the numbers of its new outputs: what a test needs to compare a
/// value that cancels on the scale of its terms (see the module). `None` when the program
/// writes an output inside a loop or branch, or the result does not validate.
pub fn with_function_results(
    dag: &ir::ExpressionDag,
    backend: MathBackend,
) -> Option<(ir::ExpressionDag, Vec<Vec<usize>>)> {
    let kernel = Kernel::decode(dag).ok()?;
    let mut out = dag.clone();
    let mut extra = vec![Vec::new(); dag.outputs.len()];
    for x in &kernel.exprs {
        let Some((t, indices, value)) = output_write(x) else {
            continue;
        };
        let functions = functions_of(dag, value as usize, backend);
        if functions.is_empty() {
            continue;
        }
        if x.block.is_some() {
            return None;
        }
        let output = dag.outputs.get(t as usize)?;
        for (f, _) in functions {
            let index = out.outputs.len();
            out.outputs.push(ir::TensorType {
                dtype: dag.expressions[f].dtype,
                ..output.clone()
            });
            extra[t as usize].push(index);
            let write = Inst::Write {
                tensor: TensorId {
                    kind: ir::TensorKind::Output,
                    index: index as u32,
                },
                indices: indices.to_vec(),
                value: f as u32,
            };
            out.expressions.push(write.encode(None));
        }
    }
    crate::validate::validate(&out).ok()?;
    Some((out, extra))
}

/// A WRITE of an output: the output, the indices and the value.
fn output_write(x: &Expr) -> Option<(u32, &[u32], u32)> {
    match &x.inst {
        Inst::Write {
            tensor,
            indices,
            value,
        } if tensor.kind == ir::TensorKind::Output => Some((tensor.index, indices, *value)),
        _ => None,
    }
}

/// For each output of `dag` (a valid operator): the largest [`value_ulps`] of a value written
/// to it on `backend`.
pub fn output_ulps(dag: &ir::ExpressionDag, backend: MathBackend) -> Vec<u32> {
    let mut out = vec![0u32; dag.outputs.len()];
    let kernel = Kernel::from_validated(dag);
    for x in &kernel.exprs {
        let Some((t, _, value)) = output_write(x) else {
            continue;
        };
        if let Some(slot) = out.get_mut(t as usize) {
            *slot = (*slot).max(value_ulps(dag, value as usize, backend));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{math_f32, math_f32_prelude, math_f64, matmul};

    #[test]
    fn exact_operations_have_no_allowance() {
        for backend in [MathBackend::Cpp, MathBackend::Cuda] {
            for op in [
                Op::Add,
                Op::Mul,
                Op::Div,
                Op::Sqrt,
                Op::Rsqrt,
                Op::Fma,
                Op::Floor,
            ] {
                assert_eq!(ulps(op, DType::F32, backend), 0, "{op:?}");
                assert_eq!(ulps(op, DType::F64, backend), 0, "{op:?}");
            }
            assert_eq!(output_ulps(&matmul(2, 3, 2), backend), vec![0]);
        }
    }

    #[test]
    fn a_value_sums_the_functions_it_is_computed_from() {
        // math_f32: sqrt(|x|) + log1p(|x|), sin(x) * atan(x), floor(x) - round(x), isnan(x).
        assert_eq!(
            output_ulps(&math_f32(8), MathBackend::Cuda),
            vec![1, 2, 0, 0]
        );
        assert_eq!(
            output_ulps(&math_f32(8), MathBackend::Cpp),
            vec![0, 0, 0, 0]
        );
        assert_eq!(
            output_ulps(&math_f32_prelude(8), MathBackend::Cpp),
            vec![1, 6, 4]
        );
        // exp(x) + sigmoid(x), erf(x) * pow(|y|, 2.5), atan2(x, y) - log(|y|) + tanh(x).
        let f64_cuda = output_ulps(&math_f64(8), MathBackend::Cuda);
        assert_eq!(&f64_cuda[..3], &[4, 6, 7]);
    }

    #[test]
    fn function_results_are_written_beside_the_values_they_feed() {
        let dag = math_f64(8);
        let (with, extra) = with_function_results(&dag, MathBackend::Cuda).expect("top level");
        // exp, sigmoid | erf, pow | atan2, log, tanh | isinf: none.
        let counts: Vec<usize> = extra.iter().map(Vec::len).collect();
        assert_eq!(counts, vec![2, 2, 3, 0]);
        assert_eq!(with.outputs.len(), dag.outputs.len() + 7);
        let codes: Vec<i32> = extra[2]
            .iter()
            .map(|&o| {
                let w = with
                    .expressions
                    .iter()
                    .find(|e| {
                        e.code == Op::Write as i32
                            && e.tensor.as_ref().is_some_and(|t| t.index as usize == o)
                    })
                    .expect("a write of the new output");
                with.expressions[*w.operands.last().expect("a value") as usize].code
            })
            .collect();
        assert_eq!(
            codes,
            vec![Op::Atan2 as i32, Op::Log as i32, Op::Tanh as i32]
        );
        // On the C++ backend only f64 erf has a bound.
        let (_, cpp) = with_function_results(&dag, MathBackend::Cpp).expect("top level");
        assert_eq!(
            cpp.iter().map(Vec::len).collect::<Vec<_>>(),
            vec![0, 1, 0, 0]
        );
    }
}

//! Batching one operator over a new leading axis: the IR transform behind `ovl::vmap`.
//!
//! [`batch_operator`] turns an operator written for one example into the same operator over a
//! batch of `B` examples:
//!
//! - the workgroup `[w0, w1, ..]` becomes `[B, w0, w1, ..]`, and every `position` axis moves up
//!   by one (a new `position` of axis 0, the example's number, is the first expression);
//! - a *batched* input of type `T[s..]` becomes `T[B, s..]`, and each of its reads gains the
//!   example's number as a leading index; a *shared* input is read as before (every example
//!   reads the same tensor);
//! - every output `T[s..]` becomes `T[B, s..]`, and each write gains the leading index;
//! - everything else (local tensors, variables, accumulators, staged loops, `while`, branches,
//!   data-dependent indices) is unchanged: the body of one worker is the same program, so each
//!   example computes exactly what the unbatched operator computes on it, bit for bit.
//!
//! **Invariant:** the result passes [`crate::validate::validate`] (else the transform is an
//! error naming the operator and its source line), and for every example `b`, slice `b` of each
//! output of the batched operator equals the output of the unbatched operator on slice `b` of
//! the batched inputs and the shared inputs: the workers of example `b` are the workers of the
//! unbatched operator, reading and writing only slice `b`. An output element no worker writes is
//! zero in both. A fault is reported for the first faulting worker in row-major order, which is
//! the first faulting worker of the first faulting example.

use crate::ir::{self, TensorKind};
use crate::names::{at, defined_at};
use crate::typed::{Inst, Kernel};
use thiserror::Error;

/// Why an operator could not be batched.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("cannot batch operator `{operator}`{}: {message}", at(.defined_at))]
pub struct BatchError {
    /// The operator's name.
    pub operator: String,
    /// `file:line` of the operator's function, or empty when unknown.
    pub defined_at: String,
    /// What is wrong.
    pub message: String,
}

/// The operator `dag` batched over a new leading axis of size `batch` (see the module
/// documentation). `batched_inputs[i]` says whether input `i` gains the batch axis (`true`) or
/// is shared by every example (`false`); it has one entry per input of `dag`.
///
/// ```
/// use ovl_ir::builder::{Builder, IN, OUT};
/// use ovl_ir::{batch::batch_operator, DType};
///
/// // out[i] = x[i] * w[i], one worker per element.
/// let mut b = Builder::new("scale", &[3]);
/// let x = b.input(DType::F32, &[3]);
/// let w = b.input(DType::F32, &[3]);
/// let out = b.output(DType::F32, &[3]);
/// let i = b.position(0);
/// let xi = b.read(IN, x, &[i]);
/// let wi = b.read(IN, w, &[i]);
/// let v = b.op(ovl_ir::ir::Op::Mul, &[xi, wi]);
/// b.write(OUT, out, &[i], v);
///
/// // x batched, w shared, over 5 examples.
/// let batched = batch_operator(&b.build(), &[true, false], 5).unwrap();
/// assert_eq!(batched.workgroup_shape, vec![5, 3]);
/// assert_eq!(batched.inputs[0].shape, vec![5, 3]);
/// assert_eq!(batched.inputs[1].shape, vec![3]);
/// assert_eq!(batched.outputs[0].shape, vec![5, 3]);
/// ```
pub fn batch_operator(
    dag: &ir::ExpressionDag,
    batched_inputs: &[bool],
    batch: u64,
) -> Result<ir::ExpressionDag, BatchError> {
    let error = |message: String| BatchError {
        operator: dag.name.clone(),
        defined_at: defined_at(dag),
        message,
    };
    if batched_inputs.len() != dag.inputs.len() {
        return Err(error(format!(
            "it has {} input(s) but {} were described as batched or shared; describe each input",
            dag.inputs.len(),
            batched_inputs.len()
        )));
    }
    crate::validate::validate(dag).map_err(|e| error(format!("it is not valid IR: {e}")))?;
    // A library call batched over all its inputs is the same call with one more batch axis
    // (its empty body needs no change); with a shared input, its reference program is batched.
    let expanded;
    let dag = if crate::library::is_library_call(dag) && !batched_inputs.iter().all(|&b| b) {
        expanded = crate::library::expand(dag).into_owned();
        &expanded
    } else {
        dag
    };
    let with_batch = |t: &ir::TensorType| batched_type(t, batch);
    let mut out = ir::ExpressionDag {
        symbolic_workgroup: batched_symbolic(&dag.symbolic_workgroup),
        symbol_count: dag.symbol_count,
        version: dag.version,
        name: dag.name.clone(),
        expressions: Vec::with_capacity(dag.expressions.len() + 1),
        workgroup_shape: batched_shape(batch, &dag.workgroup_shape),
        inputs: dag
            .inputs
            .iter()
            .zip(batched_inputs)
            .map(|(t, &b)| if b { with_batch(t) } else { t.clone() })
            .collect(),
        outputs: dag.outputs.iter().map(with_batch).collect(),
        locals: dag.locals.clone(),
        source: dag.source.clone(),
        // The gradient graph of an operator is a lazy-graph matter (ovl-core batches it).
        gradient: None,
        library_call: dag.library_call,
    };
    if out.library_call.is_some() {
        // Its types say it all.
        crate::validate::validate(&out)
            .map_err(|e| error(format!("the batched call is not valid IR: {e}")))?;
        return Ok(out);
    }
    // %0: the example's number, visible everywhere (top level, first).
    out.expressions
        .push(Inst::Position { axis: 0 }.encode(Some(crate::DType::I64)));
    const EXAMPLE: u32 = 0;
    let kernel = Kernel::from_validated(dag);
    for (e, x) in dag.expressions.iter().zip(&kernel.exprs) {
        let mut e = e.clone();
        for o in &mut e.operands {
            *o += 1;
        }
        match &x.inst {
            Inst::Position { axis } => e.axis = axis + 1,
            Inst::Read { tensor, .. } | Inst::Write { tensor, .. } => {
                let gains_axis = match tensor.kind {
                    TensorKind::Output => true,
                    TensorKind::Input => batched_inputs
                        .get(tensor.index as usize)
                        .copied()
                        .unwrap_or(false),
                    _ => false,
                };
                if gains_axis {
                    e.operands.insert(0, EXAMPLE);
                }
            }
            _ => {}
        }
        out.expressions.push(e);
    }
    crate::validate::validate(&out).map_err(|e| {
        error(format!(
            "the batched operator (batch {batch}) is not valid IR: {e}"
        ))
    })?;
    Ok(out)
}

/// `shape` with a leading axis of `batch`.
pub fn batched_shape(batch: u64, shape: &[u64]) -> Vec<u64> {
    std::iter::once(batch)
        .chain(shape.iter().copied())
        .collect()
}

/// `t` with a leading axis of `batch`: its symbolic dimensions move one place right.
pub fn batched_type(t: &ir::TensorType, batch: u64) -> ir::TensorType {
    ir::TensorType {
        dtype: t.dtype,
        shape: batched_shape(batch, &t.shape),
        symbolic: batched_symbolic(&t.symbolic),
    }
}

/// Symbolic dimensions of a shape that gains a leading axis: each moves one place right.
pub fn batched_symbolic(dims: &[ir::SymbolicDim]) -> Vec<ir::SymbolicDim> {
    dims.iter()
        .map(|d| ir::SymbolicDim {
            dim: d.dim + 1,
            ..*d
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::{Builder, IN, LOC, OUT};
    use crate::ops::Combiner;
    use crate::DType;

    /// Row sums with an accumulator, a local tensor and a data-dependent index.
    fn row_sums() -> ir::ExpressionDag {
        let mut b = Builder::new("row_sums", &[2]);
        let x = b.input(DType::F32, &[2, 4]);
        let idx = b.input(DType::I32, &[2]);
        let out = b.output(DType::F32, &[2]);
        let picked = b.output(DType::F32, &[2]);
        let loc = b.local(DType::F32, &[1], crate::Literal::Float(0.0));
        let r = b.position(0);
        let zero = b.f32(0.0);
        let acc = b.accumulator(Combiner::Sum, zero);
        let start = b.i64(0);
        let end = b.i64(4);
        let step = b.i64(1);
        let j = b.range(start, end, step);
        let v = b.read(IN, x, &[r, j]);
        b.accumulate(acc, v);
        b.end_range();
        let z = b.i64(0);
        b.write(LOC, loc, &[z], acc);
        let l = b.read(LOC, loc, &[z]);
        b.write(OUT, out, &[r], l);
        let k = b.read(IN, idx, &[r]);
        let xv = b.read(IN, x, &[r, k]);
        b.write(OUT, picked, &[r], xv);
        b.build()
    }

    #[test]
    fn reads_and_writes_gain_the_example_index() {
        let dag = row_sums();
        let batched = batch_operator(&dag, &[true, false], 3).unwrap();
        assert_eq!(batched.workgroup_shape, vec![3, 2]);
        assert_eq!(batched.inputs[0].shape, vec![3, 2, 4]);
        assert_eq!(batched.inputs[1].shape, vec![2]);
        assert_eq!(batched.outputs[0].shape, vec![3, 2]);
        assert_eq!(batched.outputs[1].shape, vec![3, 2]);
        assert_eq!(batched.locals, dag.locals);
        assert_eq!(batched.expressions.len(), dag.expressions.len() + 1);
        let (before, after) = (
            Kernel::decode(&dag).unwrap(),
            Kernel::decode(&batched).unwrap(),
        );
        let pairs = dag.expressions.iter().zip(&batched.expressions[1..]);
        for ((old, new), (x, y)) in pairs.zip(before.exprs.iter().zip(&after.exprs[1..])) {
            let gains = match &y.inst {
                Inst::Read { tensor, .. } | Inst::Write { tensor, .. } => {
                    tensor.kind == TensorKind::Output
                        || (tensor.kind == TensorKind::Input && tensor.index == 0)
                }
                _ => false,
            };
            let shifted: Vec<u32> = old.operands.iter().map(|o| o + 1).collect();
            if gains {
                assert_eq!(new.operands[0], 0);
                assert_eq!(new.operands[1..], shifted[..]);
            } else {
                assert_eq!(new.operands, shifted);
            }
            if let Inst::Position { axis } = x.inst {
                assert_eq!(y.inst, Inst::Position { axis: axis + 1 });
            }
        }
    }

    #[test]
    fn batch_zero_is_a_valid_empty_workgroup() {
        let batched = batch_operator(&row_sums(), &[true, true], 0).unwrap();
        assert_eq!(batched.workgroup_shape, vec![0, 2]);
        assert_eq!(batched.inputs[1].shape, vec![0, 2]);
    }

    #[test]
    fn a_wrong_description_of_the_inputs_is_an_error() {
        let e = batch_operator(&row_sums(), &[true], 3).unwrap_err();
        assert!(e.to_string().contains("operator `row_sums`"), "{e}");
        assert!(e.to_string().contains("src/ops.rs:12"), "{e}");
        assert!(e.to_string().contains("2 input(s) but 1"), "{e}");
    }

    #[test]
    fn a_batch_too_large_for_memory_is_an_error() {
        let e = batch_operator(&row_sums(), &[true, false], u64::MAX / 2).unwrap_err();
        assert!(
            e.to_string().contains("cannot batch operator `row_sums`"),
            "{e}"
        );
    }

    #[test]
    fn invalid_input_ir_is_an_error_not_a_panic() {
        let mut dag = row_sums();
        dag.expressions[3].operands = vec![999];
        let e = batch_operator(&dag, &[true, false], 2).unwrap_err();
        assert!(e.to_string().contains("not valid IR"), "{e}");
    }
}

//! Operators built by hand for batching over a new leading axis, shared by `ovl::vmap` (lazy
//! graphs) and `ovl::export::batch_program` (exported programs):
//!
//! - [`broadcast_operator`] (`vmap_broadcast`): a tensor repeated along a new leading axis;
//! - [`sum_operator`] (`vmap_sum`): the sum over the leading axis, an accumulator in the order
//!   `proto/ovl.proto` defines (so every backend gives the same bits);
//! - [`first_example_operator`] (`vmap_first`): a tensor placed at example 0 of a new leading
//!   axis, zeros at every other example (the gradient flowing into an output that is the same
//!   for every example, spread so that a sum over the examples counts it once).
//!
//! Each is one worker per element of its result and writes once, unconditionally, at the
//! worker's own position (so it fuses like any elementwise operator). The shapes are concrete:
//! none of them carries symbolic sizes.

use crate::builder::{Builder, IN, OUT};
use crate::dtype::{DType, Literal};
use crate::ir::{self, Op};

fn source_here(line: u32) -> Option<ir::SourceLocation> {
    Some(ir::SourceLocation {
        file: file!().into(),
        line,
        column: 1,
    })
}

/// `shape` with a leading axis of `batch`.
fn with_batch(batch: u64, shape: &[u64]) -> Vec<u64> {
    std::iter::once(batch)
        .chain(shape.iter().copied())
        .collect()
}

/// The zero of `dtype` (false for bool).
fn zero(dtype: DType) -> Literal {
    if dtype.is_float() {
        Literal::Float(0.0)
    } else if dtype == DType::Bool {
        Literal::Bool(false)
    } else {
        Literal::Int(0)
    }
}

/// `vmap_broadcast`: input `x` of `dtype[shape]`, output `dtype[batch, shape..]` with
/// `out[b, i..] = x[i..]` for every example `b`.
///
/// ```
/// use ovl_ir::{batch_ops::broadcast_operator, validate::validate, DType};
/// let op = broadcast_operator(DType::F32, &[2, 3], 4);
/// assert_eq!(op.outputs[0].shape, vec![4, 2, 3]);
/// validate(&op).unwrap();
/// ```
pub fn broadcast_operator(dtype: DType, shape: &[u64], batch: u64) -> ir::ExpressionDag {
    let out_shape = with_batch(batch, shape);
    let mut b = Builder::new("vmap_broadcast", &out_shape);
    b.dag.source = source_here(line!());
    let x = b.input(dtype, shape);
    let out = b.output(dtype, &out_shape);
    let p: Vec<u32> = (0..out_shape.len() as u32).map(|a| b.position(a)).collect();
    let v = b.read(IN, x, &p[1..]);
    b.write(OUT, out, &p, v);
    b.build()
}

/// `vmap_sum`: input `x` of `dtype[batch, shape..]`, output `dtype[shape]` with
/// `out[i..] = sum over b of x[b, i..]` (an accumulator over the batch axis; a 0-d result has a
/// workgroup of one worker). For bool (which has no accumulator) the result is the logical or
/// over the batch, folded in a variable.
///
/// ```
/// use ovl_ir::{batch_ops::sum_operator, validate::validate, DType};
/// let op = sum_operator(DType::F32, &[3], 5);
/// assert_eq!(op.inputs[0].shape, vec![5, 3]);
/// assert_eq!(op.outputs[0].shape, vec![3]);
/// validate(&op).unwrap();
/// ```
pub fn sum_operator(dtype: DType, shape: &[u64], batch: u64) -> ir::ExpressionDag {
    let workgroup = if shape.is_empty() {
        vec![1]
    } else {
        shape.to_vec()
    };
    let mut b = Builder::new("vmap_sum", &workgroup);
    b.dag.source = source_here(line!());
    let x = b.input(dtype, &with_batch(batch, shape));
    let out = b.output(dtype, shape);
    let p: Vec<u32> = (0..shape.len() as u32).map(|a| b.position(a)).collect();
    let init = b.constant(dtype, zero(dtype));
    // Bool has no accumulator: a variable folds the logical or, in batch order.
    let acc = if dtype == DType::Bool {
        b.var(init)
    } else {
        b.accumulator(crate::ops::Combiner::Sum, init)
    };
    let (start, end, step) = (b.i64(0), b.i64(batch as i64), b.i64(1));
    let i = b.range(start, end, step);
    let index: Vec<u32> = std::iter::once(i).chain(p.iter().copied()).collect();
    let v = b.read(IN, x, &index);
    if dtype == DType::Bool {
        let any = b.op(Op::Or, &[acc, v]);
        b.assign(acc, any);
    } else {
        b.accumulate(acc, v);
    }
    b.end_range();
    b.write(OUT, out, &p, acc);
    b.build()
}

/// `vmap_first`: input `x` of `dtype[shape]`, output `dtype[batch, shape..]` with
/// `out[0, i..] = x[i..]` and zeros at every other example.
///
/// ```
/// use ovl_ir::{batch_ops::first_example_operator, validate::validate, DType};
/// let op = first_example_operator(DType::F64, &[2], 3);
/// assert_eq!(op.outputs[0].shape, vec![3, 2]);
/// validate(&op).unwrap();
/// ```
pub fn first_example_operator(dtype: DType, shape: &[u64], batch: u64) -> ir::ExpressionDag {
    let out_shape = with_batch(batch, shape);
    let mut b = Builder::new("vmap_first", &out_shape);
    b.dag.source = source_here(line!());
    let x = b.input(dtype, shape);
    let out = b.output(dtype, &out_shape);
    let p: Vec<u32> = (0..out_shape.len() as u32).map(|a| b.position(a)).collect();
    let v = b.read(IN, x, &p[1..]);
    let z = b.constant(dtype, zero(dtype));
    let origin = b.i64(0);
    let first = b.op(Op::Eq, &[p[0], origin]);
    let picked = b.op(Op::Select, &[first, v, z]);
    b.write(OUT, out, &p, picked);
    b.build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::validate;

    #[test]
    fn every_dtype_and_rank_validates() {
        for dtype in DType::ALL {
            for shape in [&[][..], &[3][..], &[2, 0, 4][..]] {
                for batch in [0, 1, 5] {
                    validate(&broadcast_operator(dtype, shape, batch)).unwrap();
                    validate(&first_example_operator(dtype, shape, batch)).unwrap();
                    validate(&sum_operator(dtype, shape, batch)).unwrap();
                }
            }
        }
    }
}

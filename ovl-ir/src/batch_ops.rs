//! Operators built by hand for batching over a new leading axis, shared by `ovl::vmap` (lazy
//! graphs) and `ovl::program_batch::batch_program` (exported programs):
//!
//! - [`broadcast_operator`] (`vmap_broadcast`): a tensor repeated along a new leading axis;
//! - [`sum_operator`] (`vmap_sum`): the sum over the leading axis, an accumulator in the order
//!   `proto/ovl.proto` defines (so every backend gives the same bits);
//! - [`first_example_operator`] (`vmap_first`): a tensor placed at example 0 of a new leading
//!   axis, zeros at every other example (the gradient flowing into an output that is the same
//!   for every example, spread so that a sum over the examples counts it once).
//!
//! Each is one worker per element of its result and writes once, unconditionally, at the
//! worker's own position (so it fuses like any elementwise operator). Each takes the type of
//! one example (`&ir::TensorType`: dtype, shape and symbolic dimensions) and a concrete batch
//! size: where the example's type has sizes known only at run time ("Symbolic sizes" in
//! `proto/ovl.proto`), the operator's workgroup and types carry them (moved one place right
//! behind the batch axis) and its `symbol_count` covers their symbols; a concrete type gives a
//! concrete operator.

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

use crate::batch::batched_shape as with_batch;
pub use crate::batch::batched_type;

/// The number of symbol values an operator whose only symbolic sizes are those of `t` needs.
fn symbol_count(t: &ir::TensorType) -> u32 {
    t.symbolic.iter().map(|d| d.symbol + 1).max().unwrap_or(0)
}

/// The dtype of `t` for the literals the operators build (an unknown dtype is left in the
/// types, where validation reports it).
fn dtype_of(t: &ir::TensorType) -> DType {
    DType::from_ir(t.dtype).unwrap_or(DType::F32)
}

/// Sets the declared types and the symbolic workgroup of a built operator: `input` and
/// `output` are its only input and output; `workgroup` the symbolic dimensions of its
/// workgroup.
fn with_types(
    mut dag: ir::ExpressionDag,
    input: ir::TensorType,
    output: ir::TensorType,
    workgroup: Vec<ir::SymbolicDim>,
    symbols: u32,
) -> ir::ExpressionDag {
    dag.inputs = vec![input];
    dag.outputs = vec![output];
    dag.symbolic_workgroup = workgroup;
    dag.symbol_count = symbols;
    dag
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

/// `vmap_broadcast`: input `x` of type `t` (`dtype[shape]`), output `dtype[batch, shape..]`
/// with `out[b, i..] = x[i..]` for every example `b`.
///
/// ```
/// use ovl_ir::{batch_ops::broadcast_operator, builder::tensor_type, validate::validate, DType};
/// let op = broadcast_operator(&tensor_type(DType::F32, &[2, 3]), 4);
/// assert_eq!(op.outputs[0].shape, vec![4, 2, 3]);
/// validate(&op).unwrap();
/// ```
pub fn broadcast_operator(t: &ir::TensorType, batch: u64) -> ir::ExpressionDag {
    let (dtype, shape) = (dtype_of(t), t.shape.as_slice());
    let out_shape = with_batch(batch, shape);
    let mut b = Builder::new("vmap_broadcast", &out_shape);
    b.dag.source = source_here(line!());
    let x = b.input(dtype, shape);
    let out = b.output(dtype, &out_shape);
    let p: Vec<u32> = (0..out_shape.len() as u32).map(|a| b.position(a)).collect();
    let v = b.read(IN, x, &p[1..]);
    b.write(OUT, out, &p, v);
    let out = batched_type(t, batch);
    let workgroup = out.symbolic.clone();
    with_types(b.build(), t.clone(), out, workgroup, symbol_count(t))
}

/// `vmap_sum`: input `x` of `dtype[batch, shape..]`, output of type `t` (`dtype[shape]`) with
/// `out[i..] = sum over b of x[b, i..]` (an accumulator over the batch axis; a 0-d result has a
/// workgroup of one worker). For bool (which has no accumulator) the result is the logical or
/// over the batch, folded in a variable.
///
/// ```
/// use ovl_ir::{batch_ops::sum_operator, builder::tensor_type, validate::validate, DType};
/// let op = sum_operator(&tensor_type(DType::F32, &[3]), 5);
/// assert_eq!(op.inputs[0].shape, vec![5, 3]);
/// assert_eq!(op.outputs[0].shape, vec![3]);
/// validate(&op).unwrap();
/// ```
pub fn sum_operator(t: &ir::TensorType, batch: u64) -> ir::ExpressionDag {
    let (dtype, shape) = (dtype_of(t), t.shape.as_slice());
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
    // A 0-d result's workgroup is one worker: not symbolic.
    let workgroup = t.symbolic.clone();
    with_types(
        b.build(),
        batched_type(t, batch),
        t.clone(),
        workgroup,
        symbol_count(t),
    )
}

/// `vmap_first`: input `x` of type `t` (`dtype[shape]`), output `dtype[batch, shape..]` with
/// `out[0, i..] = x[i..]` and zeros at every other example.
///
/// ```
/// use ovl_ir::{batch_ops::first_example_operator, builder::tensor_type, validate::validate};
/// let op = first_example_operator(&tensor_type(ovl_ir::DType::F64, &[2]), 3);
/// assert_eq!(op.outputs[0].shape, vec![3, 2]);
/// validate(&op).unwrap();
/// ```
pub fn first_example_operator(t: &ir::TensorType, batch: u64) -> ir::ExpressionDag {
    let (dtype, shape) = (dtype_of(t), t.shape.as_slice());
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
    let out = batched_type(t, batch);
    let workgroup = out.symbolic.clone();
    with_types(b.build(), t.clone(), out, workgroup, symbol_count(t))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::tensor_type;
    use crate::symbolic::{specialize_operator, specialize_type};
    use crate::validate::validate;

    /// `f32[2*s1+1, 3, s0]`: sizes known only at run time, in two symbols.
    fn symbolic_type() -> ir::TensorType {
        let mut t = tensor_type(DType::F32, &[7, 3, 5]);
        t.symbolic = vec![
            ir::SymbolicDim {
                dim: 0,
                symbol: 1,
                scale: 2,
                offset: 1,
            },
            ir::SymbolicDim {
                dim: 2,
                symbol: 0,
                scale: 1,
                offset: 0,
            },
        ];
        t
    }

    #[test]
    fn a_symbolic_type_gives_a_symbolic_operator_equal_to_the_concrete_one_when_specialized() {
        let t = symbolic_type();
        type Make = fn(&ir::TensorType, u64) -> ir::ExpressionDag;
        let makes: [Make; 3] = [broadcast_operator, first_example_operator, sum_operator];
        for make in makes {
            let op = make(&t, 4);
            validate(&op).unwrap();
            assert_eq!(op.symbol_count, 2, "{}", op.name);
            for symbols in [[0u64, 0], [3, 2], [1, 5]] {
                let concrete = make(&specialize_type(&t, &symbols).unwrap(), 4);
                let specialized = specialize_operator(&op, &symbols).unwrap();
                assert_eq!(specialized, concrete, "{} at {symbols:?}", op.name);
            }
        }
        let b = broadcast_operator(&t, 4);
        assert_eq!(b.outputs[0].symbolic[0].dim, 1);
        assert_eq!(b.symbolic_workgroup, b.outputs[0].symbolic);
        let s = sum_operator(&t, 4);
        assert_eq!(s.inputs[0].symbolic[1].dim, 3);
        assert_eq!(s.symbolic_workgroup, t.symbolic);
    }

    #[test]
    fn every_dtype_and_rank_validates() {
        for dtype in DType::ALL {
            for shape in [&[][..], &[3][..], &[2, 0, 4][..]] {
                let t = tensor_type(dtype, shape);
                for batch in [0, 1, 5] {
                    validate(&broadcast_operator(&t, batch)).unwrap();
                    validate(&first_example_operator(&t, batch)).unwrap();
                    validate(&sum_operator(&t, batch)).unwrap();
                }
            }
        }
    }
}

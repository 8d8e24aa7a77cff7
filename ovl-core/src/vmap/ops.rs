//! Operators built by hand for `vmap`: `vmap_broadcast` (a tensor repeated along a new leading
//! axis) and `vmap_sum` (the sum over the leading axis), each the other's gradient, and tensors
//! whose evaluation reports an error.

use super::VmapError;
use crate::batch::BatchError;
use crate::dtype::DType;
use crate::error::TraceError;
use crate::ir;
use crate::lazy::{Gradient, GradientCall, LazyTensor, Node, OperatorNode};
use std::sync::Arc;

/// Records an operator built by hand (validated) on `inputs`; returns its only output.
fn record(
    dag: ir::ExpressionDag,
    inputs: Vec<LazyTensor>,
    gradient: Gradient,
) -> Result<LazyTensor, VmapError> {
    crate::validate::validate(&dag).map_err(|e| BatchError {
        operator: dag.name.clone(),
        defined_at: ovl_ir::names::defined_at(&dag),
        message: e.to_string(),
    })?;
    let out = &dag.outputs[0];
    let dtype = DType::from_ir(out.dtype).unwrap_or(DType::F32);
    let shape: Arc<[usize]> = out.shape.iter().map(|&d| d as usize).collect();
    let node = OperatorNode::new(Arc::new(dag), inputs, None);
    let _ = node.gradient.set(gradient);
    Ok(LazyTensor {
        node: Arc::new(Node::Operator(node)),
        output: 0,
        dtype,
        shape,
    })
}

/// `t` repeated `batch` times along a new leading axis (`vmap_broadcast`); its gradient is
/// [`sum_op`].
pub(super) fn broadcast_op(t: &LazyTensor, batch: usize) -> Result<LazyTensor, VmapError> {
    let shape: Vec<u64> = t.shape.iter().map(|&d| d as u64).collect();
    let example = ovl_ir::builder::tensor_type(t.dtype, &shape);
    let dag = crate::batch_ops::broadcast_operator(&example, batch as u64);
    let gradient = Gradient::new(
        |call: &GradientCall| {
            vec![call.output_grads[0].as_ref().map(|g| {
                sum_op(g).unwrap_or_else(|e| {
                    failed_tensor(
                        "vmap_broadcast",
                        &call.inputs[0],
                        Arc::new(error_at_vmap("vmap_broadcast", &e)),
                    )
                })
            })]
        },
        None,
    );
    record(dag, vec![t.clone()], gradient)
}

/// The sum of `t` over its leading axis (`vmap_sum`: an accumulator over the batch, in the
/// order `proto/ovl.proto` defines for accumulators); its gradient is [`broadcast_op`].
pub(super) fn sum_op(t: &LazyTensor) -> Result<LazyTensor, VmapError> {
    let batch = t.shape.first().copied().unwrap_or(0);
    let shape: Vec<u64> = t.shape.iter().skip(1).map(|&d| d as u64).collect();
    let example = ovl_ir::builder::tensor_type(t.dtype, &shape);
    let dag = crate::batch_ops::sum_operator(&example, batch as u64);
    let gradient = Gradient::new(
        move |call: &GradientCall| {
            vec![call.output_grads[0].as_ref().map(|g| {
                broadcast_op(g, batch).unwrap_or_else(|e| {
                    failed_tensor(
                        "vmap_sum",
                        &call.inputs[0],
                        Arc::new(error_at_vmap("vmap_sum", &e)),
                    )
                })
            })]
        },
        // The closure captures only the batch size.
        Some((batch as u64).to_le_bytes().to_vec()),
    );
    record(dag, vec![t.clone()], gradient)
}

fn error_at_vmap(operator: &str, e: &VmapError) -> TraceError {
    TraceError {
        operator: operator.into(),
        operator_file: file!().into(),
        operator_line: line!(),
        file: file!().into(),
        line: line!(),
        column: 0,
        message: e.to_string(),
    }
}

/// A tensor shaped like `like` whose evaluation reports `error`.
pub(super) fn failed_tensor(name: &str, like: &LazyTensor, error: Arc<TraceError>) -> LazyTensor {
    let dag = ir::ExpressionDag {
        version: crate::IR_VERSION,
        name: name.into(),
        workgroup_shape: vec![1],
        outputs: vec![ir::TensorType {
            symbolic: Vec::new(),
            dtype: like.dtype.to_ir() as i32,
            shape: like.shape.iter().map(|&d| d as u64).collect(),
        }],
        ..Default::default()
    };
    LazyTensor {
        node: Arc::new(Node::Operator(OperatorNode::new(
            Arc::new(dag),
            Vec::new(),
            Some(error),
        ))),
        output: 0,
        dtype: like.dtype,
        shape: like.shape.clone(),
    }
}

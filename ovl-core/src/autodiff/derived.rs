//! Gradients derived from an operator's IR (`ovl_ir::grad`), for a call without a gradient
//! function: the derived gradient operators are recorded as ordinary calls on the forward
//! call's inputs and the adjoints of its outputs, so they fuse like any operator.

use super::GradError;
use crate::dtype::DType;
use crate::lazy::{LazyTensor, Node, OperatorNode};
use ovl_ir::grad::{derive, GradInput};
use std::sync::Arc;

/// The gradient of each input of `op` (`None`: not wanted, not a float, or no active read),
/// from the adjoints `output_grads` of its outputs.
pub(super) fn gradients(
    op: &OperatorNode,
    output_grads: &[Option<LazyTensor>],
    wanted: &[bool],
) -> Result<Vec<Option<LazyTensor>>, GradError> {
    if let Some(e) = &op.error {
        return Err(GradError::Trace(op.dag.name.clone(), e.to_string()));
    }
    let seeded: Vec<bool> = output_grads.iter().map(Option::is_some).collect();
    let ops = derive(&op.dag, wanted, &seeded)?;
    let mut grads: Vec<Option<LazyTensor>> = vec![None; op.inputs.len()];
    for g in ops {
        // `derive` names only existing inputs and the adjoints of seeded outputs.
        let inputs: Option<Vec<LazyTensor>> = g
            .inputs
            .iter()
            .map(|i| match *i {
                GradInput::Forward(k) => op.inputs.get(k as usize).cloned(),
                GradInput::Adjoint(o) => output_grads.get(o as usize).cloned().flatten(),
            })
            .collect();
        let inputs = inputs.ok_or_else(|| GradError::BadGradient {
            operator: op.dag.name.clone(),
            message: "the derived gradient reads a tensor the call does not have".into(),
        })?;
        let types: Vec<(DType, Arc<[usize]>)> = g
            .dag
            .outputs
            .iter()
            .map(|t| {
                (
                    DType::from_ir(t.dtype).unwrap_or(DType::F32),
                    t.shape.iter().map(|&d| d as usize).collect(),
                )
            })
            .collect();
        let node = Arc::new(Node::Operator(OperatorNode::new(
            Arc::new(g.dag),
            inputs,
            None,
        )));
        for (slot, (&input, (dtype, shape))) in g.outputs.iter().zip(types).enumerate() {
            grads[input as usize] = Some(LazyTensor {
                node: node.clone(),
                output: slot,
                dtype,
                shape,
            });
        }
    }
    Ok(grads)
}

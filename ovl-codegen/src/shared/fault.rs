//! The fault status of generated code, shared by both backends: `ovl_status` (the struct the
//! prelude defines, written by the first faulting worker) and the error it becomes.

use crate::error::{Access, NonPositiveStep, OutOfBounds, RunError, WhileLimit, WorkerFault};
use ovl_ir::ir::TensorKind;

/// `ovl_status`, as the prelude (`super::prelude`) lays it out.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Status {
    pub code: i32,
    pub expression: i32,
    pub tensor_kind: i32,
    pub tensor_index: i32,
    pub axis: i32,
    pub index_signed: i32,
    pub index_bits: u64,
    pub size: u64,
    pub worker: i64,
    pub step: i64,
}

/// Status codes.
pub const STATUS_OUT_OF_BOUNDS: i32 = 1;
pub const STATUS_NON_POSITIVE_STEP: i32 = 2;
pub const STATUS_WHILE_LIMIT: i32 = 3;

/// The position of a flattened worker index in a workgroup.
fn position(workgroup: &[u64], worker: i64) -> Vec<u64> {
    let mut rest = worker.max(0) as u64;
    let mut p = vec![0; workgroup.len()];
    for a in (0..p.len()).rev() {
        let d = workgroup[a].max(1);
        p[a] = rest % d;
        rest /= d;
    }
    p
}

/// The error for a fault status of the generated code (shared by the C++ and CUDA runtimes).
/// `writes[k]` says whether expression `k` is a WRITE.
pub fn fault_error(
    name: &str,
    defined_at: &str,
    workgroup: &[u64],
    writes: &[bool],
    st: &Status,
) -> RunError {
    let position = position(workgroup, st.worker);
    let expression = st.expression.max(0) as usize;
    match st.code {
        STATUS_OUT_OF_BOUNDS => {
            let kind = match TensorKind::try_from(st.tensor_kind) {
                Ok(TensorKind::Input) => "input",
                Ok(TensorKind::Output) => "output",
                Ok(TensorKind::Local) => "local",
                _ => "tensor",
            };
            let index = if st.index_signed != 0 {
                st.index_bits as i64 as i128
            } else {
                st.index_bits as i128
            };
            WorkerFault::IndexOutOfBounds(Box::new(OutOfBounds {
                operator: name.to_string(),
                defined_at: defined_at.to_string(),
                expression,
                access: if writes.get(expression).copied().unwrap_or(false) {
                    Access::Write
                } else {
                    Access::Read
                },
                tensor: format!("{kind} {}", st.tensor_index),
                axis: st.axis.max(0) as usize,
                index,
                size: st.size,
                position,
            }))
            .into()
        }
        STATUS_NON_POSITIVE_STEP => WorkerFault::NonPositiveStep(Box::new(NonPositiveStep {
            operator: name.to_string(),
            defined_at: defined_at.to_string(),
            expression,
            step: st.step,
            position,
        }))
        .into(),
        STATUS_WHILE_LIMIT => WorkerFault::WhileLimit(Box::new(WhileLimit {
            operator: name.to_string(),
            defined_at: defined_at.to_string(),
            expression,
            limit: st.size,
            position,
        }))
        .into(),
        code => RunError::Internal {
            operator: name.to_string(),
            message: format!("unknown status code {code} from the generated code"),
        },
    }
}

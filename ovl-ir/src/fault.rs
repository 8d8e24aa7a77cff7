//! The faults of a worker, defined once for everything that runs IR: the reference
//! interpreter (`ovl_core::interp::InterpError`) and every backend (ovl-codegen's `RunError`)
//! wrap a [`WorkerFault`]'s payloads in variants of the same names (`From<WorkerFault>`), so a
//! fault reads the same whichever ran the operator. A faulting worker stops at the fault; every
//! other worker runs normally.

use crate::names::at;

/// Whether an out-of-bounds access was a read or a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// An `OP_READ`: it did not happen, and its worker stopped there.
    Read,
    /// An `OP_WRITE`: it did not happen, and its worker stopped there.
    Write,
}

/// A `while` loop that ran more iterations in one worker than the bound
/// (`ovl_ir::limits::WHILE_ITERATIONS` unless set), as the reference interpreter and every
/// backend report it (`InterpError::WhileLimit`, ovl-codegen's `RunError::WhileLimit`): the
/// worker stopped there, like any fault.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "operator `{operator}`{}: the worker at position {position:?} ran the while loop \
     %{expression} {limit} times without ending (the worker stopped there); if the loop is \
     meant to run that long, raise the bound: OVL_MAX_WHILE_ITERATIONS or \
     Options::max_while_iterations (0: no bound)",
    at(.defined_at)
)]
pub struct WhileLimit {
    /// The operator's name.
    pub operator: String,
    /// `file:line` of the operator's function, or empty when unknown.
    pub defined_at: String,
    /// The loop's WHILE_BEGIN expression.
    pub expression: usize,
    /// The bound.
    pub limit: u64,
    /// The worker's position in the workgroup.
    pub position: Vec<u64>,
}

/// An index outside a tensor, as the reference interpreter and every backend report it
/// (`InterpError::IndexOutOfBounds`, ovl-codegen's `RunError::IndexOutOfBounds`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "operator `{operator}`{}: index out of bounds: the worker at position {position:?} evaluated \
     expression %{expression} ({} of {tensor}) with index {index} on axis {axis}, outside the \
     dimension of size {size}; {}",
    at(.defined_at),
    match .access { Access::Read => "read", Access::Write => "write" },
    match .access {
        Access::Read => "no result is returned: check the index arithmetic, or guard the read with an `if`",
        Access::Write => "no result is returned: check the index arithmetic, or guard the write with an `if`",
    }
)]
pub struct OutOfBounds {
    /// The operator's name.
    pub operator: String,
    /// `file:line` of the operator's function, or empty when unknown.
    pub defined_at: String,
    /// The READ or WRITE expression.
    pub expression: usize,
    /// Whether it was a read or a write.
    pub access: Access,
    /// `input 0`, `output 1`, `local 2`.
    pub tensor: String,
    /// The axis whose index is outside.
    pub axis: usize,
    /// The index (i128 holds every integer index dtype exactly).
    pub index: i128,
    /// The size of that dimension.
    pub size: u64,
    /// The worker's position in the workgroup.
    pub position: Vec<u64>,
}

/// A RANGE loop whose step was zero or negative (`InterpError::NonPositiveStep`, ovl-codegen's
/// `RunError::NonPositiveStep`): the faulting worker stopped there.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "operator `{operator}`{}: the worker at position {position:?} entered the range loop \
     %{expression} with step {step}; the step must be positive (the worker stopped there)",
    at(.defined_at)
)]
pub struct NonPositiveStep {
    /// The operator's name.
    pub operator: String,
    /// `file:line` of the operator's function, or empty when unknown.
    pub defined_at: String,
    /// The RANGE expression.
    pub expression: usize,
    /// The step.
    pub step: i64,
    /// The worker's position in the workgroup.
    pub position: Vec<u64>,
}

/// What stopped a worker: every fault a worker can have, as the reference interpreter and every
/// backend report it (each wraps these in variants of the same names, `From<WorkerFault>`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WorkerFault {
    /// A read or write indexed outside a tensor.
    #[error(transparent)]
    IndexOutOfBounds(Box<OutOfBounds>),
    /// A RANGE loop's step was zero or negative.
    #[error(transparent)]
    NonPositiveStep(Box<NonPositiveStep>),
    /// A `while` loop ran more iterations than the bound.
    #[error(transparent)]
    WhileLimit(Box<WhileLimit>),
}

impl WorkerFault {
    /// The name of the operator whose worker faulted.
    pub fn operator(&self) -> &str {
        match self {
            WorkerFault::IndexOutOfBounds(f) => &f.operator,
            WorkerFault::NonPositiveStep(f) => &f.operator,
            WorkerFault::WhileLimit(f) => &f.operator,
        }
    }
}

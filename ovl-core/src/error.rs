//! Errors of ovl-core.

use std::fmt;

/// A mistake found while tracing an operator: names the operator and the user's source line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceError {
    /// The operator's name.
    pub operator: String,
    /// Where the operator function is defined.
    pub operator_file: String,
    pub operator_line: u32,
    /// The user's line that caused the error.
    pub file: String,
    pub line: u32,
    pub column: u32,
    /// What is wrong and what to do instead.
    pub message: String,
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "in operator `{}` (defined at {}:{}): {}:{}:{}: {}",
            self.operator,
            self.operator_file,
            self.operator_line,
            self.file,
            self.line,
            self.column,
            self.message
        )
    }
}

impl std::error::Error for TraceError {}

/// Whether an out-of-bounds access was a read or a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// An `OP_READ`: it yielded 0.
    Read,
    /// An `OP_WRITE`: it was dropped.
    Write,
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

pub(crate) fn at(defined_at: &str) -> String {
    if defined_at.is_empty() {
        String::new()
    } else {
        format!(" (defined at {defined_at})")
    }
}

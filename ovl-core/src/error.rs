//! Errors of ovl-core: [`TraceError`] (tracing). The out-of-bounds error shared by the
//! interpreter and every backend lives in `ovl_ir::error` and is re-exported here.

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

pub use ovl_ir::error::{Access, OutOfBounds};

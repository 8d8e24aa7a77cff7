//! The error type of the `ovl` facade.

use thiserror::Error;

/// Everything that can go wrong between calling operators and getting arrays back.
#[derive(Debug, Error)]
pub enum Error {
    /// An operator body misused the DSL (names the operator and the line).
    #[error(transparent)]
    Trace(#[from] ovl_core::TraceError),
    /// The reference interpreter failed (for example an index out of bounds).
    #[error(transparent)]
    Interpreter(#[from] ovl_core::interp::InterpError),
    /// Generating, compiling or loading C++ failed (carries the compiler log and source path).
    #[error(transparent)]
    Codegen(#[from] ovl_codegen::CodegenError),
    /// Running compiled code failed (for example an index out of bounds).
    #[error(transparent)]
    Run(#[from] ovl_codegen::RunError),
    /// An output array given to [`crate::evaluate_into`] does not fit the operator's output.
    #[error("{0}; pass an array of the output's dtype and shape")]
    OutputMismatch(String),
    /// An evaluated tensor did not have the type its handle promised (a bug in ovl).
    #[error("internal error: {0}")]
    Internal(String),
}

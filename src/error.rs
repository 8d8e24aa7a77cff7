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
    /// The operator merger failed, or drawing its graph did (`dot` not installed, ...).
    #[error(transparent)]
    Fuse(#[from] ovl_fuse::FuseError),
    /// A placeholder has no data to evaluate with: placeholders are fed by the caller of an
    /// exported program.
    #[error(
        "placeholder `{name}` has no data: a graph with placeholders cannot be evaluated; \
         export it (`ovl::as_tensorflow`) and feed it at call time, or pass host data instead"
    )]
    Placeholder {
        /// The placeholder's name.
        name: String,
    },
    /// Exporting a graph failed (what was wrong with the inputs, outputs or gradient).
    #[error("cannot export `{name}`: {message}")]
    Export {
        /// The exported program's name.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// Compiling a graph with [`crate::compile`], or feeding the compiled graph, failed (what
    /// was wrong with its placeholders or their data).
    #[error("compiled graph: {0}")]
    Compiled(String),
    /// Writing an exported bundle failed.
    #[error("cannot write the bundle {path}: {source}")]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Building a gradient graph failed.
    #[error(transparent)]
    Grad(#[from] ovl_core::autodiff::GradError),
    /// Batching a function with [`crate::vmap`] failed.
    #[error(transparent)]
    Vmap(#[from] ovl_core::vmap::VmapError),
    /// A device tensor could not be allocated or copied, or has another dtype or shape than the
    /// graph needs (the message names it).
    #[error(transparent)]
    Device(#[from] ovl_codegen::cuda::DeviceError),
    /// An output or intermediate tensor could not be allocated (names its dtype and shape).
    #[error(transparent)]
    OutOfMemory(#[from] ovl_core::AllocError),
    /// An evaluated tensor did not have the type its handle promised (a bug in ovl).
    #[error("internal error: {0}")]
    Internal(String),
}

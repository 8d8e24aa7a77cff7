//! The error type of the `ovl` facade.

pub mod export;
pub mod program;

pub use ovl_runtime::Mismatch;
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
    /// Arrays or tensors given to [`crate::evaluate_into`], [`crate::Compiled::run_into`] or a
    /// device run do not fit the graph (what does not fit, and where).
    #[error("{0}; pass an array of the output's dtype and shape")]
    OutputMismatch(Mismatch),
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
    #[error("cannot export `{name}`: {why}")]
    Export {
        /// The exported program's name.
        name: String,
        /// What is wrong (boxed: errors stay small).
        why: Box<export::ExportError>,
    },
    /// A program given to [`crate::program::run_program`] is malformed, or its feeds do not
    /// fit it (boxed: a program error may hold an [`enum@Error`]).
    #[error(transparent)]
    Program(Box<program::ProgramError>),
    /// Compiling a graph with [`crate::compile`], or feeding the compiled graph, failed (what
    /// was wrong with its placeholders or their data, or the target).
    #[error("compiled graph: {0}")]
    Compiled(#[from] CompiledError),
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
    Device(#[from] ovl_runtime::cuda::DeviceError),
    /// An output or intermediate tensor could not be allocated (names its dtype and shape).
    #[error(transparent)]
    OutOfMemory(#[from] ovl_core::AllocError),
    /// Something ovl guarantees did not hold (a bug in ovl; what, and about which output or
    /// input).
    #[error("internal error (a bug in ovl): {0}")]
    Internal(#[from] InternalError),
}

/// A broken guarantee of ovl itself, never a user's mistake: what broke and where. Seeing one is
/// a bug to report.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum InternalError {
    /// A run returned fewer results than the graph has outputs.
    #[error("output {output} has no evaluation result")]
    MissingResult {
        /// The output's number.
        output: usize,
    },
    /// A result of another dtype than its handle promised.
    #[error("output {output} has dtype {dtype} where {expected} was expected")]
    ResultDType {
        /// The output's number.
        output: usize,
        /// The result's dtype.
        dtype: ovl_core::DType,
        /// The handle's dtype.
        expected: ovl_core::DType,
    },
    /// A result whose element count is not its shape's.
    #[error("output {output} has {len} elements, which do not make the shape {shape:?}")]
    ResultShape {
        /// The output's number.
        output: usize,
        /// Its shape.
        shape: Vec<usize>,
        /// Its element count.
        len: usize,
    },
    /// A graph input with host data that a device run did not upload.
    #[error("graph input {input} holds host data that was not uploaded to the GPU")]
    NotUploaded {
        /// The graph input's number.
        input: usize,
    },
    /// The fused graph could not be planned (fusion makes well-formed graphs only).
    #[error("the fused graph cannot be planned: {0}")]
    Unplannable(#[source] ovl_runtime::PlanError),
}

/// What was wrong when compiling a graph on placeholders ([`crate::compile`]) or feeding it.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum CompiledError {
    /// `compile` was given no output.
    #[error("there is no output to compute")]
    NoOutputs,
    /// An input of `compile` that is not a placeholder.
    #[error(
        "input {input} ({what}) is not a placeholder; create the inputs with `ovl::placeholder`"
    )]
    NotAPlaceholder {
        /// Its number among the inputs.
        input: usize,
        /// What it is instead (dtype and shape).
        what: String,
    },
    /// A placeholder listed twice among the inputs.
    #[error("placeholder `{name}` is listed twice")]
    ListedTwice {
        /// The placeholder's name.
        name: String,
    },
    /// The outputs read a placeholder that is not among the inputs.
    #[error("the outputs depend on placeholder `{name}`, which is not among the inputs")]
    MissingPlaceholder {
        /// The placeholder's name.
        name: String,
    },
    /// Not as many tensors given as the graph has placeholders.
    #[error("{given} {kind}tensors given for {placeholders} placeholders", kind = if *.device { "device " } else { "" })]
    FeedCount {
        /// Device tensors were given.
        device: bool,
        /// Tensors given.
        given: usize,
        /// The graph's placeholders.
        placeholders: usize,
    },
    /// A placeholder fed with a computed (lazy) value instead of data.
    #[error(
        "the data for placeholder {index} (`{name}`) is not host data; pass `Lazy::from(array)` \
         (evaluate a computed value first)"
    )]
    NotHostData {
        /// The placeholder's number.
        index: usize,
        /// Its name.
        name: String,
    },
    /// A placeholder fed with data of another dtype or shape.
    #[error("the data for placeholder {index} (`{name}`) is {given}, the placeholder is {wanted}")]
    FeedType {
        /// The placeholder's number.
        index: usize,
        /// Its name.
        name: String,
        /// The data's dtype and shape, e.g. `f32[2, 3]`.
        given: String,
        /// The placeholder's.
        wanted: String,
    },
    /// Device tensors given to, or asked of, a graph prepared for another target.
    #[error("{what} runs on the GPU: it needs `Options::cuda()`, not the {target:?} target")]
    NotCuda {
        /// The call, e.g. `evaluate_device`.
        what: &'static str,
        /// The target it was given.
        target: crate::Target,
    },
}

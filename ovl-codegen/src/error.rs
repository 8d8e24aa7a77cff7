//! The errors of code generation, compilation, caching, loading ([`CodegenError`]) and of running
//! compiled operators ([`RunError`]).

use std::path::PathBuf;
use thiserror::Error;

/// `" (defined at file:line)"`, or nothing when the source location is unknown.
pub(crate) fn at(defined_at: &str) -> String {
    if defined_at.is_empty() {
        String::new()
    } else {
        format!(" (defined at {defined_at})")
    }
}

pub(crate) use ovl_ir::names::defined_at;

/// Why an operator could not be turned into a loaded native library.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum CodegenError {
    /// The operator is not valid IR.
    #[error(transparent)]
    Invalid(#[from] ovl_ir::validate::ValidationError),
    /// The operator uses something the C++ backend cannot express (or the IR is malformed in a
    /// way validation did not catch).
    #[error("operator `{operator}`{}: cannot generate C++{}: {message}", at(.defined_at),
        .expression.map(|e| format!(" for expression %{e}")).unwrap_or_default())]
    Unsupported {
        /// The operator's name.
        operator: String,
        /// `file:line` of the operator's function, or empty when unknown.
        defined_at: String,
        /// The offending expression, when one is to blame.
        expression: Option<usize>,
        /// What is wrong.
        message: String,
    },
    /// A local tensor is too large for the per-worker stack storage of generated code.
    #[error(
        "operator `{operator}`{}: local {local} ({ty}) takes {bytes} bytes per worker; generated \
         code keeps locals on each worker's stack (GPU: in local memory) and allows at most {limit} bytes per local \
         tensor ({total_limit} bytes for all locals of a worker); use a smaller local or an \
         output tensor",
        at(.defined_at)
    )]
    LocalTooLarge {
        /// The operator's name.
        operator: String,
        /// `file:line` of the operator's function, or empty when unknown.
        defined_at: String,
        /// Index of the local tensor (or of the last one when the total is too large).
        local: usize,
        /// Its type, like `f32[128, 128]`.
        ty: String,
        /// Its size in bytes (or the total of all locals).
        bytes: u64,
        /// The limit per local tensor.
        limit: u64,
        /// The limit for all locals of a worker.
        total_limit: u64,
    },
    /// `OVL_CPU_ISA` holds a value ovl does not know.
    #[error("cannot choose the C++ compiler's target: {0}")]
    Isa(#[from] ovl_ir::isa::IsaError),
    /// No C++ compiler could be found.
    #[error(
        "no C++ compiler found (looked for one the way the `cc` crate does: $CXX, then c++/g++/\
         clang++): {message}"
    )]
    NoCompiler {
        /// What `cc` reported.
        message: String,
    },
    /// An operator's compiled library that came with an exported program cannot be used on
    /// this machine (built for another target or CPU, or it does not load), and compiling the
    /// operator here failed too (typically: no C++ compiler).
    #[error(
        "operator `{operator}`: the program carries a compiled library for it that cannot be used \
         here ({reason}), and compiling it here failed: {source}"
    )]
    EmbeddedLibraryUnusable {
        /// The operator.
        operator: String,
        /// Why the embedded library was not used (boxed: errors stay small).
        reason: Box<NotEmbedded>,
        /// Why compiling failed.
        source: Box<CodegenError>,
    },
    /// The C++ compiler could not be started.
    #[error("cannot run the C++ compiler `{command}`: {source}")]
    CompilerSpawn {
        /// The command line.
        command: String,
        /// Why it could not be started.
        source: std::io::Error,
    },
    /// The C++ compiler rejected the generated source (a bug in ovl or in the compiler setup):
    /// the details carry the command, the compiler's full output and the source path.
    #[error(transparent)]
    CompileFailed(Box<CompileFailure>),
    /// Reading or writing the operator cache failed.
    #[error("operator cache: cannot {action} {}: {source}", .path.display())]
    Cache {
        /// What was attempted (`create`, `write`, `rename to`, ...).
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A cached artifact (`op.so`, `op.ptx`, `op.cubin`) does not match what its entry's `meta`
    /// records (it is truncated, extended or altered, or `meta` is missing or was written by an
    /// older version), so it was not loaded; and it could not be rebuilt because the cache
    /// cannot be written (a read-only cache).
    #[error(
        "operator cache: {} is damaged ({reason}), so it was not loaded, and it cannot be \
         rebuilt: {source}\n  to fix it: delete {} (it is rebuilt on the next use), or make the \
         cache writable, or point OVL_CACHE_DIR (or the cache_dir option) at a writable \
         directory",
        .path.display(),
        .path.parent().unwrap_or(.path).display()
    )]
    DamagedEntry {
        /// The damaged artifact.
        path: PathBuf,
        /// How it differs from what `meta` records.
        reason: String,
        /// Why it could not be rebuilt (a [`CodegenError::Cache`] error).
        source: Box<CodegenError>,
    },
    /// The operator cache directory (or a directory inside it) exists but is not a directory
    /// (a regular file, for example), so no compiled operator can be stored there.
    #[error(
        "operator cache: {} is not a directory, so compiled operators cannot be stored there\n  \
         to fix it: remove or rename that file, or point OVL_CACHE_DIR (or the cache_dir \
         option) at a directory",
        .path.display()
    )]
    CacheNotADirectory {
        /// The path that is not a directory.
        path: PathBuf,
    },
    /// NVRTC, the CUDA runtime compiler library, could not be found or loaded.
    #[error(
        "CUDA backend: cannot load NVRTC (libnvrtc.so.12 or libnvrtc.so.13): {message}\n  looked \
         for: {}\n  to install it: `pip install nvidia-cuda-nvrtc-cu12` (CUDA 12) or `pip install \
         nvidia-cuda-nvrtc` (CUDA 13) into the project's Python environment \
         (scripts/python-env.sh does, into .venv), or install the CUDA toolkit, or set \
         OVL_NVRTC_LIB to the library's path",
        if .searched.is_empty() { "(nothing found)".to_string() } else {
            .searched.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ") }
    )]
    NvrtcNotFound {
        /// What went wrong.
        message: String,
        /// The candidate paths that were tried.
        searched: Vec<PathBuf>,
    },
    /// cuBLAS, which runs matrix products on the GPU, could not be loaded (GEMM library calls
    /// then run as generated kernels).
    #[error(
        "CUDA backend: cannot load cuBLAS (libcublas.so.12 or libcublas.so.13): {message}\n  \
         looked for: {}\n  to install it: `pip install nvidia-cublas-cu12` (CUDA 12) into the \
         project's Python environment, or install the CUDA toolkit, or set OVL_CUBLAS_LIB to the \
         library's path; without it matrix products run as generated kernels",
        if .searched.is_empty() { "(nothing found)".to_string() } else {
            .searched.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ") }
    )]
    CublasNotFound {
        /// What went wrong.
        message: String,
        /// The candidate paths that were tried.
        searched: Vec<PathBuf>,
    },
    /// `ptxas`, the PTX assembler used to validate PTX without a GPU, could not be found.
    #[error(
        "CUDA backend: cannot find ptxas (the PTX assembler that validates generated PTX): \
         {message}\n  looked for: {}\n  to install it: `pip install nvidia-cuda-nvcc-cu12` into \
         the project's Python environment (scripts/python-env.sh does, into .venv), or install \
         the CUDA toolkit, or set OVL_PTXAS to its path",
        if .searched.is_empty() { "(nothing found)".to_string() } else {
            .searched.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ") }
    )]
    PtxasNotFound {
        /// What went wrong.
        message: String,
        /// The candidate paths that were tried.
        searched: Vec<PathBuf>,
    },
    /// NVRTC rejected the generated CUDA, or ptxas rejected the PTX (a bug in ovl or in the CUDA
    /// setup): the details carry the tool's log, its options and the source path.
    #[error(transparent)]
    CudaCompileFailed(Box<CudaCompileFailure>),
    /// No GPU can be used: the NVIDIA driver (libcuda.so.1) is missing, or it reports no device.
    #[error(
        "CUDA backend: no usable GPU: {message}\n  running on a GPU needs an NVIDIA GPU and its \
         driver (libcuda.so.1, installed with the NVIDIA driver, not by pip); without one, \
         `Options::cuda_validate()` still compiles every operator with NVRTC and checks the PTX \
         with ptxas"
    )]
    NoGpu {
        /// What is missing.
        message: String,
    },
    /// A CUDA driver call failed while loading a compiled module.
    #[error("operator `{operator}`: CUDA driver error while {action}: {message}")]
    CudaDriver {
        /// The operator's name.
        operator: String,
        /// What was attempted.
        action: String,
        /// The driver's error.
        message: String,
    },
    /// A freshly compiled library could not be loaded.
    #[error("operator `{operator}`: cannot load the compiled library {}: {why}", .path.display())]
    Load {
        /// The operator's name.
        operator: String,
        /// The shared library.
        path: PathBuf,
        /// What the dynamic loader (or the check of the library) reported.
        why: LoadError,
    },
}

/// The details of [`CodegenError::CompileFailed`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "operator `{operator}`{}: the C++ compiler failed ({status})\n  generated source: {}\n  \
     command: {command}\n  compiler output:\n{log}",
    at(.defined_at),
    .source_path.display()
)]
pub struct CompileFailure {
    /// The operator's name.
    pub operator: String,
    /// `file:line` of the operator's function, or empty when unknown.
    pub defined_at: String,
    /// How the compiler exited.
    pub status: String,
    /// The full command line.
    pub command: String,
    /// The path of the generated C++ source (kept for inspection).
    pub source_path: PathBuf,
    /// Everything the compiler printed (stderr, then stdout).
    pub log: String,
}

/// The details of [`CodegenError::CudaCompileFailed`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "operator `{operator}`{}: {tool} failed for {arch}\n  generated source: {}\n  \
     {tool} {command}\n  {tool} output:\n{log}",
    at(.defined_at),
    .source_path.display()
)]
pub struct CudaCompileFailure {
    /// The operator's name.
    pub operator: String,
    /// `file:line` of the operator's function, or empty when unknown.
    pub defined_at: String,
    /// `NVRTC` or `ptxas`.
    pub tool: String,
    /// The target architecture, like `sm_90`.
    pub arch: String,
    /// The options (NVRTC) or the command line (ptxas).
    pub command: String,
    /// The generated CUDA source (NVRTC) or PTX (ptxas), kept for inspection.
    pub source_path: PathBuf,
    /// Everything the tool reported.
    pub log: String,
}

pub use ovl_ir::fault::{Access, NonPositiveStep, OutOfBounds, WhileLimit, WorkerFault};

/// What went wrong when running a compiled operator.
///
/// A runtime fault ([`RunError::IndexOutOfBounds`], [`RunError::NonPositiveStep`]) ends the
/// worker that made it (nothing after the faulting expression runs: enclosing loops exit, later
/// writes do not happen); every other worker runs, and the fault of the first faulting worker in
/// row-major order is reported, as the reference interpreter does.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum RunError {
    /// A range of workers asked of `ovl_runtime::CompiledOperator::run_workers_raw` is not inside
    /// the workgroup.
    #[error("operator `{operator}` has {workers} workers; workers [{begin}, {end}) were asked")]
    WorkerRange {
        /// The operator's name.
        operator: String,
        /// Its worker count.
        workers: u64,
        /// The first worker asked.
        begin: u64,
        /// One past the last.
        end: u64,
    },
    /// The number of input or output tensors passed differs from the operator's.
    #[error("operator `{operator}` takes {expected} {kind} tensor(s), but {got} were passed")]
    TensorCount {
        /// The operator's name.
        operator: String,
        /// `"input"` or `"output"`.
        kind: &'static str,
        /// The operator's count.
        expected: usize,
        /// The count passed.
        got: usize,
    },
    /// A tensor passed has another dtype or shape than the operator declares (or its data does
    /// not have as many elements as its shape says).
    #[error("operator `{operator}`: {tensor} must be {expected}, but the tensor passed is {got}")]
    TensorType {
        /// The operator's name.
        operator: String,
        /// `input 0`, `output 1`.
        tensor: String,
        /// The declared type, like `f32[4, 8]`.
        expected: String,
        /// The type passed.
        got: String,
    },
    /// The number of symbol values passed (the sizes given at run time, `proto/ovl.proto`,
    /// "Symbolic sizes") differs from the operator's.
    #[error(
        "operator `{operator}` takes {expected} symbol value(s) (the sizes it is given at run \
         time), but {got} were passed"
    )]
    SymbolCount {
        /// The operator's name.
        operator: String,
        /// The operator's count.
        expected: usize,
        /// The count passed.
        got: usize,
    },
    /// The symbol values passed would make a dimension negative (or a tensor or the workgroup
    /// larger than 2^63 - 1 elements or bytes); nothing ran.
    #[error("operator `{operator}` cannot run with the symbol values {values:?}: {problem}")]
    SymbolValues {
        /// The operator's name.
        operator: String,
        /// The values passed.
        values: Vec<u64>,
        /// What they would make wrong.
        problem: String,
    },
    /// A read or write indexed outside a tensor: the access did not happen and the faulting
    /// worker stopped there; every other worker ran normally.
    #[error(transparent)]
    IndexOutOfBounds(Box<OutOfBounds>),
    /// A RANGE loop's step was zero or negative; the faulting worker stopped there.
    #[error(transparent)]
    NonPositiveStep(Box<NonPositiveStep>),
    /// A `while` loop ran more iterations in one worker than the bound (`OVL_WHILE_LIMIT` in the
    /// generated code: `ovl_ir::limits::WHILE_ITERATIONS` unless set); the worker stopped there.
    #[error(transparent)]
    WhileLimit(Box<WhileLimit>),
    /// A CUDA driver call failed while running an operator on the GPU (copying, launching,
    /// synchronizing).
    #[error("operator `{operator}`: CUDA driver error while {action}: {message}")]
    Cuda {
        /// The operator's name.
        operator: String,
        /// What was attempted.
        action: String,
        /// The driver's error.
        message: String,
    },
    /// The generated code reported a status this runtime does not know (a bug in ovl).
    #[error("operator `{operator}`: internal error of the generated code: {message}")]
    Internal {
        /// The operator's name.
        operator: String,
        /// What went wrong.
        message: String,
    },
}

impl From<WorkerFault> for RunError {
    /// The variant of the same name.
    fn from(f: WorkerFault) -> Self {
        match f {
            WorkerFault::IndexOutOfBounds(f) => RunError::IndexOutOfBounds(f),
            WorkerFault::NonPositiveStep(f) => RunError::NonPositiveStep(f),
            WorkerFault::WhileLimit(f) => RunError::WhileLimit(f),
        }
    }
}

/// Why a library was not loaded as the operator's (a cache entry's, a fresh build's or an
/// exported program's): what the dynamic loader or the check of its exported facts found.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The operator's tensors or workgroup cannot be run.
    #[error(transparent)]
    Geometry(#[from] GeometryError),
    /// The dynamic loader failed (opening the library or finding a symbol).
    #[error(transparent)]
    Library(#[from] libloading::Error),
    /// Built for another ABI version of generated code.
    #[error("ABI version {found}, expected {expected}")]
    Abi {
        /// The library's.
        found: u32,
        /// This build's.
        expected: u32,
    },
    /// Built for another operator (its cache key).
    #[error("built for cache key {found}, expected {expected}")]
    CacheKey {
        /// The library's.
        found: String,
        /// The operator's.
        expected: String,
    },
    /// Built for another number of symbol values.
    #[error("built for {found} symbol value(s), expected {expected}")]
    SymbolCount {
        /// The library's.
        found: u32,
        /// The operator's.
        expected: u32,
    },
    /// Built for another workgroup (its worker count for probe symbol values).
    #[error("built for {found} workers, expected {expected}")]
    Workers {
        /// The library's.
        found: i64,
        /// The operator's.
        expected: u64,
    },
}

/// Why the library an exported program carries for an operator was not used
/// (`ovl_runtime::cpu::cache::load_embedded`).
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum NotEmbedded {
    /// `OVL_FORCE_RECOMPILE` or the options ask for a compilation.
    #[error("recompilation was forced")]
    Forced,
    /// Compiled for another target.
    #[error(
        "it was compiled for {target} with target key {target_key}; this machine, {here}, has \
         target key {here_key} (another target, CPU features, compiler flags or ovl version)"
    )]
    OtherTarget {
        /// The exporter's target (triple and features).
        target: String,
        /// The exporter's target key.
        target_key: String,
        /// This machine's target.
        here: String,
        /// This machine's target key.
        here_key: String,
    },
    /// A cache key that is not one (it names the entry's directory).
    #[error("its cache key {key:?} is not 32 hex digits")]
    BadCacheKey {
        /// The key the program carries.
        key: String,
    },
    /// The library could not be put into the cache or loaded from it.
    #[error(transparent)]
    Cache(Box<CodegenError>),
}

/// What in an operator's tensors or workgroup cannot be run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GeometryError {
    /// A tensor type without a supported dtype.
    #[error("an {what} type is not supported")]
    UnsupportedType {
        /// "input" or "output".
        what: &'static str,
    },
    /// More than 2^63 - 1 workers.
    #[error("the workgroup is too large")]
    WorkgroupTooLarge,
}

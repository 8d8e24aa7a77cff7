//! Code generation for ovl: C++ and CUDA from an operator ([`ovl_ir::ir::ExpressionDag`]),
//! compiled with the system C++ compiler (a shared library) or NVRTC (PTX or CUBIN), and the
//! on-disk operator cache both kinds of artifact live in. Loading and running what this crate
//! builds is `ovl-runtime`'s work: this crate never opens a library nor touches a GPU, except
//! to ask NVRTC and ptxas to compile.
//!
//! - [`cpu`]: the C++ backend: [`generate_cpp`] (exact IR semantics, vectorizable loops, proven
//!   bounds checks elided), the compiler driver ([`compiler_flags`], [`compiler_invocations`]),
//!   the precompiled prelude, and the C entry points of a compiled operator ([`cpu::abi`]).
//! - [`cuda`]: the CUDA backend: emitter, NVRTC, ptxas, the cache's CUDA entries.
//! - [`shared`]: what both backends use: the worker-program emitter, literals, the prelude of
//!   `ovl::` helpers (one source, two dialects), one on-disk cache entry
//!   ([`shared::cache_entry`]), the fault status of generated code ([`shared::fault`]), sizes
//!   and symbols a run is checked against.
//! - [`cache_dir`]: the operator cache's root (layout in [`shared::cache_entry`]).
//!
//! Environment: `OVL_CACHE_DIR` (cache root), `OVL_FORCE_RECOMPILE=1` (ignore the on-disk
//! cache), `OVL_DUMP_SOURCE=1` (print generated sources to stderr), `CXX` (the compiler, as
//! the `cc` crate reads it).

pub mod cpu;
pub mod cuda;
mod error;
mod options;
pub mod shared;

pub use cpu::compiler::{compiler_flags, compiler_flags_for, compiler_invocations};
pub use cpu::generate_cpp;
pub use error::{
    Access, CodegenError, CompileFailure, CudaCompileFailure, GeometryError, LoadError,
    NonPositiveStep, NotEmbedded, OutOfBounds, RunError, WhileLimit, WorkerFault,
};
pub use options::CompileOptions;
pub use shared::cache_entry::{cache_dir, CacheOutcome, CACHE_LAYOUT};
/// The fixed preludes of generated C++ and CUDA (one source, two dialects), for tools and
/// golden tests that show generated code without them.
pub use shared::prelude::{CPP as CPP_PRELUDE, CUDA as CUDA_PRELUDE};

/// The version of the generated code; part of every cache key. Bump it whenever the emitter's
/// output changes meaning.
pub const CODEGEN_VERSION: &str = "ovl-codegen-cpu-12";

//! Code shared by the C++ and CUDA backends.
//!
//! - `emit`: the worker-program emitter (both dialects) and its limits.
//! - Index checks are emitted only where `ovl_ir::intervals` cannot prove an index inside.
//! - `literal`: C++ types and literals of every dtype.
//! - [`prelude`]: the `ovl::` helpers of generated code, one source for both dialects.
//! - [`cache_entry`]: one entry of the on-disk operator cache (layout, lock, double-check,
//!   atomic writes, `meta`, integrity check), the cache root and the environment switches.
//! - [`fault`]: the fault status of generated code and the error it becomes.
//! - [`sizes`]: sizes known when compiling or given at run time (symbolic), as generated code
//!   spells them and as a run resolves them.
//! - [`symbols`]: the tensor types and workgroup both runtimes check a run against.

pub mod cache_entry;
pub(crate) mod emit;
pub mod fault;
pub(crate) mod literal;
pub mod prelude;
pub mod sizes;
pub mod symbols;

/// How many consecutive workers of a row generated C++ runs in lockstep (see the emitter's
/// blocked mode); a run hands out workers in multiples of it.
pub use emit::BLOCKED_WORKERS;

//! Everything that runs what `ovl-codegen` built, on the CPU and the GPU.
//!
//! - [`cpu`]: ovl's thread pool ([`cpu::pool`]: every generated kernel and library kernel of a
//!   process runs on it), operators loaded from their libraries and run on host tensors
//!   ([`CompiledOperator`]), and the operator cache that finds a library on disk or has
//!   `ovl-codegen` build it, then loads it once per process ([`compile`]).
//! - [`cuda`]: the CUDA context, device tensors and their caching allocator, modules loaded and
//!   launched, cuBLAS, CUDA graphs (and `ovl-codegen`'s CUDA names, re-exported).
//! - [`plan`]: a graph of operators made ready to run ([`plan::Plan`]): where every value lives,
//!   the kernels that compute them, host and device runs, scratch buffers, recorded device
//!   graphs.
//! - [`dlpack`]: tensors exchanged with other libraries through DLPack, without copies:
//!   imported ([`dlpack::DlpackTensor`]) and exported ([`dlpack::export_versioned`]).
//! - [`gemm`]: the CPU kernels of matrix products (library calls) and their epilogues.
//! - [`cache`]: the operator cache as a whole (in memory and on disk) and how to empty it.
//!
//! The facade crate `ovl` is the API users see; this crate's is for the facade, the TensorFlow
//! bridge, tests and benchmarks.
//!
//! ```no_run
//! # fn demo(dag: &ovl_ir::ir::ExpressionDag, x: &ovl_ir::HostTensor) -> anyhow::Result<()> {
//! use ovl_runtime::compile;
//! let op = compile(dag, &ovl_codegen::CompileOptions::default())?; // or found in the cache
//! let mut out = vec![ovl_ir::HostTensor::zeros(ovl_ir::DType::F32, &[4])];
//! op.run(&[x], &mut out, &[], 0)?; // no symbol values; 0 threads: one per core
//! # Ok(()) }
//! ```

pub mod cache;
pub mod cpu;
pub mod cuda;
pub mod dlpack;
mod error;
pub mod gemm;
pub mod plan;

pub use cache::{clear_cache, clear_cache_at, memory_caches};
pub use cpu::cache::{compile, compile_all, compile_with_outcome};
pub use cpu::operator::{CompiledOperator, Origin, PARALLEL_MIN_WORK};
pub use cpu::pool::{cpu_count, for_each_parallel};
pub use error::{Mismatch, PlanError, RunFailure, Wiring};
pub use ovl_ir::isa;

//! Backends of ovl. C++: generates C++ from an operator ([`ovl_ir::ir::ExpressionDag`]),
//! compiles it with the system C++ compiler into a shared library kept in an on-disk operator
//! cache, loads it and runs it on host tensors on several threads. CUDA ([`cuda`]): generates
//! CUDA, compiles it with NVRTC into the same cache, validates PTX with ptxas without a GPU and
//! runs kernels on a GPU.
//!
//! ```no_run
//! # fn demo(dag: &ovl_ir::ir::ExpressionDag, x: &ovl_ir::HostTensor) -> anyhow::Result<()> {
//! use ovl_codegen::{compile, CompileOptions};
//! let op = compile(dag, &CompileOptions::default())?; // compiles, or finds it in the cache
//! let mut out = vec![ovl_ir::HostTensor::zeros(ovl_ir::DType::F32, &[4])];
//! op.run(&[x], &mut out, &[], 0)?; // no symbol values; 0 threads: one per core
//! # Ok(()) }
//! ```
//!
//! - [`cpu`]: the C++ backend: [`generate_cpp`] (exact IR semantics, vectorizable loops, proven
//!   bounds checks elided), the compiler driver, the cache's C++ entries, the runtime.
//! - `shared`: what both backends use: the worker-program emitter, the interval analysis,
//!   literals, the prelude of `ovl::` helpers (one source, two dialects), cache entries.
//! - [`compiler_flags`], [`compiler_invocations`]: the compiler driver.
//! - [`cache_dir`], [`clear_cache`]: the operator cache (layout in the [`cpu::cache`] module docs).
//! - [`CompiledOperator::run`]: the runtime; [`cpu::abi`] documents the C entry points.
//! - [`cuda`]: the CUDA backend (emitter, NVRTC, ptxas, cache entries, GPU runtime).
//!
//! Environment: `OVL_CACHE_DIR` (cache root), `OVL_FORCE_RECOMPILE=1` (ignore the on-disk
//! cache), `OVL_DUMP_SOURCE=1` (print generated sources to stderr), `CXX` (the compiler, as
//! the `cc` crate reads it).

pub mod cache;
pub mod cpu;
pub mod cuda;
mod error;
mod options;
mod shared;

pub use cache::{cache_dir, clear_cache, clear_cache_at, memory_caches, CACHE_LAYOUT};
pub use cpu::cache::compile_with_outcome;
pub use cpu::compiler::{compiler_flags, compiler_invocations};
pub use cpu::generate_cpp;
pub use cpu::runtime::{cpu_count, for_each_parallel, CompiledOperator, Origin, PARALLEL_MIN_WORK};
pub use error::{
    Access, CodegenError, CompileFailure, CudaCompileFailure, GeometryError, LoadError,
    NonPositiveStep, NotEmbedded, OutOfBounds, RunError, WhileLimit, WorkerFault,
};
pub use options::CompileOptions;
pub use shared::cache_entry::CacheOutcome;
/// The fixed preludes of generated C++ and CUDA (one source, two dialects), for tools and
/// golden tests that show generated code without them.
pub use shared::prelude::{CPP as CPP_PRELUDE, CUDA as CUDA_PRELUDE};

use ovl_ir::ir;
use std::sync::Arc;

/// The version of the generated code; part of every cache key. Bump it whenever the emitter's
/// output changes meaning.
pub const CODEGEN_VERSION: &str = "ovl-codegen-cpu-12";

/// Compiles an operator into a loaded native library, or finds it in the operator cache.
///
/// A warm call (the operator was loaded before in this process with the same cache root and
/// toolchain) hashes the operator and looks it up in memory: no compiler, no file system, no
/// `dlopen`. Otherwise the on-disk cache is tried, and only then is the C++ generated (after
/// [`ovl_ir::validate::validate`]) and compiled.
pub fn compile(
    dag: &ir::ExpressionDag,
    options: &CompileOptions,
) -> Result<Arc<CompiledOperator>, CodegenError> {
    compile_with_outcome(dag, options).map(|(op, _)| op)
}

/// [`compile`] for each of `dags`, in order, the distinct operators that miss the cache compiled
/// concurrently (one C++ compiler at a time per core): a program's kernels are mostly small,
/// and each compiler run spends most of its time starting and reading the prelude, so on 2
/// cores the 18 kernels of a layer's forward + backward compiled in 0.6 of the time. Operators
/// with the same cache key are compiled once, the others then found in memory; an operator
/// that fails to compile is compiled again in order, which returns its error.
pub fn compile_all(
    dags: &[&ir::ExpressionDag],
    options: &CompileOptions,
) -> Vec<Result<Arc<CompiledOperator>, CodegenError>> {
    // One of each distinct operator (by the key that names its library).
    warm_concurrently(
        dags,
        |dag| cpu::cache::target_key(dag, options),
        |dag| {
            // The result is kept by the memory cache (an error is met again below).
            let _ = compile(dag, options);
        },
    );
    dags.iter().map(|dag| compile(dag, options)).collect()
}

/// Runs `warm` once per distinct operator of `dags` (by `key`), the largest first, on one
/// thread per core: what [`compile_all`] and [`cuda::load_all`] do before they collect their
/// results in order from the memory cache. Nothing happens with one core or one operator.
pub(crate) fn warm_concurrently<K: Eq + std::hash::Hash>(
    dags: &[&ir::ExpressionDag],
    key: impl Fn(&ir::ExpressionDag) -> K,
    warm: impl Fn(&ir::ExpressionDag) + Sync,
) {
    let mut seen = std::collections::HashSet::new();
    let mut distinct: Vec<&ir::ExpressionDag> = dags
        .iter()
        .copied()
        .filter(|dag| seen.insert(key(dag)))
        .collect();
    // The largest first: started last, it would end the batch alone.
    distinct.sort_by_key(|dag| std::cmp::Reverse(dag.expressions.len()));
    let threads = cpu_count().min(distinct.len());
    if threads > 1 {
        let next = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| loop {
                    let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(dag) = distinct.get(k) else { break };
                    warm(dag);
                });
            }
        });
    }
}

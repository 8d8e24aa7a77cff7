//! The plan cache: `evaluate`, `evaluate_into_all` and `profile` on a graph seen before cost a
//! lookup, not a fusion and a kernel lookup per operator.
//!
//! A graph is recognised by its key ([`ovl_core::lazy::graph_key`]): every operator's identity
//! (its canonical hash and source location, computed once when the call was recorded), the
//! wiring, the dtype and shape of every graph input, and the outputs; combined here with the
//! options that change what is prepared (target, opt level, cache directory, recompilation,
//! CUDA block size; `OVL_CACHE_DIR` and `OVL_FORCE_RECOMPILE` as set at the call). Host data is
//! not part of the key: it is fed to the cached plan at every run, like [`crate::compile`] does.
//! Computing the key walks the lazy nodes once and never the operators' IR.
//!
//! The cache is bounded by the policy of every in-memory cache ([`ovl_core::lru`], see
//! [`crate::cache_stats`]): it keeps the `capacity` most recently used plans (least recently
//! used evicted first); the capacity is 128, or `OVL_PLAN_CACHE_SIZE` when that is set at the
//! first evaluation, or what [`set_plan_cache_capacity`] sets (0 turns the cache off).
//! [`Target::CudaValidate`] never uses it: validating means running NVRTC and ptxas every time.

use crate::executor::{self, Planned, Prepared};
use crate::options::{Options, Target};
use crate::Error;
use ovl_core::lru::{CacheControl, SharedLru, DEFAULT_CAPACITY, PLAN_CACHE_SIZE_VAR};
use ovl_core::LazyTensor;
use ovl_fuse::OptLevel;
use ovl_runtime::plan::EpilogueMode;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;

/// Plans by [`Key`], compared exactly.
static CACHE: SharedLru<Key, Arc<Planned>> =
    SharedLru::with_env("plans", DEFAULT_CAPACITY, PLAN_CACHE_SIZE_VAR);

/// The plan cache, for [`crate::cache_stats`] and its siblings.
pub(crate) fn cache() -> &'static dyn CacheControl {
    &CACHE
}

/// The key of a graph under some options: the graph key's bytes and everything that changes
/// what is prepared.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    graph: Vec<u8>,
    options: Prepares,
    /// The environment the operator cache reads when the options leave it open.
    env_cache_dir: Option<OsString>,
    env_force_recompile: Option<OsString>,
}

/// The options that change what is prepared; the others ([`Options::threads`],
/// [`Options::dump_source`], [`Options::cuda_validate_archs`] for a target that bypasses the
/// cache) do not, and a plan serves them all.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Prepares {
    target: Target,
    opt_level: OptLevel,
    force_recompile: bool,
    cuda_block_size: u32,
    cache_dir: Option<PathBuf>,
    /// The bound on `while` iterations (resolved: the option, else the environment).
    while_limit: u64,
    cuda_tf32: bool,
    gemm_epilogue: Option<EpilogueMode>,
}

impl Key {
    fn new(graph: Vec<u8>, options: &Options) -> Key {
        // Spelled out so that a new field of `Options` is a compile error here until it is
        // placed on one side or the other.
        let Options {
            target,
            threads: _,
            cache_dir,
            force_recompile,
            dump_source: _,
            opt_level,
            cuda_block_size,
            cuda_validate_archs: _,
            max_while_iterations: _,
            cuda_tf32,
            gemm_epilogue,
        } = options;
        Key {
            graph,
            options: Prepares {
                target: *target,
                opt_level: *opt_level,
                force_recompile: *force_recompile,
                cuda_block_size: *cuda_block_size,
                cache_dir: cache_dir.clone(),
                while_limit: options.while_limit(),
                cuda_tf32: *cuda_tf32,
                gemm_epilogue: *gemm_epilogue,
            },
            env_cache_dir: std::env::var_os("OVL_CACHE_DIR"),
            env_force_recompile: std::env::var_os("OVL_FORCE_RECOMPILE"),
        }
    }
}

/// The prepared graph behind `outputs`: from the cache when it was seen before under these
/// options, else fused, prepared and kept.
pub(crate) fn prepare(outputs: &[&LazyTensor], options: &Options) -> Result<Prepared, Error> {
    if options.target == Target::CudaValidate {
        return prepare_fresh(outputs, options);
    }
    let graph = ovl_core::lazy::graph_key(outputs)?;
    let key = Key::new(graph.bytes, options);
    {
        let mut cache = CACHE.lock();
        if cache.capacity() == 0 {
            drop(cache);
            return prepare_fresh(outputs, options);
        }
        if let Some(planned) = cache.get(&key) {
            return Ok(Prepared {
                planned,
                inputs: graph.inputs,
            });
        }
    }
    let prepared = prepare_fresh(outputs, options)?;
    CACHE.insert(key, prepared.planned.clone());
    Ok(prepared)
}

/// Records, fuses and prepares the graph behind `outputs` without the cache.
fn prepare_fresh(outputs: &[&LazyTensor], options: &Options) -> Result<Prepared, Error> {
    let graph = ovl_core::lazy::build_graph(outputs)?;
    executor::prepare(executor::fuse(graph, options)?, options)
}

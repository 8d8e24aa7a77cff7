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
//! The cache is bounded ([`ovl_core::lru`], the policy the cache of backward graphs shares): it
//! keeps the `capacity` most recently used plans (least recently used evicted first); the
//! capacity is 128, or `OVL_PLAN_CACHE_SIZE` when that is set at the first evaluation, or what
//! [`set_plan_cache_capacity`] sets (0 turns the cache off).
//! [`Target::CudaValidate`] never uses it: validating means running NVRTC and ptxas every time.

use crate::executor::{self, Planned, Prepared};
use crate::options::{Options, Target};
use crate::Error;
use ovl_core::lru::Lru;
use ovl_core::LazyTensor;
use std::sync::{Arc, Mutex, MutexGuard};

/// What [`plan_cache_stats`] reports: counters since the process started (or since
/// [`clear_plan_cache`]) and the current size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlanCacheStats {
    /// Evaluations that found their plan in the cache.
    pub hits: u64,
    /// Evaluations that fused and prepared their graph (and then kept the plan).
    pub misses: u64,
    /// Plans dropped to stay within the capacity.
    pub evictions: u64,
    /// Plans kept now.
    pub entries: usize,
    /// The most plans kept at once.
    pub capacity: usize,
}

/// Plans keyed by [`key`]'s bytes, compared exactly.
static CACHE: Mutex<Option<Lru<Vec<u8>, Arc<Planned>>>> = Mutex::new(None);

/// The cache, created on first use with [`ovl_core::lru::initial_capacity`]. A poisoned lock
/// is taken over: the map is consistent between statements.
fn lock() -> MutexGuard<'static, Option<Lru<Vec<u8>, Arc<Planned>>>> {
    let mut guard = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    if guard.is_none() {
        *guard = Some(Lru::new(ovl_core::lru::initial_capacity()));
    }
    guard
}

/// The counters and size of the plan cache (see the [`crate::evaluate`] documentation).
///
/// ```
/// let before = ovl::plan_cache_stats();
/// assert!(before.entries <= before.capacity);
/// ```
pub fn plan_cache_stats() -> PlanCacheStats {
    let guard = lock();
    let c = guard.as_ref().map(Lru::counters).unwrap_or_default();
    PlanCacheStats {
        hits: c.hits,
        misses: c.misses,
        evictions: c.evictions,
        entries: c.entries,
        capacity: c.capacity,
    }
}

/// Empties the plan cache and resets its counters: the next evaluation of any graph fuses and
/// prepares it again (kernels already compiled are still found in the operator cache). It also
/// empties the cache of backward graphs ([`ovl_core::autodiff::clear_backward_cache`]), which
/// follows the plan cache's policy. [`crate::clear_cache`] calls it too.
pub fn clear_plan_cache() {
    if let Some(c) = lock().as_mut() {
        c.clear();
    }
    ovl_core::autodiff::clear_backward_cache();
}

/// Sets how many plans the cache keeps (least recently used ones are evicted first); 0 turns
/// the cache off. Overrides `OVL_PLAN_CACHE_SIZE`. The cache of backward graphs
/// ([`crate::backward`]) gets the same capacity.
pub fn set_plan_cache_capacity(capacity: usize) {
    if let Some(c) = lock().as_mut() {
        c.set_capacity(capacity);
    }
    ovl_core::autodiff::set_backward_cache_capacity(capacity);
}

/// The key of a graph under `options`: the graph key's bytes followed by every option that
/// changes what is prepared (a self-delimiting encoding, compared exactly).
fn key(mut k: Vec<u8>, options: &Options) -> Vec<u8> {
    k.push(match options.target {
        Target::Interpreter => 0u8,
        Target::Cpu => 1,
        Target::Cuda => 2,
        Target::CudaValidate => 3,
    });
    k.extend_from_slice(&[options.opt_level.get(), options.force_recompile as u8]);
    k.extend_from_slice(&options.cuda_block_size.to_le_bytes());
    k.extend_from_slice(&options.while_limit().to_le_bytes());
    let path = |k: &mut Vec<u8>, p: Option<&std::ffi::OsStr>| match p {
        None => k.push(0),
        Some(p) => {
            k.push(1);
            k.extend_from_slice(&(p.len() as u64).to_le_bytes());
            k.extend_from_slice(p.as_encoded_bytes());
        }
    };
    path(&mut k, options.cache_dir.as_deref().map(|p| p.as_os_str()));
    // The environment the operator cache reads when the options leave it open.
    path(&mut k, std::env::var_os("OVL_CACHE_DIR").as_deref());
    path(&mut k, std::env::var_os("OVL_FORCE_RECOMPILE").as_deref());
    k
}

/// The prepared graph behind `outputs`: from the cache when it was seen before under these
/// options, else fused, prepared and kept.
pub(crate) fn prepare(outputs: &[&LazyTensor], options: &Options) -> Result<Prepared, Error> {
    if options.target == Target::CudaValidate {
        return prepare_fresh(outputs, options);
    }
    let graph = ovl_core::lazy::graph_key(outputs)?;
    let key = key(graph.bytes, options);
    {
        let mut guard = lock();
        let Some(cache) = guard.as_mut() else {
            unreachable!("`lock` creates the cache")
        };
        if cache.capacity() == 0 {
            drop(guard);
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
    if let Some(cache) = lock().as_mut() {
        cache.insert(key, prepared.planned.clone());
    }
    Ok(prepared)
}

/// Records, fuses and prepares the graph behind `outputs` without the cache.
fn prepare_fresh(outputs: &[&LazyTensor], options: &Options) -> Result<Prepared, Error> {
    let graph = ovl_core::lazy::build_graph(outputs)?;
    executor::prepare(executor::fuse(graph, options)?, options)
}

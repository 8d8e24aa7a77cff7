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
//! The cache is bounded: it keeps the `capacity` most recently used plans (least recently used
//! evicted first); the capacity is 128, or `OVL_PLAN_CACHE_SIZE` when that is set at the first
//! evaluation, or what [`set_plan_cache_capacity`] sets (0 turns the cache off).
//! [`Target::CudaValidate`] never uses it: validating means running NVRTC and ptxas every time.

use crate::executor::{self, Planned, Prepared};
use crate::options::{Options, Target};
use crate::Error;
use ovl_core::fast_hash::FastBuild;
use ovl_core::LazyTensor;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// The default number of plans kept.
const DEFAULT_CAPACITY: usize = 128;

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

struct Entry {
    planned: Arc<Planned>,
    /// When it was last used (a tick of [`Cache::clock`]).
    used: u64,
}

struct Cache {
    /// Keyed by [`key`]'s bytes, compared exactly.
    map: HashMap<Vec<u8>, Entry, FastBuild>,
    capacity: usize,
    clock: u64,
}

static CACHE: Mutex<Option<Cache>> = Mutex::new(None);
static HITS: AtomicU64 = AtomicU64::new(0);
static MISSES: AtomicU64 = AtomicU64::new(0);
static EVICTIONS: AtomicU64 = AtomicU64::new(0);

/// The cache, created on first use with the capacity of `OVL_PLAN_CACHE_SIZE` (else the
/// default). A poisoned lock is taken over: the map is consistent between statements.
fn lock() -> MutexGuard<'static, Option<Cache>> {
    let mut guard = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    if guard.is_none() {
        let capacity = std::env::var("OVL_PLAN_CACHE_SIZE")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(DEFAULT_CAPACITY);
        *guard = Some(Cache {
            map: HashMap::default(),
            capacity,
            clock: 0,
        });
    }
    guard
}

impl Cache {
    /// Drops least recently used plans until at most `keep` remain.
    fn shrink_to(&mut self, keep: usize) {
        while self.map.len() > keep {
            let Some(oldest) = self
                .map
                .iter()
                .min_by_key(|(_, e)| e.used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            self.map.remove(&oldest);
            EVICTIONS.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The counters and size of the plan cache (see the [`crate::evaluate`] documentation).
///
/// ```
/// let before = ovl::plan_cache_stats();
/// assert!(before.entries <= before.capacity);
/// ```
pub fn plan_cache_stats() -> PlanCacheStats {
    let guard = lock();
    let cache = guard.as_ref();
    PlanCacheStats {
        hits: HITS.load(Ordering::Relaxed),
        misses: MISSES.load(Ordering::Relaxed),
        evictions: EVICTIONS.load(Ordering::Relaxed),
        entries: cache.map_or(0, |c| c.map.len()),
        capacity: cache.map_or(DEFAULT_CAPACITY, |c| c.capacity),
    }
}

/// Empties the plan cache and resets its counters: the next evaluation of any graph fuses and
/// prepares it again (kernels already compiled are still found in the operator cache).
/// [`crate::clear_cache`] calls it too.
pub fn clear_plan_cache() {
    let mut guard = lock();
    if let Some(c) = guard.as_mut() {
        c.map.clear();
    }
    HITS.store(0, Ordering::Relaxed);
    MISSES.store(0, Ordering::Relaxed);
    EVICTIONS.store(0, Ordering::Relaxed);
}

/// Sets how many plans the cache keeps (least recently used ones are evicted first); 0 turns
/// the cache off. Overrides `OVL_PLAN_CACHE_SIZE`.
pub fn set_plan_cache_capacity(capacity: usize) {
    let mut guard = lock();
    if let Some(c) = guard.as_mut() {
        c.capacity = capacity;
        c.shrink_to(capacity);
    }
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
        if cache.capacity == 0 {
            drop(guard);
            return prepare_fresh(outputs, options);
        }
        cache.clock += 1;
        let now = cache.clock;
        if let Some(e) = cache.map.get_mut(&key) {
            e.used = now;
            HITS.fetch_add(1, Ordering::Relaxed);
            return Ok(Prepared {
                planned: e.planned.clone(),
                inputs: graph.inputs,
            });
        }
    }
    MISSES.fetch_add(1, Ordering::Relaxed);
    let prepared = prepare_fresh(outputs, options)?;
    let mut guard = lock();
    if let Some(cache) = guard.as_mut() {
        if cache.capacity > 0 {
            cache.clock += 1;
            let used = cache.clock;
            cache.map.insert(
                key,
                Entry {
                    planned: prepared.planned.clone(),
                    used,
                },
            );
            let capacity = cache.capacity;
            cache.shrink_to(capacity);
        }
    }
    Ok(prepared)
}

/// Records, fuses and prepares the graph behind `outputs` without the cache.
fn prepare_fresh(outputs: &[&LazyTensor], options: &Options) -> Result<Prepared, Error> {
    let graph = ovl_core::lazy::build_graph(outputs)?;
    executor::prepare(executor::fuse(graph, options)?, options)
}

//! Every in-memory cache of ovl, under one policy ([`ovl_core::lru`]: the `capacity` most
//! recently used entries, least recently used evicted first, 0 turns a cache off), with one
//! report ([`cache_stats`]), one clear ([`clear_caches`]) and one capacity setter
//! ([`set_cache_capacity`]).
//!
//! | [`Cache`] | what it keeps | key | default capacity |
//! |---|---|---|---|
//! | `Plans` | fused, prepared graphs of `evaluate` | graph key + options that change the plan | 128 (`OVL_PLAN_CACHE_SIZE`) |
//! | `BackwardGraphs` | backward passes of `backward` | graph key + gradient functions | 128 (`OVL_PLAN_CACHE_SIZE`) |
//! | `TraceMemo` | traced operator IR | operator + input dtypes, shapes + trace-time arguments | 4096 |
//! | `VmapOperators` | batched operator IR of `vmap` | operator key + batched inputs + batch size | 4096 |
//! | `Fusion` | fusion results | canonical graph hash + level + rules' version | 512 |
//! | `CpuModules` | C++ libraries loaded in this process | cache root + cache key | 1024 |
//! | `CudaArtifacts` | PTX/CUBIN read or compiled in this process | cache root + cache key | 1024 |
//! | `CudaModules` | CUDA functions loaded onto the GPU | cache root + cache key | 1024 |
//!
//! The on-disk operator cache ([`crate::cache_dir`]) is not one of them: [`crate::clear_cache_dir`]
//! empties it (and every in-memory cache). Nor is the CPU runner's pool of temporaries (buffers
//! of a graph's intermediate tensors kept for the next run, shared by every thread, at most
//! 1 GiB unless `OVL_SCRATCH_BYTES` or [`set_scratch_capacity`] says otherwise; see
//! [`scratch_usage`]): it is measured in bytes, not entries, and [`clear_caches`] empties it too.

use ovl_core::lru::CacheControl;

/// The counters of one cache since it was created or last cleared, and its size.
pub use ovl_core::lru::LruCounters as CacheCounters;

/// One of ovl's in-memory caches (see the module documentation of `ovl::caches` for what each
/// keeps).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cache {
    /// Prepared plans of graphs evaluated before.
    Plans,
    /// Backward graphs replayed by [`crate::backward`] (its counters' `bypassed`: backward
    /// passes that could not be keyed, such as a gradient closure without a key).
    BackwardGraphs,
    /// Memoized operator traces.
    TraceMemo,
    /// Batched operators built by [`crate::vmap`].
    VmapOperators,
    /// Fusion results per unfused graph.
    Fusion,
    /// Compiled C++ operators loaded in this process.
    CpuModules,
    /// CUDA artifacts (PTX or CUBIN) read or compiled in this process.
    CudaArtifacts,
    /// CUDA functions loaded onto the GPU.
    CudaModules,
}

impl Cache {
    /// Every cache, in the order of [`CacheStats`]'s fields.
    pub const ALL: [Cache; 8] = [
        Cache::Plans,
        Cache::BackwardGraphs,
        Cache::TraceMemo,
        Cache::VmapOperators,
        Cache::Fusion,
        Cache::CpuModules,
        Cache::CudaArtifacts,
        Cache::CudaModules,
    ];

    fn control(self) -> &'static dyn CacheControl {
        let [cpu_modules, cuda_artifacts, cuda_modules] = ovl_runtime::memory_caches();
        match self {
            Cache::Plans => crate::plan_cache::cache(),
            Cache::BackwardGraphs => ovl_core::autodiff::backward_cache(),
            Cache::TraceMemo => ovl_core::trace::memo::cache(),
            Cache::VmapOperators => ovl_core::vmap::cache(),
            Cache::Fusion => ovl_fuse::fusion_cache(),
            Cache::CpuModules => cpu_modules,
            Cache::CudaArtifacts => cuda_artifacts,
            Cache::CudaModules => cuda_modules,
        }
    }

    /// The cache's name (its field in [`CacheStats`]).
    pub fn name(self) -> &'static str {
        self.control().name()
    }

    /// Empties this cache and resets its counters (its capacity stays); [`clear_caches`]
    /// empties them all.
    ///
    /// ```
    /// ovl::Cache::Plans.clear();
    /// assert_eq!(ovl::cache_stats().plans.entries, 0);
    /// ```
    pub fn clear(self) {
        self.control().clear()
    }
}

/// The counters of every in-memory cache (what [`cache_stats`] returns).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// [`Cache::Plans`].
    pub plans: CacheCounters,
    /// [`Cache::BackwardGraphs`].
    pub backward_graphs: CacheCounters,
    /// [`Cache::TraceMemo`].
    pub trace_memo: CacheCounters,
    /// [`Cache::VmapOperators`].
    pub vmap_operators: CacheCounters,
    /// [`Cache::Fusion`].
    pub fusion: CacheCounters,
    /// [`Cache::CpuModules`].
    pub cpu_modules: CacheCounters,
    /// [`Cache::CudaArtifacts`].
    pub cuda_artifacts: CacheCounters,
    /// [`Cache::CudaModules`].
    pub cuda_modules: CacheCounters,
}

impl CacheStats {
    /// The counters of `cache`.
    pub fn get(&self, cache: Cache) -> CacheCounters {
        match cache {
            Cache::Plans => self.plans,
            Cache::BackwardGraphs => self.backward_graphs,
            Cache::TraceMemo => self.trace_memo,
            Cache::VmapOperators => self.vmap_operators,
            Cache::Fusion => self.fusion,
            Cache::CpuModules => self.cpu_modules,
            Cache::CudaArtifacts => self.cuda_artifacts,
            Cache::CudaModules => self.cuda_modules,
        }
    }
}

/// The counters (hits, misses, evictions) and sizes of every in-memory cache.
///
/// ```
/// let s = ovl::cache_stats();
/// assert!(s.plans.entries <= s.plans.capacity);
/// assert_eq!(s.get(ovl::Cache::Fusion), s.fusion);
/// ```
pub fn cache_stats() -> CacheStats {
    let c = |cache: Cache| cache.control().counters();
    CacheStats {
        plans: c(Cache::Plans),
        backward_graphs: c(Cache::BackwardGraphs),
        trace_memo: c(Cache::TraceMemo),
        vmap_operators: c(Cache::VmapOperators),
        fusion: c(Cache::Fusion),
        cpu_modules: c(Cache::CpuModules),
        cuda_artifacts: c(Cache::CudaArtifacts),
        cuda_modules: c(Cache::CudaModules),
    }
}

/// Empties every in-memory cache and resets its counters (capacities stay). Operators already
/// compiled are still found in the operator cache on disk, which this leaves alone (see
/// [`crate::clear_cache_dir`]); handles and plans already made stay usable.
pub fn clear_caches() {
    for cache in Cache::ALL {
        cache.control().clear();
    }
    ovl_runtime::plan::scratch::clear();
}

/// Sets the most bytes the CPU runner keeps of freed temporaries for later runs, in one pool
/// shared by every thread (0 keeps none; buffers beyond it are freed now). The first capacity
/// is `OVL_SCRATCH_BYTES` when set to a number, else 1 GiB.
pub fn set_scratch_capacity(bytes: usize) {
    ovl_runtime::plan::scratch::set_capacity(bytes)
}

/// The bytes the CPU runner's pool of temporaries holds now, and its capacity
/// ([`set_scratch_capacity`]).
///
/// ```
/// let (held, capacity) = ovl::scratch_usage();
/// assert!(held <= capacity);
/// ```
pub fn scratch_usage() -> (usize, usize) {
    ovl_runtime::plan::scratch::usage()
}

/// Sets how many entries `cache` keeps (least recently used evicted first; 0 turns it off).
/// The first capacity of [`Cache::Plans`] and [`Cache::BackwardGraphs`] is
/// `OVL_PLAN_CACHE_SIZE`, else 128.
pub fn set_cache_capacity(cache: Cache, capacity: usize) {
    cache.control().set_capacity(capacity)
}

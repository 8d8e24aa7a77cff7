//! The names this release replaced, kept for one release so that code written against them
//! still compiles (with a deprecation warning that names the replacement). The README's
//! "Renamed in this release" lists them.

#![allow(deprecated)]

use crate::caches::{set_cache_capacity, Cache};
use crate::EpilogueMode;

/// The plan cache's counters (the [`Cache::Plans`] field of [`crate::cache_stats`]).
pub type PlanCacheStats = crate::CacheCounters;
pub use ovl_core::autodiff::BackwardCacheStats;
pub use ovl_core::trace::memo::TraceMemoStats;

/// Empties the on-disk operator cache and every in-memory cache.
#[deprecated(
    note = "renamed `ovl::clear_cache_dir` (`ovl::clear_caches` empties the in-memory caches alone)"
)]
pub fn clear_cache() -> Result<(), ovl_codegen::CodegenError> {
    crate::clear_cache_dir()
}

/// The plan cache's counters.
#[deprecated(note = "use `ovl::cache_stats().plans`")]
pub fn plan_cache_stats() -> PlanCacheStats {
    crate::cache_stats().plans
}

/// Empties the plan cache and the cache of backward graphs.
#[deprecated(
    note = "use `ovl::clear_caches()`, or `Cache::Plans.clear()` and `Cache::BackwardGraphs.clear()`"
)]
pub fn clear_plan_cache() {
    Cache::Plans.clear();
    Cache::BackwardGraphs.clear();
}

/// Sets the capacity of the plan cache and of the cache of backward graphs.
#[deprecated(note = "use `ovl::set_cache_capacity(Cache::Plans, n)` (and `Cache::BackwardGraphs`)")]
pub fn set_plan_cache_capacity(capacity: usize) {
    set_cache_capacity(Cache::Plans, capacity);
    set_cache_capacity(Cache::BackwardGraphs, capacity);
}

/// The counters of the cache of backward graphs.
#[deprecated(note = "use `ovl::cache_stats().backward_graphs`")]
pub fn backward_cache_stats() -> BackwardCacheStats {
    ovl_core::autodiff::backward_cache_stats()
}

/// The counters of memoized traces.
#[deprecated(note = "use `ovl::cache_stats().trace_memo`")]
pub fn trace_memo_stats() -> TraceMemoStats {
    ovl_core::trace::memo::trace_memo_stats()
}

/// Forgets every memoized trace.
#[deprecated(note = "use `Cache::TraceMemo.clear()` (or `ovl::clear_caches()`)")]
pub fn clear_trace_memo() {
    Cache::TraceMemo.clear();
}

/// Sets the GEMM epilogue mode for every later run whose options do not set one.
#[deprecated(note = "set `Options::gemm_epilogue` (`Options::with_gemm_epilogue`)")]
pub fn set_gemm_epilogue(mode: EpilogueMode) {
    ovl_runtime::plan::set_gemm_epilogue(mode)
}

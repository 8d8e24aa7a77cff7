//! The plan cache and the cache of backward graphs, which follows its policy, set and emptied
//! together (what `set_plan_cache_capacity` and `clear_plan_cache` did), for the tests of both.

/// The capacity of the plan cache and of the cache of backward graphs.
pub fn plan_capacity(n: usize) {
    ovl::set_cache_capacity(ovl::Cache::Plans, n);
    ovl::set_cache_capacity(ovl::Cache::BackwardGraphs, n);
}

/// Empties the plan cache and the cache of backward graphs.
pub fn clear_plans() {
    ovl::Cache::Plans.clear();
    ovl::Cache::BackwardGraphs.clear();
}

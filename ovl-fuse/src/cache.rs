//! Fusion results remembered in memory, keyed by the canonical hash of the unfused graph and
//! the level, so that evaluating the same graph repeatedly does not search again. Bounded like
//! every in-memory cache of ovl ([`ovl_ir::lru`]): the [`CAPACITY`] most recently used results.

use crate::error::FuseError;
use crate::OptLevel;
use ovl_ir::hash::{canonical_hash_operator_dag, Digest};
use ovl_ir::ir;
use ovl_ir::lru::{CacheControl, SharedLru};
use std::sync::Arc;

/// The fused graph and, per operator, the original operator whose source location it carries.
type Entry = Arc<(ir::OperatorDag, Vec<usize>)>;

/// The most fusion results kept unless `ovl::set_cache_capacity` says otherwise.
pub const CAPACITY: usize = 512;

/// The version of the merger's rules: part of every key, bumped whenever the same graph may
/// fuse differently (2: index substitution and its cost model; 3: consumers looped inside
/// reductions; 4: elementwise consumers run in the loop that writes a row; 5: library calls are
/// boundaries; 6: register hand-overs made in sweeps, so merges group differently with the same
/// kernel counts, and no operator computed more than 4 times; 7: the cost model charges loop
/// reads made a cache line apart by a substitution; 8: substitutions priced whole, `memory`,
/// and work repeated beside a producer that stays bounded, `cost::DUPLICATE_WORK`; 9: products
/// sharing an operand stacked into one, `stack`; 10: every merge kind priced, gathers scalar,
/// a bound against the operators before fusion, `memory::SLACK_TOTAL`; 11: row reuse keeps one
/// buffer per value and reads it in loops whose range lies inside the first loop's; 12: column
/// kernels' elementwise passes split off on the CPU, `column_pass`; 13: the work a consumer
/// repeats for producers that stay summed over its copies, and cuts read in place never
/// merged; 14: a copy beside a producer that stays, a library call between the two, loads no
/// more than it saves, `Reason::CopyLoadsMore`).
pub const FUSION_VERSION: u32 = 14;

/// The key: the rules' version, the unfused graph's canonical hash, the level, row reuse.
type Key = (u32, Digest, u8, crate::RowReuse);

static CACHE: SharedLru<Key, Entry> = SharedLru::new("fusion", CAPACITY);

/// The cache of fusion results, for `ovl::cache_stats`, `ovl::clear_caches` and
/// `ovl::set_cache_capacity`.
pub fn cache() -> &'static dyn CacheControl {
    &CACHE
}

pub(crate) fn optimize_cached(
    dag: ir::OperatorDag,
    level: OptLevel,
    reuse: crate::RowReuse,
) -> Result<ir::OperatorDag, FuseError> {
    let key = (
        FUSION_VERSION,
        canonical_hash_operator_dag(&dag),
        level.get(),
        reuse,
    );
    let hit = CACHE.get(&key);
    let entry = match hit {
        Some(e) => e,
        None => {
            let (fused, sources, _) = crate::run(&dag, level, reuse)?;
            let e = Arc::new((fused, sources));
            CACHE.insert(key, e.clone());
            e
        }
    };
    // The hash ignores source locations: take them from this graph.
    let mut fused = entry.0.clone();
    for (op, &from) in fused.operators.iter_mut().zip(&entry.1) {
        if let Some(original) = dag.operators.get(from) {
            op.source = original.source.clone();
        }
    }
    Ok(fused)
}

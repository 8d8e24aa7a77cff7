//! Fusion results remembered in memory, keyed by the canonical hash of the unfused graph and
//! the level, so that evaluating the same graph repeatedly does not search again.

use crate::error::FuseError;
use crate::OptLevel;
use ovl_ir::hash::{canonical_hash_operator_dag, Digest};
use ovl_ir::ir;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The fused graph and, per operator, the original operator whose source location it carries.
type Entry = Arc<(ir::OperatorDag, Vec<usize>)>;

/// More distinct graphs than this in one process empty the memory (a simple bound).
const CAPACITY: usize = 512;

/// The version of the merger's rules: part of every key, bumped whenever the same graph may
/// fuse differently (2: index substitution and its cost model; 3: consumers looped inside
/// reductions; 4: elementwise consumers run in the loop that writes a row).
pub const FUSION_VERSION: u32 = 4;

/// The key: the rules' version, the unfused graph's canonical hash, the level, row reuse.
type Key = (u32, Digest, u8, crate::RowReuse);

static CACHE: Mutex<Option<HashMap<Key, Entry>>> = Mutex::new(None);

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
    let hit = CACHE
        .lock()
        .ok()
        .and_then(|c| c.as_ref().and_then(|m| m.get(&key).cloned()));
    let entry = match hit {
        Some(e) => e,
        None => {
            let (fused, sources, _) = crate::run(&dag, level, reuse)?;
            let e = Arc::new((fused, sources));
            if let Ok(mut c) = CACHE.lock() {
                let m = c.get_or_insert_with(HashMap::new);
                if m.len() >= CAPACITY {
                    m.clear();
                }
                m.insert(key, e.clone());
            }
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

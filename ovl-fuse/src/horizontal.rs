//! Sibling (horizontal) fusion: two operators over the same workgroup, neither depending on
//! the other, become one operator running both programs in each worker. Nothing is handed over
//! in registers, but one launch (and one pass of the thread pool) replaces two.

use crate::graph::{Node, Work};
use crate::merge::{names_of, Merged, Part, Splice};

/// The first pair of live nodes (in `order`, skipping `skip`) with equal workgroups and no
/// path between them, neither a library call. `desc` is [`Work::descendants`].
pub(crate) fn find_siblings(
    work: &Work,
    order: &[usize],
    desc: &[Vec<u64>],
    skip: &dyn Fn(usize, usize) -> bool,
) -> Option<(usize, usize)> {
    let reaches = |a: usize, b: usize| desc[a][b / 64] >> (b % 64) & 1 == 1;
    let call = |n: usize| work.is_boundary(n);
    for (i, &a) in order.iter().enumerate() {
        if call(a) {
            continue;
        }
        for &b in &order[i + 1..] {
            if !skip(a, b)
                && !call(b)
                && crate::rebase::axis_map(
                    &work.node(b).dag.workgroup_shape,
                    &work.node(a).dag.workgroup_shape,
                )
                .is_some()
                && !reaches(a, b)
                && !reaches(b, a)
            {
                return Some((a, b));
            }
        }
    }
    None
}

/// Merges two independent operators over the same workgroup: `first`'s program, then
/// `second`'s, with all their outputs.
pub(crate) fn merge_siblings(first: &Node, second: &Node, originals: &[String]) -> Merged {
    let names = names_of(first, second, originals);
    let mut s = Splice::new(second, &names);
    let mut maps = Vec::new();
    for node in [first, second] {
        let output_map: Vec<Option<u32>> = node
            .dag
            .outputs
            .iter()
            .map(|t| {
                s.dag.outputs.push(t.clone());
                Some(s.dag.outputs.len() as u32 - 1)
            })
            .collect();
        let input_map: Vec<u32> = node
            .inputs
            .iter()
            .zip(&node.dag.inputs)
            .map(|(&src, t)| s.input(src, t))
            .collect();
        s.append(&Part {
            dag: &node.dag,
            input_map,
            output_map: output_map.clone(),
            replace: Default::default(),
            snapshot_before: Default::default(),
            copies: Default::default(),
        });
        maps.push(output_map);
    }
    let map_second = maps.pop().unwrap_or_default();
    let map_first = maps.pop().unwrap_or_default();
    s.into_merged((first, second), &names, map_first, map_second)
}

//! Facts about an operator that the runtime and the optimizer use.

use crate::ir::{self, Op};
use crate::ops::{self, Block};

/// The control-flow nesting depth at each expression (0 = straight-line code of the worker).
/// The opening expression (IF, RANGE, WHILE_BEGIN) sits at the outer depth, its body one deeper;
/// ELSE and the closing expression sit at the outer depth.
pub fn nesting_depths(dag: &ir::ExpressionDag) -> Vec<u32> {
    let mut depth = 0u32;
    dag.expressions
        .iter()
        .map(
            |e| match ops::info_of_code(e.code).map(|row| (row.op, row.block)) {
                Some((_, Block::Open)) => {
                    depth += 1;
                    depth - 1
                }
                // WHILE_COND belongs to the loop's body; ELSE separates the two branches.
                Some((Op::Else, Block::Middle)) => depth.saturating_sub(1),
                Some((_, Block::Close)) => {
                    depth = depth.saturating_sub(1);
                    depth
                }
                _ => depth,
            },
        )
        .collect()
}

/// For each output: whether every element is written by every run of the operator, because a
/// worker writes it unconditionally (outside any `if` or loop) at exactly its own position and
/// the output has the workgroup's shape. Such an output needs no zero-initialization.
pub fn written_everywhere(dag: &ir::ExpressionDag) -> Vec<bool> {
    let depths = nesting_depths(dag);
    let is_position = |id: u32, axis: usize| {
        dag.expressions
            .get(id as usize)
            .is_some_and(|e| e.code == Op::Position as i32 && e.axis as usize == axis)
    };
    let mut full = vec![false; dag.outputs.len()];
    for (i, e) in dag.expressions.iter().enumerate() {
        let Some(t) = &e.tensor else { continue };
        if e.code != Op::Write as i32 || t.kind != ir::TensorKind::Output as i32 || depths[i] != 0 {
            continue;
        }
        let Some(out) = dag.outputs.get(t.index as usize) else {
            continue;
        };
        let rank = out.shape.len();
        if out.shape != dag.workgroup_shape || e.operands.len() != rank + 1 {
            continue;
        }
        if (0..rank).all(|axis| is_position(e.operands[axis], axis)) {
            full[t.index as usize] = true;
        }
    }
    full
}

/// For each expression, the innermost loop enclosing it: the index of its RANGE or WHILE_BEGIN
/// (a loop's own opener and closer are outside it; WHILE_COND and the condition are inside).
/// Robust to malformed nesting (an unmatched closer is ignored).
pub fn innermost_loops(dag: &ir::ExpressionDag) -> Vec<Option<usize>> {
    let mut stack: Vec<(usize, bool)> = Vec::new(); // (opener, is a loop)
    dag.expressions
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let row = ops::info_of_code(e.code);
            if row.is_some_and(|r| r.block == Block::Close) {
                stack.pop();
            }
            let inner = stack
                .iter()
                .rev()
                .find(|(_, is_loop)| *is_loop)
                .map(|&(o, _)| o);
            if let Some(r) = row.filter(|r| r.block == Block::Open) {
                stack.push((i, r.op != Op::If));
            }
            inner
        })
        .collect()
}

/// The reductions of an operator: for each RANGE that is a reduction loop, the accumulators it
/// reduces (OP_ACCUMULATOR indices, in the order of their first OP_ACCUMULATE in the loop). An
/// OP_ACCUMULATE whose innermost loop is not a RANGE is left out (`validate` refuses it).
pub fn reduction_loops(dag: &ir::ExpressionDag) -> std::collections::BTreeMap<usize, Vec<usize>> {
    let loops = innermost_loops(dag);
    let mut out: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
    for (i, e) in dag.expressions.iter().enumerate() {
        if e.code != Op::Accumulate as i32 {
            continue;
        }
        let (Some(range), Some(&acc)) = (loops[i], e.operands.first()) else {
            continue;
        };
        if dag.expressions[range].code != Op::Range as i32 {
            continue;
        }
        let accs = out.entry(range).or_default();
        if !accs.contains(&(acc as usize)) {
            accs.push(acc as usize);
        }
    }
    out
}

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

/// The bounds `(start, end)` of expression `i` when it is a RANGE that runs every iteration of
/// `start..end` one by one: integer constants `0 <= start < end` and step 1. On the protobuf
/// form, for the gradient's builder (`crate::grad`), which edits it; passes on the typed form
/// use [`crate::typed::Kernel::counted_loop`].
pub fn counted_range(dag: &ir::ExpressionDag, i: usize) -> Option<(u64, u64)> {
    let constant = |id: u32| -> Option<i64> {
        let e = dag.expressions.get(id as usize)?;
        (e.code == Op::Const as i32 && e.dtype == ir::Dtype::I64 as i32).then_some(e.int_value)
    };
    let e = dag.expressions.get(i)?;
    let [start, end, step] = e.operands[..] else {
        return None;
    };
    let (start, end) = (constant(start)?, constant(end)?);
    (e.code == Op::Range as i32 && constant(step)? == 1 && 0 <= start && start < end)
        .then_some((start as u64, end as u64))
}

/// For each expression, `at` of the blocks enclosing it, outermost first, each described by
/// `open` (its opener's index and row) when it opens. A block's opener and closer are outside
/// it; ELSE and WHILE_COND are inside. An unmatched closer is ignored.
fn per_enclosing_blocks<B: Copy, R>(
    dag: &ir::ExpressionDag,
    open: impl Fn(usize, &ops::OpInfo) -> B,
    at: impl Fn(&[B]) -> R,
) -> Vec<R> {
    let mut stack: Vec<B> = Vec::new();
    dag.expressions
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let row = ops::info_of_code(e.code);
            if row.is_some_and(|r| r.block == Block::Close) {
                stack.pop();
            }
            let here = at(&stack);
            if let Some(r) = row.filter(|r| r.block == Block::Open) {
                stack.push(open(i, r));
            }
            here
        })
        .collect()
}

/// For each expression, the innermost loop enclosing it: the index of its RANGE or WHILE_BEGIN
/// (a loop's own opener and closer are outside it; WHILE_COND and the condition are inside).
/// Robust to malformed nesting (an unmatched closer is ignored).
pub fn innermost_loops(dag: &ir::ExpressionDag) -> Vec<Option<usize>> {
    // Each open block: (opener, whether it is a loop).
    per_enclosing_blocks(
        dag,
        |i, r| (i, r.op != Op::If),
        |open| {
            open.iter()
                .rev()
                .find(|(_, is_loop)| *is_loop)
                .map(|&(o, _)| o)
        },
    )
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

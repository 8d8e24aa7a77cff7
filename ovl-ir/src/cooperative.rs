//! Cooperative rows: which operators a GPU runs with several threads per worker, and the
//! reduction order that follows (`proto/ovl.proto`, "Accumulators", the GPU order).
//!
//! A worker whose top-level loops walk a row (softmax, layer and RMS norm, logsumexp, a sum or
//! max along the last axis, their gradients) runs on the GPU as a *group* of `width` threads:
//! thread `j` of the group runs iterations `j, j + width, ...` of every top-level loop, the
//! straight-line code between the loops runs in every thread of the group (it only sees values
//! that are equal in all of them), and a write outside the loops is made by thread 0 alone. So
//! the top-level reduction loops of such an operator have `width` lanes instead of
//! `REDUCE_LANES`: iteration `t` combines into lane `t % width` (lane `j` is thread `j`'s own
//! sequential chain), and the lanes fold pairwise, the fold a warp's `shfl_down` by 1, 2, 4, 8,
//! 16 followed by the same pairwise fold over the warps computes. Loops nested inside a
//! top-level loop keep `REDUCE_LANES` lanes (one thread runs them).
//!
//! [`plan`] decides, from the IR alone, so that the CUDA emitter and the reference interpreter
//! (which computes in this order when asked, [`ReductionOrder::Cuda`]) agree. Every other
//! operator, and every operator on the other backends, keeps the one-thread order.

use crate::analysis::{counted_range, innermost_loops, nesting_depths, reduction_loops};
use crate::intervals::Intervals;
use crate::ir::{self, Op, TensorKind};
use crate::ops::REDUCE_LANES;

/// The order a backend reduces in (`proto/ovl.proto`, "Accumulators").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ReductionOrder {
    /// `REDUCE_LANES` lanes per reduction loop: the interpreter, C++, and CUDA kernels that run
    /// one thread per worker.
    #[default]
    Lanes,
    /// The CUDA backend's order: an operator that [`plan`] accepts reduces its top-level loops
    /// over [`Cooperative::width`] lanes; every other operator as [`ReductionOrder::Lanes`].
    Cuda,
}

/// The fewest threads that cooperate on a worker: one warp.
pub const WARP: u32 = 32;
/// The most threads that cooperate on a worker: one block.
pub const MAX_WIDTH: u32 = 1024;
/// Threads per block when groups are single warps (several workers per block).
pub const WARP_BLOCK: u32 = 256;
/// The row elements each thread of a group should get, at least.
const PER_THREAD: u64 = 8;
/// The shortest row (longest top-level loop) worth a group: shorter rows keep one thread per
/// worker (a loop over a handful of gates is not a row).
pub const MIN_ROW: u64 = 16;

/// How a GPU runs an operator whose workers cooperate (see the module).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cooperative {
    /// Threads per worker (a power of two, [`WARP`] to [`MAX_WIDTH`]): the lanes of the
    /// top-level reduction loops.
    pub width: u32,
    /// Workers per block: [`WARP_BLOCK`] / [`WARP`] for one-warp groups (which need no barrier),
    /// else 1 (a block is a group).
    pub workers_per_block: u32,
    /// The top-level RANGE loops, split over the group's threads.
    pub loops: Vec<usize>,
    /// Per local tensor: its elements per thread (thread `j` holds the elements `i` with
    /// `i % width == j`, at `i / width`).
    pub local_elements: Vec<u64>,
}

impl Cooperative {
    /// Threads per block at launch.
    pub fn block(&self) -> u32 {
        self.width * self.workers_per_block
    }

    /// log2 of the width.
    pub fn width_log2(&self) -> u32 {
        self.width.trailing_zeros()
    }

    /// The lanes of RANGE `range`'s reductions in this order.
    pub fn lanes_of(&self, range: usize) -> usize {
        if self.loops.contains(&range) {
            self.width as usize
        } else {
            REDUCE_LANES
        }
    }
}

/// The group width for rows of `n` elements: about [`PER_THREAD`] elements per thread, a power
/// of two from [`WARP`] to [`MAX_WIDTH`].
pub fn width_for(n: u64) -> u32 {
    let want = n
        .div_ceil(PER_THREAD)
        .clamp(u64::from(WARP), u64::from(MAX_WIDTH));
    want.next_power_of_two() as u32
}

/// How a GPU runs `dag` with several threads per worker, or `None` when it runs one thread per
/// worker. An operator is accepted when:
///
/// - its sizes are known when compiling, and no worker can fault (every index proven in range,
///   every step positive, no `while`: [`Intervals::first_possible_fault`]), so a group never
///   has to agree on which of its threads faulted first;
/// - its top-level loops are RANGEs over constants `0 <= start < end`, step 1, at least one
///   of them is a reduction loop, and the longest runs at least [`MIN_ROW`] iterations;
/// - they walk rows: an input read inside one never indexes an axis but its last with the
///   loop's index, and some read indexes its last axis with it (a column reduction keeps one
///   thread per column, whose neighbours read neighbouring elements);
/// - inside a top-level loop, nothing carries a value from one iteration to the next except
///   the accumulators that loop reduces: an ASSIGN assigns a variable declared inside the
///   loop, an ACCUMULATE whose reduction loop is a nested loop accumulates into an
///   accumulator declared inside the top-level loop;
/// - an output written inside a top-level loop is written only there, each write indexing its
///   last axis with the loop's index, in loops that start at 0 (so element `i` is always
///   written by thread `i % width`);
/// - a local tensor has one axis, and each access is inside a top-level loop starting at 0 and
///   indexes it with the loop's index (so each thread touches only its own elements), and a
///   LOCAL_TENSOR that fills it is top-level code.
pub fn plan(dag: &ir::ExpressionDag) -> Option<Cooperative> {
    if dag.symbol_count > 0 || !dag.symbolic_workgroup.is_empty() {
        return None;
    }
    if Intervals::analyse(dag).first_possible_fault(dag).is_some() {
        return None;
    }
    let depths = nesting_depths(dag);
    let inner = innermost_loops(dag);
    let reductions = reduction_loops(dag);
    let code = |i: usize| Op::try_from(dag.expressions[i].code).unwrap_or(Op::Unspecified);

    // The top-level loop around each expression (its opener and closer included).
    let mut top: Vec<Option<usize>> = vec![None; dag.expressions.len()];
    let mut loops = Vec::new();
    let mut open: Option<usize> = None;
    let mut longest = 0u64;
    for i in 0..dag.expressions.len() {
        let op = code(i);
        if depths[i] == 0 && op == Op::Range {
            let (start, end) = counted_range(dag, i)?;
            longest = longest.max(end - start);
            loops.push(i);
            open = Some(i);
        }
        if depths[i] == 0 && matches!(op, Op::If | Op::WhileBegin) {
            open = None;
        }
        top[i] = open;
        if depths[i] == 0 && op == Op::EndRange {
            open = None;
        }
    }
    // The GPU counts a thread's iterations in 32 bits (`i += width` must not wrap).
    if longest < MIN_ROW
        || longest > u64::from(u32::MAX - MAX_WIDTH)
        || !loops.iter().any(|l| reductions.contains_key(l))
    {
        return None;
    }
    let start_of = |l: usize| counted_range(dag, l).map(|(s, _)| s);
    let operand = |i: usize, j: usize| dag.expressions[i].operands.get(j).map(|&o| o as usize);

    // Outputs written inside top-level loops, and outputs written elsewhere.
    let mut in_loops = vec![false; dag.outputs.len()];
    let mut elsewhere = vec![false; dag.outputs.len()];
    let mut walks_row = false;
    for (i, e) in dag.expressions.iter().enumerate() {
        let op = code(i);
        let inside = top[i].filter(|&l| l != i && depths[i] > 0);
        match op {
            Op::Assign => {
                if let (Some(l), Some(var)) = (inside, operand(i, 0)) {
                    if var < l {
                        return None;
                    }
                }
            }
            Op::Accumulate => {
                if let (Some(l), Some(acc)) = (inside, operand(i, 0)) {
                    if inner[i] != Some(l) && acc < l {
                        return None;
                    }
                }
            }
            // A fill of the whole local, in every thread (of its own elements).
            Op::LocalTensor if depths[i] > 0 => return None,
            Op::Read | Op::Write => {
                let t = e.tensor.as_ref()?;
                let kind = TensorKind::try_from(t.kind).ok()?;
                let index = t.index as usize;
                match kind {
                    TensorKind::Input => {
                        // A row, not a column: neighbouring threads read neighbouring elements.
                        if let Some(l) = inside {
                            let rank = dag.inputs.get(index)?.shape.len();
                            let indices = &e.operands[..rank.min(e.operands.len())];
                            let (last, rest) = indices.split_last().unzip();
                            if rest.is_some_and(|r| r.contains(&(l as u32))) {
                                return None;
                            }
                            walks_row |= last == Some(&(l as u32));
                        }
                    }
                    TensorKind::Local => {
                        let l = inside?;
                        let shape = &dag.locals.get(index)?.shape;
                        if shape.len() != 1 || operand(i, 0) != Some(l) || start_of(l) != Some(0) {
                            return None;
                        }
                    }
                    TensorKind::Output if op == Op::Write => {
                        let rank = dag.outputs.get(index)?.shape.len();
                        match inside {
                            Some(l) => {
                                if rank == 0
                                    || operand(i, rank - 1) != Some(l)
                                    || start_of(l) != Some(0)
                                {
                                    return None;
                                }
                                in_loops[index] = true;
                            }
                            None => elsewhere[index] = true,
                        }
                    }
                    _ => return None,
                }
            }
            _ => {}
        }
    }
    if !walks_row || in_loops.iter().zip(&elsewhere).any(|(a, b)| *a && *b) {
        return None;
    }
    let width = width_for(longest);
    let local_elements = dag
        .locals
        .iter()
        .map(|t| t.shape.first().copied().unwrap_or(1).div_ceil(width as u64))
        .collect();
    Some(Cooperative {
        width,
        workers_per_block: if width == WARP { WARP_BLOCK / WARP } else { 1 },
        loops,
        local_elements,
    })
}

/// The lanes of each RANGE's reductions in `order` (indexed by expression; 0 where the
/// expression is not a RANGE).
pub fn range_lanes(dag: &ir::ExpressionDag, order: ReductionOrder) -> Vec<usize> {
    let plan = match order {
        ReductionOrder::Lanes => None,
        ReductionOrder::Cuda => plan(dag),
    };
    dag.expressions
        .iter()
        .enumerate()
        .map(|(i, e)| {
            if e.code != Op::Range as i32 {
                0
            } else {
                plan.as_ref().map_or(REDUCE_LANES, |p| p.lanes_of(i))
            }
        })
        .collect()
}

/// The pairwise fold of `lanes` (a power of two of them, at least one) with `combine`:
/// `((l0 ⊕ l1) ⊕ (l2 ⊕ l3)) ⊕ ...`, level by level. `None` when `combine` fails.
pub fn pairwise_fold<T: Copy>(
    lanes: &[T],
    mut combine: impl FnMut(T, T) -> Option<T>,
) -> Option<T> {
    let mut level: Vec<T> = lanes.to_vec();
    while level.len() > 1 {
        level = level
            .chunks(2)
            .map(|p| {
                if p.len() == 2 {
                    combine(p[0], p[1])
                } else {
                    Some(p[0])
                }
            })
            .collect::<Option<_>>()?;
    }
    level.first().copied()
}

#[cfg(test)]
mod tests;

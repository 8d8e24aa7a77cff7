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
//! A worker whose top-level loops walk a *column* (a sum or max over axis 0, softmax or a norm
//! along axis 0 or a middle axis, their gradients: worker `c` reads `x[k, c]` for every `k`)
//! cooperates the other way round ([`Layout::Columns`]): a block holds `workers_per_block`
//! neighbouring workers times `width` row-threads, so that a warp's threads read neighbouring
//! columns of one row, coalesced. Thread `j` of a worker's group still runs iterations `j, j +
//! width, ...`, and the lanes fold in the same pairwise order, through shared memory: the
//! reduction order is the rows' one with `width` lanes. Columns are chosen where the workers
//! alone are too few to fill a GPU and the loops long ([`column_layout`]).
//!
//! [`plan`] decides, from the IR alone, so that the CUDA emitter and the reference interpreter
//! (which computes in this order when asked, [`ReductionOrder::Cuda`]) agree. Every other
//! operator, and every operator on the other backends, keeps the one-thread order.

use crate::intervals::Intervals;
use crate::ir::{self, TensorKind};
use crate::ops::REDUCE_LANES;
use crate::typed::{Inst, Kernel, ValueId};
use crate::DType;

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

/// Which threads of a block run which worker's iterations (see the module).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    /// A worker walks a row: its group is `width` consecutive threads (a warp or a whole
    /// block), thread `j` of it is `threadIdx.x % width`, and a warp's threads read
    /// neighbouring elements of one row. The group's chains fold by warp shuffles, then
    /// through shared memory across the warps.
    Rows,
    /// A worker walks a column: a block holds `workers_per_block` neighbouring workers times
    /// `width` row-threads; the worker of a thread is `threadIdx.x % workers_per_block`, its
    /// lane `threadIdx.x / workers_per_block`, so a warp's threads read neighbouring columns
    /// of one row (or of a few rows). The group's chains fold through shared memory, the same
    /// pairwise fold.
    Columns,
}

/// How a GPU runs an operator whose workers cooperate (see the module).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cooperative {
    /// Rows or columns: which threads form a worker's group.
    pub layout: Layout,
    /// Threads per worker (a power of two: [`WARP`] to [`MAX_WIDTH`] for rows, 2 to
    /// [`MAX_WIDTH`] / `workers_per_block` for columns): the lanes of the top-level reduction
    /// loops.
    pub width: u32,
    /// Workers per block. Rows: [`WARP_BLOCK`] / [`WARP`] for one-warp groups (which need no
    /// barrier), else 1 (a block is a group). Columns: a power of two from
    /// [`MIN_COLUMN_WORKERS`] to [`COLUMN_WORKERS`].
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

    /// log2 of the workers per block.
    pub fn workers_log2(&self) -> u32 {
        self.workers_per_block.trailing_zeros()
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

/// The most neighbouring workers of a column block: a warp reads 32 neighbouring columns of
/// one row.
pub const COLUMN_WORKERS: u32 = 32;
/// The fewest: a warp reads 8 neighbouring columns of 4 rows (32-byte runs of f32, a memory
/// sector each), so that few columns still make many blocks.
pub const MIN_COLUMN_WORKERS: u32 = 8;
/// The blocks a column operator should make, at least where it has the columns for it: about
/// one per multiprocessor of a large GPU (an H100 has 132).
pub const COLUMN_BLOCKS: u64 = 128;
/// The threads a column operator should run in all: about what a large GPU holds at once
/// (132 multiprocessors of 1,024 threads and more). Operators with more than half this many
/// workers keep one thread per worker.
pub const COLUMN_THREADS: u64 = 1 << 17;

/// The most shared memory a column block's folds take (a block may have 48 KiB of static
/// shared memory).
pub const COLUMN_SHARED_BYTES: u64 = 32 << 10;

/// The group width for rows of `n` elements: about `PER_THREAD` elements per thread, a power
/// of two from [`WARP`] to [`MAX_WIDTH`].
pub fn width_for(n: u64) -> u32 {
    let want = n
        .div_ceil(PER_THREAD)
        .clamp(u64::from(WARP), u64::from(MAX_WIDTH));
    want.next_power_of_two() as u32
}

/// The largest power of two at most `n` (`n >= 1`).
fn floor_pow2(n: u64) -> u64 {
    1 << (63 - n.leading_zeros())
}

/// The column layout for `workers` workers whose longest top-level loop runs `n` iterations:
/// `(width, workers_per_block)`, or `None` when one thread per worker is as good (the workers
/// alone fill the GPU, or the loops are too short to share).
///
/// Workers per block: [`COLUMN_WORKERS`], fewer (down to [`MIN_COLUMN_WORKERS`]) where that
/// would leave fewer than [`COLUMN_BLOCKS`] blocks. Width: the largest power of two such
/// that all the threads stay within [`COLUMN_THREADS`], each thread gets at least
/// `PER_THREAD` iterations, a block at most [`MAX_WIDTH`] threads, and the folds' shared
/// memory, `fold_bytes` per thread, at most [`COLUMN_SHARED_BYTES`] a block; at least 2.
pub fn column_layout(workers: u64, n: u64, fold_bytes: u64) -> Option<(u32, u32)> {
    if workers == 0 || n < PER_THREAD {
        return None;
    }
    let per_block = floor_pow2((workers / COLUMN_BLOCKS).max(1))
        .clamp(u64::from(MIN_COLUMN_WORKERS), u64::from(COLUMN_WORKERS));
    let width = floor_pow2((COLUMN_THREADS / workers).max(1))
        .min(floor_pow2(n / PER_THREAD))
        .min(u64::from(MAX_WIDTH) / per_block)
        .min(floor_pow2(
            (COLUMN_SHARED_BYTES / fold_bytes.max(1).saturating_mul(per_block)).max(1),
        ));
    (width >= 2).then_some((width as u32, per_block as u32))
}

/// How a GPU runs `dag` with several threads per worker, or `None` when it runs one thread per
/// worker. An operator is accepted when:
///
/// - its sizes are known when compiling, and no worker can fault (every index proven in range,
///   every step positive, no `while`: [`Intervals::first_possible_fault`]), so a group never
///   has to agree on which of its threads faulted first;
/// - its top-level loops are RANGEs over constants `0 <= start < end`, step 1, at least one
///   of them is a reduction loop, and the longest runs at least [`MIN_ROW`] iterations;
/// - inside a top-level loop, nothing carries a value from one iteration to the next except
///   the accumulators that loop reduces: an ASSIGN assigns a variable declared inside the
///   loop, an ACCUMULATE whose reduction loop is a nested loop accumulates into an
///   accumulator declared inside the top-level loop;
/// - an output written inside a top-level loop is written only there, in loops that start at
///   0, each write indexing one same axis with the loop's index (so element `i` along it is
///   always written by thread `i % width`);
/// - a local tensor has one axis, and each access is inside a top-level loop starting at 0 and
///   indexes it with the loop's index (so each thread touches only its own elements), and a
///   LOCAL_TENSOR that fills it is top-level code;
///
/// and its loops walk rows or columns:
///
/// - [`Layout::Rows`]: an input read inside a top-level loop never indexes an axis but its
///   last with the loop's index, some read indexes its last axis with it, and the outputs
///   written in the loops are indexed so along their last axis; the width follows the row
///   length ([`width_for`]);
/// - [`Layout::Columns`], for an operator that does not walk rows: some input read inside a
///   top-level loop indexes its last axis with the innermost workgroup position and another
///   axis with the loop's index (neighbouring workers read neighbouring elements of one row),
///   and [`column_layout`] finds the workers few enough and the loops long enough.
pub fn plan(dag: &ir::ExpressionDag) -> Option<Cooperative> {
    // The callers (the interpreter, the CUDA emitter) run operators that passed validation.
    plan_of(dag, &Kernel::from_validated(dag))
}

/// [`plan`] of `dag` decoded (`kernel`).
fn plan_of(dag: &ir::ExpressionDag, kernel: &Kernel) -> Option<Cooperative> {
    if dag.symbol_count > 0 || !dag.symbolic_workgroup.is_empty() {
        return None;
    }
    if Intervals::of(kernel).first_possible_fault(dag).is_some() {
        return None;
    }
    let reductions = reduction_loops(kernel);
    let top_level = |i: usize| kernel.exprs[i].block.is_none();

    // The top-level loop around each expression (its opener and closer included).
    let mut top: Vec<Option<usize>> = vec![None; kernel.exprs.len()];
    let mut loops = Vec::new();
    let mut open: Option<usize> = None;
    let mut longest = 0u64;
    for (i, e) in kernel.exprs.iter().enumerate() {
        let at_top = top_level(i);
        match e.inst {
            Inst::Range { .. } if at_top => {
                let (start, end) = kernel.counted_loop(i)?;
                longest = longest.max(end - start);
                loops.push(i);
                open = Some(i);
            }
            Inst::If { .. } | Inst::WhileBegin { .. } if at_top => open = None,
            _ => {}
        }
        top[i] = open;
        if at_top && matches!(e.inst, Inst::EndRange { .. }) {
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
    let start_of = |l: usize| kernel.counted_loop(l).map(|(s, _)| s);
    let inner_axis = kernel.workgroup.len().checked_sub(1)? as u32;
    let is_inner_position = |o: ValueId| {
        kernel
            .exprs
            .get(o as usize)
            .is_some_and(|e| e.inst == Inst::Position { axis: inner_axis })
    };

    // Per output: written inside top-level loops (with the axes every such write indexes with
    // its loop's index), written elsewhere.
    let mut in_loops: Vec<Option<Vec<bool>>> = vec![None; dag.outputs.len()];
    let mut elsewhere = vec![false; dag.outputs.len()];
    // Some read walks a row; some read indexes another axis with its loop's index; some read
    // walks a column (that, and its last index the innermost position).
    let (mut walks_row, mut across, mut walks_column) = (false, false, false);
    for (i, e) in kernel.exprs.iter().enumerate() {
        let inside = top[i].filter(|&l| l != i && !top_level(i));
        match &e.inst {
            Inst::Assign { variable, .. } => {
                if let Some(l) = inside {
                    if (*variable as usize) < l {
                        return None;
                    }
                }
            }
            Inst::Accumulate { accumulator, .. } => {
                if let Some(l) = inside {
                    let inner = kernel.enclosing_loops(i).next().map(|r| r as usize);
                    if inner != Some(l) && (*accumulator as usize) < l {
                        return None;
                    }
                }
            }
            // A fill of the whole local, in every thread (of its own elements).
            Inst::LocalTensor { .. } if !top_level(i) => return None,
            Inst::Read { tensor, indices }
            | Inst::Write {
                tensor, indices, ..
            } => {
                let index = tensor.index as usize;
                match tensor.kind {
                    TensorKind::Input => {
                        if let (Some(l), Some((last, rest))) = (inside, indices.split_last()) {
                            let l = l as u32;
                            let other = rest.contains(&l);
                            walks_row |= *last == l;
                            across |= other;
                            walks_column |= other && is_inner_position(*last);
                        }
                    }
                    TensorKind::Local => {
                        let l = inside?;
                        let shape = &dag.locals.get(index)?.shape;
                        if shape.len() != 1
                            || indices.first() != Some(&(l as u32))
                            || start_of(l) != Some(0)
                        {
                            return None;
                        }
                    }
                    TensorKind::Output if matches!(e.inst, Inst::Write { .. }) => {
                        let rank = indices.len();
                        match inside {
                            Some(l) => {
                                if rank == 0 || start_of(l) != Some(0) {
                                    return None;
                                }
                                let axes: Vec<bool> =
                                    indices.iter().map(|&x| x as usize == l).collect();
                                let both = match &in_loops[index] {
                                    None => axes,
                                    Some(had) => {
                                        had.iter().zip(&axes).map(|(a, b)| *a && *b).collect()
                                    }
                                };
                                if !both.contains(&true) {
                                    return None;
                                }
                                in_loops[index] = Some(both);
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
    if in_loops
        .iter()
        .zip(&elsewhere)
        .any(|(a, b)| a.is_some() && *b)
    {
        return None;
    }
    let rows_written = in_loops
        .iter()
        .flatten()
        .all(|axes| axes.last() == Some(&true));
    let (layout, width, workers_per_block) = if walks_row && !across && rows_written {
        let width = width_for(longest);
        let per_block = if width == WARP { WARP_BLOCK / WARP } else { 1 };
        (Layout::Rows, width, per_block)
    } else if walks_column {
        let workers = dag
            .workgroup_shape
            .iter()
            .try_fold(1u64, |n, &s| n.checked_mul(s))?;
        let (width, per_block) =
            column_layout(workers, longest, fold_bytes(kernel, &reductions, &loops))?;
        (Layout::Columns, width, per_block)
    } else {
        return None;
    };
    let local_elements = dag
        .locals
        .iter()
        .map(|t| t.shape.first().copied().unwrap_or(1).div_ceil(width as u64))
        .collect();
    Some(Cooperative {
        layout,
        width,
        workers_per_block,
        loops,
        local_elements,
    })
}

/// The shared memory per thread that a column block's folds take (`shared::emit::cooperative`
/// in ovl-codegen): per accumulator dtype, the size of its values (a half value is an f32 there)
/// times the most accumulators of that dtype one top-level loop reduces.
fn fold_bytes(kernel: &Kernel, reductions: &Reductions, loops: &[usize]) -> u64 {
    let mut most: std::collections::BTreeMap<Option<DType>, (u64, u64)> = Default::default();
    for l in loops {
        let mut here: std::collections::BTreeMap<Option<DType>, u64> = Default::default();
        for &acc in reductions.get(l).map_or(&[][..], |v| v.as_slice()) {
            *here.entry(kernel.exprs[acc].dtype).or_default() += 1;
        }
        for (d, n) in here {
            let size = d.map_or(8, |d| d.compute().size() as u64);
            let m = most.entry(d).or_insert((0, size));
            m.0 = m.0.max(n);
        }
    }
    most.values().map(|(n, size)| n * size).sum()
}

/// For each RANGE that is a reduction loop, the accumulators it reduces (in the order of their
/// first ACCUMULATE in the loop).
type Reductions = std::collections::BTreeMap<usize, Vec<usize>>;

/// The reductions of `kernel` ([`crate::analysis::reduction_loops`] on the typed form).
fn reduction_loops(kernel: &Kernel) -> Reductions {
    let mut out = Reductions::new();
    for e in &kernel.exprs {
        if let Inst::Accumulate {
            accumulator, range, ..
        } = e.inst
        {
            let accs = out.entry(range as usize).or_default();
            if !accs.contains(&(accumulator as usize)) {
                accs.push(accumulator as usize);
            }
        }
    }
    out
}

/// The lanes of each RANGE's reductions in `order` (indexed by expression; 0 where the
/// expression is not a RANGE).
pub fn range_lanes(dag: &ir::ExpressionDag, order: ReductionOrder) -> Vec<usize> {
    let kernel = Kernel::from_validated(dag);
    let plan = match order {
        ReductionOrder::Lanes => None,
        ReductionOrder::Cuda => plan_of(dag, &kernel),
    };
    kernel
        .exprs
        .iter()
        .enumerate()
        .map(|(i, e)| match e.inst {
            Inst::Range { .. } => plan.as_ref().map_or(REDUCE_LANES, |p| p.lanes_of(i)),
            _ => 0,
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

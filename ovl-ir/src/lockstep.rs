//! Whether a kernel's workers can run in lockstep blocks on the CPU: the one rule that the C++
//! backend's blocked workers (`ovl-codegen`'s `shared/emit/blocked.rs`, which lays the blocked
//! program out) and fusion's cost model (which prices such kernels as vectorized) both follow.
//!
//! A block is [`WORKERS`] neighbouring workers along the innermost workgroup axis, run as one
//! loop over the block inside each statement, so that reads neighbouring workers make at
//! neighbouring elements (`x[k, c]` for the block's columns `c`) vectorize. The kernel must
//! have: sizes known when compiling, no symbol, no branch, no while loop; loops only at the top
//! level with constant bounds and a positive step; local tensors only when each is filled at the
//! top level before any access (the block keeps one copy per worker, within [`LOCALS_BYTES`],
//! narrowing the block down to [`MIN_WORKERS`]); every write of an output indexed last by the
//! innermost position (no two workers of a block write one element); no read in a loop with the
//! innermost position in another index than the last; and one read in a loop whose last index is
//! the innermost position plus an offset the same for the whole block (the reason to block).
//! The backend also requires that no access can fault (it proves that itself).
//!
//! The block is wider than [`WORKERS`], up to [`WIDEST`], where that costs nothing the narrow
//! block does not pay ([`width`]): each pass of a column worker walks the whole column, one row
//! (a new page of memory, for rows of 4 KiB or more) per iteration, so a block of 64 f32
//! workers reads 256 bytes per page and the hardware prefetches little; 256 workers read 1 KiB
//! per page and stream (measured on the development machine, AMD EPYC with AVX-512: a column
//! sum of a [4096, 1024] f32 matrix on 2 threads 0.50 -> 0.35 ms, a pass `y = x / s[c]` 1.3 ->
//! 0.86 ms). A wider block is taken only when its accumulators' lanes ([`LANES_BYTES`]) and its
//! copies of the locals ([`LOCALS_BYTES`]) still fit the caches, and when it leaves no more
//! workers of a row to run alone than a block of [`WORKERS`] does.

use crate::ir::{Op, TensorKind};
use crate::motion::{Coefficient, Motion, Var};
use crate::typed::{Inst, Kernel, ValueId};
use crate::Literal;
use std::collections::BTreeSet;

/// Workers per block: the width every kernel with the shape the module describes gets (or
/// narrower, for its locals), and the least innermost extent it needs.
pub const WORKERS: u64 = crate::limits::LOCKSTEP_WORKERS;

/// The widest block (see the module): 1 KiB of f32 per row.
pub const WIDEST: u64 = 256;

/// The most bytes the lanes of the accumulators of one loop take for a block wider than
/// [`WORKERS`] ([`crate::ops::REDUCE_LANES`] per accumulator and worker): a core's L1 data
/// cache, where every iteration reads and writes one lane of each.
pub const LANES_BYTES: u64 = 32 << 10;

/// The work per iteration ([`crate::ops::OpInfo::cost`] units) from which a loop counts as
/// bound by its arithmetic rather than by reading memory: one transcendental function (`exp`,
/// 8 units). A block wider than [`WORKERS`] helps a loop that streams memory and hurt one that
/// computes: measured on the development machine (AMD EPYC, AVX-512, 2 threads, the fused
/// kernels along axis 0 of [4096, 1024] f32), blocks of 256 took RMS norm (`x * x`, then
/// `x / s`: 2 and 4 units) from 1.7-1.9 to 1.2-1.3 ms and logsumexp (`max`, then
/// `exp(x - m)`: 9 units) from 1.3-1.5 to 1.6-1.8 ms; logsumexp with its `exp` taken out went
/// from 1.0 to 0.75 ms.
pub const COMPUTE_BOUND_COST: u64 = 8;

/// The most bytes a block's copies of the locals take (on the heap): a core's L2 cache.
pub const LOCALS_BYTES: u64 = 1 << 20;

/// The narrowest block (a kernel whose locals would need a narrower one is not blocked): 8 f32
/// workers read 32 contiguous bytes per row, half a cache line.
pub const MIN_WORKERS: u64 = 8;

/// The integer arithmetic on positions in a kernel: which values are made of positions and
/// constants only, and how they depend on the innermost position.
pub struct PositionArithmetic {
    /// Positions, and +, -, * and integer casts of positions, constants and such values:
    /// cheap to recompute anywhere.
    pub values: BTreeSet<usize>,
    /// Those whose value depends on the innermost position.
    pub inner: BTreeSet<usize>,
    /// Those equal to the innermost position plus a value that does not depend on it (`c`,
    /// `c + g * h`, `c - 1`): neighbouring workers of a block read neighbouring elements
    /// through them.
    pub unit_offsets: BTreeSet<usize>,
}

impl PositionArithmetic {
    /// The position arithmetic of `kernel`, whose innermost workgroup axis is `inner_axis`;
    /// how each value moves with that position is `crate::motion`'s answer.
    pub fn of(kernel: &Kernel, inner_axis: u32) -> PositionArithmetic {
        let mut values = BTreeSet::new();
        let is_const = |o: ValueId| matches!(kernel.exprs[o as usize].inst, Inst::Const(_));
        for (i, x) in kernel.exprs.iter().enumerate() {
            let int = x.dtype.is_some_and(|d| d.is_int());
            let arithmetic = match x.inst {
                Inst::Position { .. } => true,
                Inst::Cast { .. }
                | Inst::Binary {
                    op: Op::Add | Op::Sub | Op::Mul,
                    ..
                } => {
                    int && kernel
                        .operands(i)
                        .all(|o| is_const(o) || values.contains(&(o as usize)))
                }
                _ => false,
            };
            if arithmetic {
                values.insert(i);
            }
        }
        let mut motion = Motion::new(kernel);
        let position = Var::Position(inner_axis as usize);
        let mut inner = BTreeSet::new();
        let mut unit_offsets = BTreeSet::new();
        for &v in &values {
            match motion.coefficient(v as ValueId, position) {
                Coefficient::Fixed => {}
                c => {
                    inner.insert(v);
                    if c == Coefficient::By(1) {
                        unit_offsets.insert(v);
                    }
                }
            }
        }
        PositionArithmetic {
            values,
            inner,
            unit_offsets,
        }
    }
}

/// The widest block (a power of two from [`MIN_WORKERS`] to [`WORKERS`]) whose copies of the
/// locals, `bytes` per worker, fit [`LOCALS_BYTES`]; `None` when even [`MIN_WORKERS`] does not.
fn width_for_locals(bytes: u64) -> Option<u64> {
    let mut width = WORKERS;
    while width.checked_mul(bytes)? > LOCALS_BYTES {
        width /= 2;
        if width < MIN_WORKERS {
            return None;
        }
    }
    Some(width)
}

/// The most bytes of accumulator lanes one worker keeps in any loop of `kernel`: for each loop,
/// [`crate::ops::REDUCE_LANES`] elements of each accumulator it combines into.
fn lane_bytes(kernel: &Kernel) -> u64 {
    let mut most = 0u64;
    let mut current = 0u64;
    let mut seen = BTreeSet::new();
    for x in &kernel.exprs {
        match x.inst {
            Inst::Range { .. } => {
                current = 0;
                seen.clear();
            }
            Inst::Accumulate { accumulator, .. } if seen.insert(accumulator) => {
                let size = kernel.exprs[accumulator as usize]
                    .dtype
                    .map_or(8, |d| d.size() as u64);
                current += size * crate::ops::REDUCE_LANES as u64;
                most = most.max(current);
            }
            _ => {}
        }
    }
    most
}

/// The most work of one iteration of any loop of `kernel`, in [`crate::ops::OpInfo::cost`]
/// units (the expressions between a RANGE and its END_RANGE).
fn loop_cost(kernel: &Kernel) -> u64 {
    let mut most = 0u64;
    let mut current: Option<u64> = None;
    for x in &kernel.exprs {
        match x.inst {
            Inst::Range { .. } => current = Some(0),
            Inst::EndRange { .. } => current = None,
            _ => {
                if let Some(c) = current.as_mut() {
                    *c += crate::ops::info(x.inst.op()).map_or(1, |i| u64::from(i.cost));
                    most = most.max(*c);
                }
            }
        }
    }
    most
}

/// The most bytes of one lane of a loop's accumulators, for the whole block, that a loop run
/// lane by lane ([`lane_by_lane`]) keeps: 8 AVX-512 registers.
pub const SWEEP_BYTES: u64 = 512;

/// The reduction loops (their RANGE expressions) of `kernel`, run in blocks of `width` workers,
/// whose iterations a block may run lane by lane: first every iteration of lane 0 (iterations
/// 0, 16, 32, ... of [`crate::ops::REDUCE_LANES`] lanes), then lane 1, and so on. Each lane
/// combines the same values in the same order as in iteration order, so results are unchanged;
/// one lane of the block's accumulators stays in registers through its iterations instead of
/// being loaded and stored at each (measured on the development machine, AMD EPYC, AVX-512:
/// logsumexp along axis 0 of [4096, 1024] f32 on one thread, 2.8-3.1 -> 2.4-2.5 ms with its
/// `max` loop run so). Taken where nothing but accumulators carries from one iteration to
/// another (no WRITE, ASSIGN, VARIABLE or LOCAL_TENSOR in the loop), the loop streams memory
/// (less than [`COMPUTE_BOUND_COST`] per iteration: with an `exp` per iteration the order made
/// no difference) and one lane of its accumulators fits [`SWEEP_BYTES`] (with blocks of 256
/// it does not, and walking every 16th row then cost more than it saved).
pub fn lane_by_lane(kernel: &Kernel, width: u64) -> BTreeSet<usize> {
    let mut found = BTreeSet::new();
    // The open loop: (its RANGE, whether it still qualifies, its cost, its accumulators).
    let mut open: Option<(usize, bool, u64, BTreeSet<ValueId>)> = None;
    for (i, x) in kernel.exprs.iter().enumerate() {
        match x.inst {
            Inst::Range { .. } => open = Some((i, true, 0, BTreeSet::new())),
            Inst::EndRange { .. } => {
                if let Some((range, ok, cost, accumulators)) = open.take() {
                    let lane_bytes: u64 = accumulators
                        .iter()
                        .map(|&a| {
                            kernel.exprs[a as usize]
                                .dtype
                                .map_or(8, |d| d.size() as u64)
                        })
                        .sum();
                    if ok
                        && !accumulators.is_empty()
                        && cost < COMPUTE_BOUND_COST
                        && lane_bytes.saturating_mul(width) <= SWEEP_BYTES
                    {
                        found.insert(range);
                    }
                }
            }
            _ => {
                if let Some((_, ok, cost, accumulators)) = open.as_mut() {
                    *cost += crate::ops::info(x.inst.op()).map_or(1, |i| u64::from(i.cost));
                    match x.inst {
                        Inst::Accumulate { accumulator, .. } => {
                            accumulators.insert(accumulator);
                        }
                        Inst::Write { .. }
                        | Inst::Assign { .. }
                        | Inst::Variable { .. }
                        | Inst::LocalTensor { .. } => *ok = false,
                        _ => {}
                    }
                }
            }
        }
    }
    found
}

/// The block width for a kernel whose block of `narrow` workers ([`WORKERS`], or fewer for its
/// locals) fits: the widest power of two up to [`WIDEST`] whose lanes (`lanes` bytes per
/// worker) fit [`LANES_BYTES`], whose copies of the locals (`locals` bytes per worker) fit
/// [`LOCALS_BYTES`], and that leaves as few workers of a row of `innermost` to run alone as a
/// block of [`WORKERS`] (`innermost % width < WORKERS`); `narrow` when one of its loops does
/// [`COMPUTE_BOUND_COST`] or more work per iteration (`cost`), or when none fits.
fn wider(narrow: u64, innermost: u64, locals: u64, lanes: u64, cost: u64) -> u64 {
    if narrow < WORKERS || cost >= COMPUTE_BOUND_COST {
        return narrow;
    }
    let mut width = WIDEST;
    while width > narrow {
        let fits = innermost >= width
            && innermost % width < WORKERS
            && width.saturating_mul(lanes) <= LANES_BYTES
            && width.saturating_mul(locals) <= LOCALS_BYTES;
        if fits {
            return width;
        }
        width /= 2;
    }
    narrow
}

/// The number of workers per block when `kernel` has the shape the module describes, else
/// `None`.
pub fn width(kernel: &Kernel) -> Option<u64> {
    if kernel.symbol_count > 0 {
        return None;
    }
    let innermost = kernel.workgroup.last()?.known()?;
    if kernel.workgroup.iter().any(|d| d.known().is_none()) {
        return None;
    }
    // Each worker's locals, in bytes.
    let mut local_bytes = 0u64;
    for t in &kernel.locals {
        let elements = t
            .shape
            .iter()
            .try_fold(1u64, |n, s| n.checked_mul(s.known()?))?;
        local_bytes = local_bytes.checked_add(elements.checked_mul(t.dtype.size() as u64)?)?;
    }
    let narrow = if kernel.locals.is_empty() {
        WORKERS
    } else {
        width_for_locals(local_bytes)?
    };
    if innermost < narrow {
        return None;
    }
    let width = wider(
        narrow,
        innermost,
        local_bytes,
        lane_bytes(kernel),
        loop_cost(kernel),
    );
    let inner_axis = kernel.workgroup.len().checked_sub(1)? as u32;
    let inst = |i: ValueId| &kernel.exprs[i as usize].inst;
    let is_const = |i: ValueId| matches!(inst(i), Inst::Const(_));
    let is_inner_position =
        |i: ValueId| matches!(inst(i), &Inst::Position { axis } if axis == inner_axis);
    let positions = PositionArithmetic::of(kernel, inner_axis);
    // Every local's first access is its LOCAL_TENSOR at the top level: no worker reads what
    // another worker's fill left (the block fills every copy at once).
    let mut filled = vec![false; kernel.locals.len()];
    let mut in_loop = false;
    let mut gains = false;
    for x in &kernel.exprs {
        match &x.inst {
            &Inst::Range {
                start, end, step, ..
            } => {
                let step_ok = matches!(inst(step), Inst::Const(Literal::Int(n)) if *n > 0);
                if in_loop || ![start, end, step].into_iter().all(is_const) || !step_ok {
                    return None;
                }
                in_loop = true;
            }
            Inst::EndRange { .. } => in_loop = false,
            Inst::LocalTensor { tensor, .. } => {
                if in_loop || tensor.kind != TensorKind::Local {
                    return None;
                }
                *filled.get_mut(tensor.index as usize)? = true;
            }
            Inst::Read { tensor, indices }
            | Inst::Write {
                tensor, indices, ..
            } => {
                let write = matches!(x.inst, Inst::Write { .. });
                if tensor.kind == TensorKind::Local {
                    // Each worker has its own copy: any index, anywhere, once filled.
                    if !*filled.get(tensor.index as usize)? {
                        return None;
                    }
                    continue;
                }
                if write && !indices.last().is_some_and(|&o| is_inner_position(o)) {
                    return None;
                }
                if in_loop {
                    let inner = |o: &ValueId| positions.inner.contains(&(*o as usize));
                    if indices.iter().rev().skip(1).any(inner) {
                        return None;
                    }
                    let unit = |o: &ValueId| positions.unit_offsets.contains(&(*o as usize));
                    gains |= !write && indices.last().is_some_and(unit);
                }
            }
            Inst::Symbol { .. }
            | Inst::If { .. }
            | Inst::Else { .. }
            | Inst::EndIf { .. }
            | Inst::WhileBegin { .. }
            | Inst::WhileCond { .. }
            | Inst::WhileEnd { .. } => return None,
            _ => {}
        }
    }
    gains.then_some(width)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    fn width_of(dag: &crate::ir::ExpressionDag) -> Option<u64> {
        width(&Kernel::decode(dag).unwrap())
    }

    #[test]
    fn column_folds_and_products_per_element_run_in_lockstep_rows_do_not() {
        // A column fold with a branchless body, 150 columns: full blocks, of 128 workers (the
        // 22 left run alone, fewer than 64); with 100 columns, of 64.
        assert_eq!(width_of(&fixtures::column_stats(7, 150)), Some(128));
        assert_eq!(width_of(&fixtures::column_stats(7, 100)), Some(WORKERS));
        assert_eq!(width_of(&fixtures::column_stats(7, 1024)), Some(WIDEST));
        // A product per element with 70 columns: enough for a block of 64; with 2, not.
        assert_eq!(width_of(&fixtures::gate_products(3, 5, 70)), Some(WORKERS));
        assert_eq!(width_of(&fixtures::matmul(3, 4, 2)), None);
        // Row kernels read along their loop, not across workers: no gain.
        assert_eq!(width_of(&fixtures::norm_rows(4, 100)), None);
    }

    #[test]
    fn blocks_widen_where_lanes_locals_and_the_row_allow() {
        // One f32 accumulator (64 bytes of lanes per worker), rows of 1024: the widest.
        assert_eq!(wider(WORKERS, 1024, 0, 64, 2), WIDEST);
        // Lanes of 256 bytes per worker: 128 workers fill the L1 budget.
        assert_eq!(wider(WORKERS, 1024, 0, 256, 2), 128);
        assert_eq!(wider(WORKERS, 1024, 0, 1024, 2), WORKERS);
        // A row of 1000 leaves 40 workers alone with blocks of 64, more with wider ones.
        assert_eq!(wider(WORKERS, 1000, 0, 64, 2), WORKERS);
        // 5000 = 39 * 128 + 8: as few alone as with 64.
        assert_eq!(wider(WORKERS, 5000, 0, 64, 2), 128);
        assert_eq!(wider(WORKERS, 200, 0, 64, 2), WORKERS);
        // Locals of 16 KiB per worker: 64 workers fill LOCALS_BYTES.
        assert_eq!(wider(WORKERS, 1024, 16 << 10, 64, 2), WORKERS);
        assert_eq!(wider(WORKERS, 1024, 4 << 10, 64, 2), WIDEST);
        // A loop with an `exp` per iteration: compute-bound, the block stays at 64.
        assert_eq!(wider(WORKERS, 1024, 0, 64, COMPUTE_BOUND_COST), WORKERS);
        assert_eq!(wider(WORKERS, 1024, 0, 64, COMPUTE_BOUND_COST - 1), WIDEST);
        // A block narrowed by its locals stays narrow.
        assert_eq!(wider(32, 1024, 32 << 10, 64, 2), 32);
    }

    #[test]
    fn only_streaming_folds_with_a_lane_in_registers_run_lane_by_lane() {
        let kernel = Kernel::decode(&fixtures::column_stats(7, 1024)).unwrap();
        let loops: Vec<usize> = (0..kernel.exprs.len())
            .filter(|&i| matches!(kernel.exprs[i].inst, Inst::Range { .. }))
            .collect();
        assert!(!loops.is_empty());
        // Blocks of 8: a lane of every fold fits 512 bytes, unless the loop writes.
        let narrow = lane_by_lane(&kernel, 8);
        // Blocks of 256: a lane of an f32 accumulator is 1 KiB.
        assert!(lane_by_lane(&kernel, 256).is_empty());
        for &l in &narrow {
            assert!(loops.contains(&l));
        }
        assert!(!narrow.is_empty(), "column_stats has a fold that streams");
    }

    #[test]
    fn locals_narrow_the_block_to_fit_the_cache() {
        assert_eq!(width_for_locals(4), Some(WORKERS));
        assert_eq!(width_for_locals(LOCALS_BYTES / 16), Some(16));
        assert_eq!(width_for_locals(LOCALS_BYTES / 4), None);
    }
}

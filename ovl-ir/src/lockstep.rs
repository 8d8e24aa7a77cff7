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

use crate::ir::{Op, TensorKind};
use crate::motion::{Coefficient, Motion, Var};
use crate::typed::{Inst, Kernel, ValueId};
use crate::Literal;
use std::collections::BTreeSet;

/// Workers per block.
pub const WORKERS: u64 = crate::limits::LOCKSTEP_WORKERS;

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
    let width = if kernel.locals.is_empty() {
        WORKERS
    } else {
        width_for_locals(local_bytes)?
    };
    if innermost < width {
        return None;
    }
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
        // A column fold with a branchless body, 150 columns: full blocks.
        assert_eq!(width_of(&fixtures::column_stats(7, 150)), Some(WORKERS));
        // A product per element with 70 columns: enough for a block of 64; with 2, not.
        assert_eq!(width_of(&fixtures::gate_products(3, 5, 70)), Some(WORKERS));
        assert_eq!(width_of(&fixtures::matmul(3, 4, 2)), None);
        // Row kernels read along their loop, not across workers: no gain.
        assert_eq!(width_of(&fixtures::norm_rows(4, 100)), None);
    }

    #[test]
    fn locals_narrow_the_block_to_fit_the_cache() {
        assert_eq!(width_for_locals(4), Some(WORKERS));
        assert_eq!(width_for_locals(LOCALS_BYTES / 16), Some(16));
        assert_eq!(width_for_locals(LOCALS_BYTES / 4), None);
    }
}

//! Which outputs of an operator every run writes whole, so that they need no zero-filling
//! (decided on the typed form, [`crate::typed::Kernel`]).

use crate::dtype::Literal;
use crate::ir::{self, Op};
use crate::typed::{Dim, Inst, Kernel, TensorId, ValueId};

/// For each output: whether every element is written by every run of the operator (that does
/// not fault), so that the output needs no zero-initialization. An output counts when its
/// writes cover it, counting only writes outside any `if` or `while` and nested in nothing but
/// RANGE loops with constant bounds and step 1 (loops that run every iteration): either one
/// write at exactly the worker's own position into an output of the workgroup's shape, outside
/// any loop, or writes whose index in each dimension is `position(a)`, the index of an
/// enclosing such loop, either of them plus a constant `c`, or a constant `c` (each axis and
/// each loop at most once per write), so that each write covers a box of the output, when
/// those boxes lie inside the output, do not overlap, and together hold as many elements as it
/// has (for example the four gates of a gradient written at `[b, h]`, `[b, h + H]`,
/// `[b, h + 2H]`, `[b, h + 3H]`, or a row written by a worker at `[r, j]` for `j in 0..cols`).
/// The boxes are used only for operators and outputs without symbolic sizes.
pub fn written_everywhere(dag: &ir::ExpressionDag) -> Vec<bool> {
    if crate::library::is_library_call(dag) {
        // A library call writes every element of its output (`proto/ovl.proto`).
        return vec![true; dag.outputs.len()];
    }
    written_everywhere_in(&Kernel::from_validated(dag))
}

/// [`written_everywhere`] of an operator that is not a library call, on its typed form.
pub fn written_everywhere_in(kernel: &Kernel) -> Vec<bool> {
    let workgroup: Option<Vec<u64>> = kernel.workgroup.iter().map(|d| d.known()).collect();
    let is_position = |id: ValueId, axis: usize| {
        kernel.exprs[id as usize].inst == Inst::Position { axis: axis as u32 }
    };
    let mut full = vec![false; kernel.outputs.len()];
    let mut boxes: Vec<Vec<Vec<(u64, u64)>>> = vec![Vec::new(); kernel.outputs.len()];
    for (i, x) in kernel.exprs.iter().enumerate() {
        let Inst::Write {
            tensor:
                TensorId {
                    kind: ir::TensorKind::Output,
                    index,
                },
            indices,
            ..
        } = &x.inst
        else {
            continue;
        };
        let Some(ranges) = enclosing_full_ranges(kernel, i) else {
            continue;
        };
        let out = &kernel.outputs[*index as usize];
        if ranges.is_empty()
            && out.shape == kernel.workgroup
            && (0..indices.len()).all(|axis| is_position(indices[axis], axis))
        {
            full[*index as usize] = true;
        } else if let (Some(wg), Some(shape)) = (&workgroup, known(&out.shape)) {
            if let Some(b) = write_box(kernel, wg, &ranges, indices, &shape) {
                boxes[*index as usize].push(b);
            }
        }
    }
    // With a zero-sized workgroup no worker runs (and no box is written).
    let skip = kernel.symbol_count > 0 || workgroup.as_ref().is_none_or(|w| w.contains(&0));
    for (k, out) in kernel.outputs.iter().enumerate() {
        let Some(shape) = known(&out.shape) else {
            continue;
        };
        if full[k] || skip || boxes[k].is_empty() {
            continue;
        }
        let volume = |b: &[(u64, u64)]| {
            b.iter()
                .map(|&(lo, hi)| hi - lo)
                .try_fold(1u64, u64::checked_mul)
        };
        let total = shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d));
        let sum = boxes[k]
            .iter()
            .try_fold(0u64, |n, b| volume(b).and_then(|v| n.checked_add(v)));
        let disjoint = boxes[k].iter().enumerate().all(|(x, a)| {
            boxes[k][x + 1..]
                .iter()
                .all(|b| a.iter().zip(b).any(|(p, q)| p.1 <= q.0 || q.1 <= p.0))
        });
        full[k] = total.is_some() && sum == total && disjoint;
    }
    full
}

/// A shape whose every size is known when compiled.
fn known(shape: &[Dim]) -> Option<Vec<u64>> {
    shape.iter().map(|d| d.known()).collect()
}

/// The loops around expression `i` when it runs once per iteration of each of them and at
/// every run of the worker, i.e. it is nested in nothing but [`Kernel::counted_loop`] loops, as
/// `(RANGE index, start, end)`, outermost first; `None` inside an `if`, a `while` or any other
/// loop.
fn enclosing_full_ranges(kernel: &Kernel, i: usize) -> Option<Vec<(u32, u64, u64)>> {
    let mut loops = Vec::new();
    let mut block = kernel.exprs[i].block;
    while let Some(b) = block {
        let (start, end) = kernel.counted_loop(b as usize)?;
        loops.push((b, start, end));
        block = kernel.exprs[b as usize].block;
    }
    loops.reverse();
    Some(loops)
}

/// The box of output elements one write covers (per dimension `[lo, hi)`), when each index is
/// `position(a)`, the index of one of the enclosing counted `loops` (see
/// [`enclosing_full_ranges`]), either plus a constant `c >= 0` (either order), or a constant
/// `c >= 0`; no axis or loop is used twice, and the box lies inside `shape`. `workgroup` is the
/// operator's (known) workgroup.
fn write_box(
    kernel: &Kernel,
    workgroup: &[u64],
    loops: &[(u32, u64, u64)],
    index: &[ValueId],
    shape: &[u64],
) -> Option<Vec<(u64, u64)>> {
    let expr = |id: ValueId| kernel.exprs.get(id as usize);
    let constant = |id: ValueId| -> Option<u64> {
        match expr(id)?.inst {
            Inst::Const(Literal::Int(v)) => u64::try_from(v).ok(),
            Inst::Const(Literal::UInt(v)) => Some(v),
            _ => None,
        }
    };
    // What an index ranges over: a workgroup axis or an enclosing loop (its slot in `used`).
    let n_axes = workgroup.len();
    let ranged = |id: ValueId| -> Option<usize> {
        match expr(id)?.inst {
            Inst::Position { axis } => Some(axis as usize).filter(|&a| a < n_axes),
            _ => loops.iter().position(|l| l.0 == id).map(|k| n_axes + k),
        }
    };
    // Where each slot's index starts and how many values it takes.
    let span = |slot: usize| -> (u64, u64) {
        match slot.checked_sub(n_axes) {
            None => (0, workgroup[slot]),
            Some(k) => (loops[k].1, loops[k].2 - loops[k].1),
        }
    };
    let mut used = vec![false; n_axes + loops.len()];
    let mut out = Vec::with_capacity(index.len());
    for (&id, &size) in index.iter().zip(shape) {
        let (slot, offset) = if let Some(c) = constant(id) {
            (None, c)
        } else if let Some(a) = ranged(id) {
            (Some(a), 0)
        } else {
            let Inst::Binary {
                op: Op::Add,
                a: x,
                b: y,
            } = expr(id)?.inst
            else {
                return None;
            };
            match (ranged(x), constant(y), ranged(y), constant(x)) {
                (Some(a), Some(c), _, _) | (_, _, Some(a), Some(c)) => (Some(a), c),
                _ => return None,
            }
        };
        let (offset, extent) = match slot {
            None => (offset, 1),
            Some(a) => {
                if std::mem::replace(&mut used[a], true) {
                    return None;
                }
                let (start, count) = span(a);
                (offset.checked_add(start)?, count)
            }
        };
        let hi = offset.checked_add(extent)?;
        if hi > size {
            return None;
        }
        out.push((offset, hi));
    }
    Some(out)
}

#[cfg(test)]
mod written_tests {
    use super::written_everywhere;
    use crate::builder::{Builder, IN, OUT};
    use crate::DType;

    /// `out[b, h + k * 3] = x[b, h]` for `k` in `gates`, workgroup `[2, 3]`, output `[2, width]`.
    fn gates(gates: &[i64], width: u64) -> crate::ir::ExpressionDag {
        let mut b = Builder::new("gates", &[2, 3]);
        let x = b.input(DType::F32, &[2, 3]);
        let out = b.output(DType::F32, &[2, width]);
        let (p0, p1) = (b.position(0), b.position(1));
        let v = b.read(IN, x, &[p0, p1]);
        for &k in gates {
            let c = b.i64(k * 3);
            let at = b.op(crate::ir::Op::Add, &[p1, c]);
            b.write(OUT, out, &[p0, at], v);
        }
        b.build()
    }

    #[test]
    fn disjoint_boxes_that_fill_the_output_cover_it() {
        assert_eq!(written_everywhere(&gates(&[0, 1, 2, 3], 12)), vec![true]);
        assert_eq!(written_everywhere(&gates(&[3, 1, 0, 2], 12)), vec![true]);
    }

    #[test]
    fn a_gap_an_overlap_or_a_write_outside_is_not_a_cover() {
        // A gap: columns 9..12 are never written.
        assert_eq!(written_everywhere(&gates(&[0, 1, 2], 12)), vec![false]);
        // An overlap (the volumes add up, the union does not).
        assert_eq!(written_everywhere(&gates(&[0, 1, 1, 3], 12)), vec![false]);
        // A box past the end faults rather than covers: it does not fill the gap.
        assert_eq!(written_everywhere(&gates(&[0, 1, 2, 4], 12)), vec![false]);
    }

    #[test]
    fn a_write_inside_a_branch_does_not_count() {
        let mut dag = gates(&[0, 1, 2, 3], 12);
        // Wrap the last write in `if true { .. }`.
        let last = dag.expressions.len() - 1;
        let write = dag.expressions.remove(last);
        let mut b = Builder { dag };
        let t = b.boolean(true);
        b.if_(t);
        b.raw(write);
        b.end_if();
        assert_eq!(written_everywhere(&b.build()), vec![false]);
    }

    /// `out[r, j] = x[r, j]` for `j in start..end` (step `step`), workgroup `[2]`, output `[2, 4]`,
    /// inside `if true { .. }` when `in_if`.
    fn rows(start: i64, end: i64, step: i64, in_if: bool) -> crate::ir::ExpressionDag {
        let mut b = Builder::new("rows", &[2]);
        let x = b.input(DType::F32, &[2, 4]);
        let out = b.output(DType::F32, &[2, 4]);
        let r = b.position(0);
        if in_if {
            let t = b.boolean(true);
            b.if_(t);
        }
        let (s, e, st) = (b.i64(start), b.i64(end), b.i64(step));
        let j = b.range(s, e, st);
        let v = b.read(IN, x, &[r, j]);
        b.write(OUT, out, &[r, j], v);
        b.end_range();
        if in_if {
            b.end_if();
        }
        b.build()
    }

    #[test]
    fn a_row_written_by_a_counted_loop_covers_it() {
        assert_eq!(written_everywhere(&rows(0, 4, 1, false)), vec![true]);
    }

    #[test]
    fn a_loop_that_misses_elements_or_may_not_run_is_not_a_cover() {
        // Column 3 is never written.
        assert_eq!(written_everywhere(&rows(0, 3, 1, false)), vec![false]);
        // Every other column.
        assert_eq!(written_everywhere(&rows(0, 4, 2, false)), vec![false]);
        // Past the end: faults rather than covers.
        assert_eq!(written_everywhere(&rows(1, 5, 1, false)), vec![false]);
        // Inside a branch.
        assert_eq!(written_everywhere(&rows(0, 4, 1, true)), vec![false]);
    }

    #[test]
    fn a_loop_from_an_offset_and_a_constant_column_cover_a_row_together() {
        let mut b = Builder::new("rows", &[2]);
        let out = b.output(DType::F32, &[2, 4]);
        let r = b.position(0);
        let zero = b.f32(0.0);
        let c0 = b.i64(0);
        b.write(OUT, out, &[r, c0], zero);
        let (s, e, st) = (b.i64(1), b.i64(4), b.i64(1));
        let j = b.range(s, e, st);
        b.write(OUT, out, &[r, j], zero);
        b.end_range();
        assert_eq!(written_everywhere(&b.build()), vec![true]);
    }

    #[test]
    fn a_loop_index_used_twice_is_a_diagonal_not_a_cover() {
        let mut b = Builder::new("diag", &[1]);
        let out = b.output(DType::F32, &[4, 4]);
        let one = b.f32(1.0);
        let (s, e, st) = (b.i64(0), b.i64(4), b.i64(1));
        let j = b.range(s, e, st);
        b.write(OUT, out, &[j, j], one);
        b.end_range();
        assert_eq!(written_everywhere(&b.build()), vec![false]);
        // Two nested loops, one per dimension, do cover it.
        let mut b = Builder::new("square", &[1]);
        let out = b.output(DType::F32, &[4, 4]);
        let one = b.f32(1.0);
        let (s, e, st) = (b.i64(0), b.i64(4), b.i64(1));
        let i = b.range(s, e, st);
        let (s, e, st) = (b.i64(0), b.i64(4), b.i64(1));
        let j = b.range(s, e, st);
        b.write(OUT, out, &[i, j], one);
        b.end_range();
        b.end_range();
        assert_eq!(written_everywhere(&b.build()), vec![true]);
    }
}

//! Which outputs of an operator every run writes whole, and which local tensors each worker
//! writes whole before reading them, so that they need no zero-filling (decided on the typed
//! form, [`crate::typed::Kernel`]).

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

/// Whether the LOCAL_TENSOR at expression `at` of `kernel` needs no fill: its local is 1-d, of
/// `n` elements, and the first loop after it that touches it runs `0..n` by 1 and writes it at
/// the loop's position directly in its body (not under an `if` or in an inner loop, so in every
/// iteration), with no read of it before that loop ends. Every element is then written before
/// any is read, so the fill would only be overwritten: a row buffer of softmax (16 KiB per row
/// along the last axis of `[1024, 4096]`, per worker of a block along axis 0) need not be
/// filled first. The LOCAL_TENSOR itself may sit inside loops or branches (a worker's row
/// loop): only what follows it up to the end of the writing loop is examined, and a region
/// closing before that loop begins makes the answer false.
pub fn overwritten_before_read(kernel: &Kernel, at: usize) -> bool {
    let Some(Inst::LocalTensor { tensor, .. }) = kernel.exprs.get(at).map(|x| &x.inst) else {
        return false;
    };
    let Some(decl) = kernel.locals.get(tensor.index as usize) else {
        return false;
    };
    let [extent] = decl.shape.as_slice() else {
        return false;
    };
    let Some(n) = extent.known() else {
        return false;
    };
    let int = |v: ValueId, want: u64| matches!(&kernel.exprs[v as usize].inst, Inst::Const(Literal::Int(c)) if *c >= 0 && *c as u64 == want);
    let same = |t: &TensorId| t.kind == tensor.kind && t.index == tensor.index;
    // Regions opened since `at` (if, loop, while); the writing loop, once met at depth 0: (its
    // RANGE, whether it runs 0..n by 1, whether its body writes the local).
    let mut depth = 0usize;
    let mut writer: Option<(usize, bool, bool)> = None;
    for (i, x) in kernel.exprs.iter().enumerate().skip(at + 1) {
        match &x.inst {
            &Inst::Range {
                start, end, step, ..
            } => {
                if depth == 0 {
                    writer = Some((i, int(start, 0) && int(end, n) && int(step, 1), false));
                }
                depth += 1;
            }
            Inst::If { .. } | Inst::WhileBegin { .. } => depth += 1,
            Inst::EndRange { .. } | Inst::EndIf { .. } | Inst::WhileEnd { .. } => {
                if depth == 0 {
                    // A region around the LOCAL_TENSOR closes before any loop wrote it.
                    return false;
                }
                depth -= 1;
                if depth == 0 {
                    // The end of a loop at depth 0: the answer when it wrote the local, else
                    // (it did not touch it) the next loop decides.
                    if let Some((_, _, true)) = writer.take() {
                        return true;
                    }
                }
            }
            Inst::Read { tensor: t, .. } | Inst::LocalTensor { tensor: t, .. } if same(t) => {
                return false;
            }
            Inst::Write {
                tensor: t, indices, ..
            } if same(t) => match writer.as_mut() {
                Some((range, true, written))
                    if depth == 1 && indices.as_slice() == [*range as ValueId] =>
                {
                    *written = true;
                }
                _ => return false,
            },
            _ => {}
        }
    }
    false
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

#[cfg(test)]
mod local_tests {
    use super::overwritten_before_read;
    use crate::builder::{Builder, IN, LOC, OUT};
    use crate::dtype::{DType, Literal};
    use crate::fixtures;
    use crate::ir::Op;
    use crate::typed::{Inst, Kernel};

    /// A column kernel with a local `f32[rows]` filled with 0, then a loop `0..end` that
    /// writes `loc[k] = x[k, c]` (after reading `loc[k]` when `read_first`), then a loop that
    /// sums the local into the output.
    fn buffered(rows: u64, end: i64, read_first: bool) -> Kernel {
        use crate::ops::Combiner;
        let mut b = Builder::new("buffered", &[70]);
        b.input(DType::F32, &[rows, 70]);
        b.output(DType::F32, &[70]);
        b.declare_local(DType::F32, &[rows]);
        let c = b.position(0);
        let (start, one) = (b.i64(0), b.i64(1));
        let (stop, all) = (b.i64(end), b.i64(rows as i64));
        b.local_fill(0, Literal::Float(0.0));
        let k = b.range(start, stop, one);
        let x = b.read(IN, 0, &[k, c]);
        let v = if read_first {
            let old = b.read(LOC, 0, &[k]);
            b.op(Op::Add, &[old, x])
        } else {
            x
        };
        b.write(LOC, 0, &[k], v);
        b.end_range();
        let zero = b.f32(0.0);
        let total = b.accumulator(Combiner::Sum, zero);
        let k = b.range(start, all, one);
        let e = b.read(LOC, 0, &[k]);
        b.accumulate(total, e);
        b.end_range();
        b.write(OUT, 0, &[c], total);
        Kernel::decode(&b.build()).unwrap()
    }

    fn fill_of(kernel: &Kernel) -> usize {
        (0..kernel.exprs.len())
            .find(|&i| matches!(kernel.exprs[i].inst, Inst::LocalTensor { .. }))
            .expect("a LOCAL_TENSOR")
    }

    #[test]
    fn a_local_written_whole_by_the_next_loop_needs_no_fill() {
        // Softmax along axis 0 with its column buffer: the sum loop writes it whole.
        let softmax = Kernel::decode(&fixtures::softmax_columns(40, 70, true)).unwrap();
        assert!(overwritten_before_read(&softmax, fill_of(&softmax)));
        let whole = buffered(30, 30, false);
        assert!(overwritten_before_read(&whole, fill_of(&whole)));
        // The loop stops one short: the last element keeps its fill.
        let short = buffered(30, 29, false);
        assert!(!overwritten_before_read(&short, fill_of(&short)));
        // The loop reads the fill before it writes.
        let reads = buffered(30, 30, true);
        assert!(!overwritten_before_read(&reads, fill_of(&reads)));
        // Not a LOCAL_TENSOR.
        assert!(!overwritten_before_read(&whole, 0));
    }

    /// Each worker's row loop `for r in 0..3` holding a local `f32[n]` (as row reuse places
    /// its buffers): filled, then written by a loop `0..n` at its position, the write placed
    /// by `shape` (0: in the loop's body, 1: under an `if`, 2: in an inner loop), then read.
    fn row_buffer(n: u64, shape: u8) -> Kernel {
        let mut b = Builder::new("rows", &[4]);
        b.input(DType::F32, &[4, 3, n]);
        b.output(DType::F32, &[4, 3, n]);
        b.declare_local(DType::F32, &[n]);
        let w = b.position(0);
        let (zero, one, three, all) = (b.i64(0), b.i64(1), b.i64(3), b.i64(n as i64));
        let r = b.range(zero, three, one);
        b.local_fill(0, Literal::Float(0.0));
        let k = b.range(zero, all, one);
        let x = b.read(IN, 0, &[w, r, k]);
        match shape {
            0 => {
                b.write(LOC, 0, &[k], x);
            }
            1 => {
                let c = b.op(Op::Lt, &[k, three]);
                b.if_(c);
                b.write(LOC, 0, &[k], x);
                b.end_if();
            }
            _ => {
                let j = b.range(zero, one, one);
                let _ = j;
                b.write(LOC, 0, &[k], x);
                b.end_range();
            }
        }
        b.end_range();
        let k = b.range(zero, all, one);
        let e = b.read(LOC, 0, &[k]);
        b.write(OUT, 0, &[w, r, k], e);
        b.end_range();
        b.end_range();
        Kernel::decode(&b.build()).unwrap()
    }

    #[test]
    fn a_row_buffer_inside_the_workers_loop_needs_no_fill_when_written_in_every_iteration() {
        let body = row_buffer(70, 0);
        assert!(overwritten_before_read(&body, fill_of(&body)));
        // Under an `if` or in an inner loop, the write may not happen in every iteration.
        let guarded = row_buffer(70, 1);
        assert!(!overwritten_before_read(&guarded, fill_of(&guarded)));
        let inner = row_buffer(70, 2);
        assert!(!overwritten_before_read(&inner, fill_of(&inner)));
    }

    #[test]
    fn a_local_whose_region_closes_before_any_loop_keeps_its_fill() {
        // `if (c) { fill }` then the loop that writes it: the fill is not followed by the
        // loop inside its own region.
        let mut b = Builder::new("closed", &[4]);
        b.input(DType::F32, &[4, 8]);
        b.output(DType::F32, &[4, 8]);
        b.declare_local(DType::F32, &[8]);
        let w = b.position(0);
        let (zero, one, eight) = (b.i64(0), b.i64(1), b.i64(8));
        let c = b.op(Op::Lt, &[w, one]);
        b.if_(c);
        b.local_fill(0, Literal::Float(0.0));
        b.end_if();
        let k = b.range(zero, eight, one);
        let x = b.read(IN, 0, &[w, k]);
        b.write(LOC, 0, &[k], x);
        b.end_range();
        let k = b.range(zero, eight, one);
        let e = b.read(LOC, 0, &[k]);
        b.write(OUT, 0, &[w, k], e);
        b.end_range();
        let kernel = Kernel::decode(&b.build()).unwrap();
        assert!(!overwritten_before_read(&kernel, fill_of(&kernel)));
    }
}

//! Reusing a row's values across the loops of one worker.
//!
//! Fusion by looping (see `looped`) and index substitution leave kernels whose worker walks the
//! same row several times, recomputing the same values: softmax from its ops computes
//! `exp(x[r, j] - max)` in the loop that sums it and again in the loop that divides it. When
//! two top-level loops of an operator run over constant ranges with step 1, the second's
//! `s2..n2` inside the first's `s1..n1` (a maximum's loop starts at 1, its first element read
//! before it), and the second computes, in its body, a value the first computes in its body
//! from the same loop index, the same input reads and the same values from before the first
//! loop, the first loop stores it in a worker-local buffer (`n1` elements indexed by the loop
//! index, within a [`RowBudget`]: per buffer, and for all locals of a worker) and the second
//! reads it back instead of computing it again; a later loop that computes a value already kept
//! reads the same buffer. It is the same value, so results are bit for bit unchanged; reads of
//! inputs are pure (inputs never change while an operator runs), and the first loop made every
//! read the second would have made, so no fault moves either. One value is kept per step, the
//! costliest, and only when it costs more than one element's memory traffic
//! ([`crate::cost::MEMORY_UNITS`]: the
//! buffer's store and load stay in a core's cache); steps repeat while values are left.

use crate::cost::{weight, MEMORY_UNITS};
use crate::report::RowBuffer;
use crate::RowBudget;
use ovl_ir::ir::{self, TensorKind};
use ovl_ir::typed::{Inst, Kernel, TensorId, ValueId};
use ovl_ir::{DType, Literal};
use std::collections::HashMap;

/// A top-level loop `for j in start..n` (step 1): its RANGE expression and bounds. A buffer
/// kept for it has `n` elements, indexed by `j`.
#[derive(Clone, Copy)]
struct Loop {
    range: usize,
    start: u64,
    n: u64,
}

/// `dag` with values recomputed by a later loop kept in row buffers (see the module), with
/// a record of each, or `None` when there is nothing to reuse.
pub(crate) fn reuse_rows(
    dag: &ir::ExpressionDag,
    budget: RowBudget,
) -> Option<(ir::ExpressionDag, Vec<RowBuffer>)> {
    let mut out = dag.clone();
    let mut kept = Vec::new();
    // One buffer per step; each changes the numbering, so look again.
    while let Some((next, buffer)) = reuse_once(&out, budget) {
        out = next;
        kept.push(buffer);
    }
    (!kept.is_empty()).then_some((out, kept))
}

fn reuse_once(
    dag: &ir::ExpressionDag,
    budget: RowBudget,
) -> Option<(ir::ExpressionDag, RowBuffer)> {
    let kernel = Kernel::from_validated(dag);
    let depths = ovl_ir::analysis::nesting_depths(dag);
    let inner = ovl_ir::analysis::innermost_loops(dag);
    let loops = counted_top_level_loops(&kernel);
    let used: Option<usize> = dag.locals.iter().try_fold(0usize, |total, t| {
        let elements = ovl_ir::shape::element_count(&t.shape)?;
        total.checked_add(DType::from_ir(t.dtype)?.size().checked_mul(elements)?)
    });
    let room = budget
        .locals_bytes
        .saturating_sub(used? as u64)
        .min(budget.buffer_bytes);
    // In the body of `l` itself (not in a nested block).
    let in_body = |i: usize, l: usize| inner[i] == Some(l) && depths[i] == 1;
    // Each loop's body, ascending; and in each, its expressions by their own fields (a value
    // of the second loop can only be one of the first's with the same fields), so that the
    // search takes time in the bodies' sizes, not in the product of the operator's.
    let mut bodies: HashMap<usize, Vec<usize>> =
        loops.iter().map(|l| (l.range, Vec::new())).collect();
    for i in 0..dag.expressions.len() {
        if depths[i] == 1 {
            if let Some(body) = inner[i].and_then(|l| bodies.get_mut(&l)) {
                body.push(i);
            }
        }
    }
    let mut best: Option<(f64, usize, usize, Loop, Loop)> = None; // (cost, e1, e2, l1, l2)
    for (k, &l2) in loops.iter().enumerate() {
        for &l1 in &loops[..k] {
            if l2.start < l1.start || l2.n > l1.n {
                continue;
            }
            let mut eq = Equivalence {
                dag,
                kernel: &kernel,
                l1: l1.range,
                l2: l2.range,
                in_body: &in_body,
                memo: HashMap::new(),
            };
            let mut alike: HashMap<Fields, Vec<usize>> = HashMap::new();
            for &e1 in &bodies[&l1.range] {
                alike
                    .entry(Fields::of(&dag.expressions[e1]))
                    .or_default()
                    .push(e1);
            }
            for &e2 in &bodies[&l2.range] {
                if !storable(&kernel, e2, l1.n, room) {
                    continue;
                }
                let Some(candidates) = alike.get(&Fields::of(&dag.expressions[e2])) else {
                    continue;
                };
                let Some(e1) = candidates
                    .iter()
                    .copied()
                    .find(|&e1| eq.same(e1 as u32, e2 as u32))
                else {
                    continue;
                };
                let cost = subtree_cost(&kernel, e2, l2.range, &in_body);
                if cost > MEMORY_UNITS && best.is_none_or(|b| cost > b.0) {
                    best = Some((cost, e1, e2, l1, l2));
                }
            }
        }
    }
    let (_, e1, e2, l1, l2) = best?;
    let out = match kept_in(dag, &kernel, e1, l1) {
        Some(buffer) => read_back(dag, buffer, e2, l2),
        None => with_buffer(dag, e1, e2, l1, l2),
    };
    ovl_ir::validate::validate(&out).ok()?;
    let e = &kernel.exprs[e1];
    let record = RowBuffer {
        kernel: dag.name.clone(),
        value: ovl_ir::ops::info(e.inst.op())
            .map_or("value", |r| r.name)
            .to_string(),
        buffer: format!("{}[{}]", e.dtype.map_or("?", |d| d.name()), l1.n),
    };
    Some((out, record))
}

/// The top-level RANGE loops over `start..n` (constant, `0 <= start < n`, step 1).
fn counted_top_level_loops(kernel: &Kernel) -> Vec<Loop> {
    (0..kernel.exprs.len())
        .filter(|&i| kernel.exprs[i].block.is_none())
        .filter_map(|i| {
            let (start, n) = kernel.counted_loop(i)?;
            Some(Loop { range: i, start, n })
        })
        .collect()
}

/// Whether the value of expression `i` can be kept in a buffer of `n` elements of at most
/// `room` bytes.
fn storable(kernel: &Kernel, i: usize, n: u64, room: u64) -> bool {
    let e = &kernel.exprs[i];
    let Some(d) = e.dtype else {
        return false;
    };
    let produces = ovl_ir::ops::info(e.inst.op()).is_some_and(|r| r.produces_value());
    produces && d != DType::Bool && (d.size() as u64).checked_mul(n).is_some_and(|b| b <= room)
}

/// Whether two expressions of the two loops compute the same value at the same iteration.
struct Equivalence<'a, F: Fn(usize, usize) -> bool> {
    dag: &'a ir::ExpressionDag,
    kernel: &'a Kernel,
    l1: usize,
    l2: usize,
    in_body: &'a F,
    memo: HashMap<(u32, u32), bool>,
}

impl<F: Fn(usize, usize) -> bool> Equivalence<'_, F> {
    /// `a` (in or before the first loop) and `b` (in or before the second) are the same value:
    /// the same expression from before the first loop (not a variable), the two loops'
    /// indices, or the same pure computation or input read, in the loops' bodies, of operands
    /// that are the same.
    fn same(&mut self, a: u32, b: u32) -> bool {
        let (ai, bi) = (a as usize, b as usize);
        if ai < self.l1 || bi < self.l1 {
            return a == b && crate::merge::is_pure(&self.kernel.exprs[ai].inst);
        }
        if ai == self.l1 && bi == self.l2 {
            return true;
        }
        if !(self.in_body)(ai, self.l1) || !(self.in_body)(bi, self.l2) {
            return false;
        }
        if let Some(&known) = self.memo.get(&(a, b)) {
            return known;
        }
        let dag = self.dag;
        let (x, y) = (&dag.expressions[ai], &dag.expressions[bi]);
        let alike = (crate::merge::is_pure(&self.kernel.exprs[ai].inst)
            || self.kernel.input_read(ai).is_some())
            && Fields::of(x) == Fields::of(y);
        let same = alike
            && x.operands
                .iter()
                .zip(&y.operands)
                .all(|(&p, &q)| self.same(p, q));
        self.memo.insert((a, b), same);
        same
    }
}

/// The fields of an expression that [`Equivalence::same`] compares, besides its operands'
/// values (their number is one of them).
#[derive(PartialEq, Eq, Hash)]
struct Fields {
    code: i32,
    dtype: i32,
    axis: u32,
    int_value: i64,
    uint_value: u64,
    float_bits: u64,
    tensor: Option<(i32, u32)>,
    operands: usize,
}

impl Fields {
    fn of(e: &ir::Expression) -> Fields {
        Fields {
            code: e.code,
            dtype: e.dtype,
            axis: e.axis,
            int_value: e.int_value,
            uint_value: e.uint_value,
            float_bits: e.float_value.to_bits(),
            tensor: e.tensor.as_ref().map(|t| (t.kind, t.index)),
            operands: e.operands.len(),
        }
    }
}

/// The work of computing expression `i` in the body of loop `l`: its own and that of the
/// operands computed there (each counted once).
fn subtree_cost(
    kernel: &Kernel,
    i: usize,
    l: usize,
    in_body: &impl Fn(usize, usize) -> bool,
) -> f64 {
    let mut seen = std::collections::HashSet::new();
    let mut stack = vec![i];
    let mut total = 0.0;
    while let Some(k) = stack.pop() {
        if !in_body(k, l) || !seen.insert(k) {
            continue;
        }
        total += weight(kernel.exprs[k].inst.op());
        stack.extend(kernel.operands(k).map(|o| o as usize));
    }
    total
}

/// The local buffer that already keeps `e1`'s value for every iteration of `l1` (an earlier
/// step's, for another loop that computed it again): a local of `l1.n` elements whose only
/// write is `buffer[j] = e1` in `l1`'s body. Later loops then read that one buffer instead of
/// each storing its own copy (softmax's gradient from its ops read `exp` back in three loops).
fn kept_in(dag: &ir::ExpressionDag, kernel: &Kernel, e1: usize, l1: Loop) -> Option<TensorId> {
    let at = l1.range as ValueId;
    // Per local: whether it is still a candidate.
    let mut only: HashMap<TensorId, bool> = HashMap::new();
    for (k, x) in kernel.exprs.iter().enumerate() {
        match &x.inst {
            Inst::Write {
                tensor,
                indices,
                value,
            } if tensor.kind == TensorKind::Local => {
                let this = x.block == Some(at) && *value as usize == e1 && indices[..] == [at];
                *only.entry(*tensor).or_insert(true) &= this;
            }
            // Refilled after the loop that keeps the value: not a candidate.
            Inst::LocalTensor { tensor, .. } if k > l1.range => {
                only.insert(*tensor, false);
            }
            _ => {}
        }
    }
    only.into_iter()
        .filter(|&(t, kept)| kept && dag.locals[t.index as usize].shape[..] == [l1.n])
        .map(|(t, _)| t)
        .min_by_key(|t| t.index)
}

/// `dag` with `e2` (in the body of `l2`) read from `buffer` at `l2`'s index.
fn read_back(dag: &ir::ExpressionDag, buffer: TensorId, e2: usize, l2: Loop) -> ir::ExpressionDag {
    let mut out = dag.clone();
    let read = Inst::Read {
        tensor: buffer,
        indices: vec![l2.range as ValueId],
    };
    out.expressions[e2] = read.encode(DType::from_ir(dag.expressions[e2].dtype));
    crate::merge::tidy(&mut out);
    out
}

/// `dag` with a new local buffer of `l1.n` elements filled before loop `l1`, written with the
/// value of `e1` in `l1`'s body, and read in `l2`'s body in place of `e2`.
fn with_buffer(
    dag: &ir::ExpressionDag,
    e1: usize,
    e2: usize,
    l1: Loop,
    l2: Loop,
) -> ir::ExpressionDag {
    let mut out = dag.clone();
    let dtype = dag.expressions[e1].dtype;
    out.locals.push(ir::TensorType {
        dtype,
        shape: vec![l1.n],
        ..Default::default()
    });
    let buffer = TensorId {
        kind: TensorKind::Local,
        index: out.locals.len() as u32 - 1,
    };
    let value_type = DType::from_ir(dtype);
    // A worker's locals start zeroed.
    let zero = match value_type {
        Some(d) if d.is_float() => Literal::Float(0.0),
        _ => Literal::Int(0),
    };
    out.expressions.clear();
    let mut new_id: Vec<u32> = Vec::with_capacity(dag.expressions.len());
    for (i, e) in dag.expressions.iter().enumerate() {
        if i == l1.range {
            let local = Inst::LocalTensor {
                tensor: buffer,
                fill: zero,
            };
            out.expressions.push(local.encode(None));
        }
        let mut e = e.clone();
        for o in &mut e.operands {
            *o = new_id[*o as usize];
        }
        if i == e2 {
            let read = Inst::Read {
                tensor: buffer,
                indices: vec![new_id[l2.range]],
            };
            e = read.encode(value_type);
        }
        new_id.push(out.expressions.len() as u32);
        out.expressions.push(e);
        if i == e1 {
            let write = Inst::Write {
                tensor: buffer,
                indices: vec![new_id[l1.range]],
                value: new_id[e1],
            };
            out.expressions.push(write.encode(None));
        }
    }
    crate::merge::tidy(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ovl_ir::builder::{Builder, IN, OUT};
    use ovl_ir::ir::Op;

    /// Softmax of one row per worker as fusion leaves it: the sum of `exp(x - m)`, then
    /// `exp(x - m) / sum` written, `m` from before the loops. With `same` false the second
    /// loop computes `exp(x - 2m)` instead.
    fn two_loops(n: i64, same: bool) -> ir::ExpressionDag {
        sum_then_loops(n, 1, same)
    }

    /// The sum of `exp(x - m)` in one loop, then `loops` later loops each writing
    /// `exp(x - m) / sum` (then `*`, `+`) to an output of its own; `exp(x - 2m)` there unless
    /// `same`.
    fn sum_then_loops(n: i64, loops: usize, same: bool) -> ir::ExpressionDag {
        let mut b = Builder::new("softmax", &[2]);
        let x = b.input(DType::F32, &[2, n as u64]);
        let outs: Vec<u32> = (0..loops)
            .map(|_| b.output(DType::F32, &[2, n as u64]))
            .collect();
        let r = b.position(0);
        let m = b.f32(0.5);
        let zero = b.f32(0.0);
        let acc = b.var(zero);
        let (s, e, st) = (b.i64(0), b.i64(n), b.i64(1));
        let j = b.range(s, e, st);
        let v = b.read(IN, x, &[r, j]);
        let d = b.op(Op::Sub, &[v, m]);
        let ex = b.op(Op::Exp, &[d]);
        let sum = b.op(Op::Add, &[acc, ex]);
        b.assign(acc, sum);
        b.end_range();
        let total = b.op(Op::Add, &[acc, zero]);
        let m2 = if same { m } else { b.op(Op::Add, &[m, m]) };
        for (out, op) in outs
            .into_iter()
            .zip([Op::Div, Op::Mul, Op::Add].into_iter().cycle())
        {
            let (s, e, st) = (b.i64(0), b.i64(n), b.i64(1));
            let j = b.range(s, e, st);
            let v = b.read(IN, x, &[r, j]);
            let d = b.op(Op::Sub, &[v, m2]);
            let ex = b.op(Op::Exp, &[d]);
            let y = b.op(op, &[ex, total]);
            b.write(OUT, out, &[r, j], y);
            b.end_range();
        }
        b.build()
    }

    #[test]
    fn later_loops_that_compute_the_same_value_read_one_buffer() {
        let dag = sum_then_loops(64, 3, true);
        assert_eq!(count(&dag, Op::Exp), 4);
        let (out, kept) = reuse_rows(&dag, RowBudget::PORTABLE).expect("a buffer");
        ovl_ir::validate::validate(&out).unwrap();
        assert_eq!(kept.len(), 3);
        assert_eq!(count(&out, Op::Exp), 1);
        // One buffer, written once, read by the three later loops.
        assert_eq!(out.locals.len(), 1);
        assert_eq!(count(&out, Op::LocalTensor), 1);
        let local = TensorKind::Local as i32;
        let of_local = |op: Op| {
            out.expressions
                .iter()
                .filter(|e| {
                    e.code == op as i32 && e.tensor.as_ref().is_some_and(|t| t.kind == local)
                })
                .count()
        };
        assert_eq!(of_local(Op::Write), 1);
        assert_eq!(of_local(Op::Read), 3);
    }

    #[test]
    fn a_loop_inside_the_first_loops_range_reads_its_buffer_not_one_outside() {
        // The first loop over 0..64, the second over 1..64: the second reads the buffer.
        let mut dag = sum_then_loops(64, 1, true);
        let starts: Vec<usize> = (0..dag.expressions.len())
            .filter(|&i| dag.expressions[i].code == Op::Range as i32)
            .map(|i| dag.expressions[i].operands[0] as usize)
            .collect();
        let one = |dag: &mut ir::ExpressionDag, at: usize| {
            dag.expressions[at].int_value = 1;
        };
        // Each RANGE has its own start constant (the builder does not share them).
        assert_ne!(starts[0], starts[1]);
        one(&mut dag, starts[1]);
        let (out, _) = reuse_rows(&dag, RowBudget::PORTABLE).expect("a buffer");
        assert_eq!(count(&out, Op::Exp), 1);
        // The first loop over 1..64, the second over 0..64: element 0 was never computed.
        let mut dag = sum_then_loops(64, 1, true);
        one(&mut dag, starts[0]);
        assert!(reuse_rows(&dag, RowBudget::PORTABLE).is_none());
    }

    fn count(dag: &ir::ExpressionDag, op: Op) -> usize {
        dag.expressions
            .iter()
            .filter(|e| e.code == op as i32)
            .count()
    }

    #[test]
    fn a_value_both_loops_compute_is_computed_once() {
        let dag = two_loops(64, true);
        assert_eq!(count(&dag, Op::Exp), 2);
        let (out, kept) = reuse_rows(&dag, RowBudget::PORTABLE).expect("a buffer");
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].value, "exp");
        assert_eq!(kept[0].buffer, "f32[64]");
        ovl_ir::validate::validate(&out).unwrap();
        assert_eq!(count(&out, Op::Exp), 1);
        assert_eq!(out.locals.len(), 1);
        assert_eq!(out.locals[0].shape, vec![64]);
        assert_eq!(count(&out, Op::LocalTensor), 1);
    }

    #[test]
    fn no_buffer_goes_beyond_the_budget_of_local_memory() {
        // The operator already holds 60 KiB and 4 bytes of locals: a 4 KiB buffer would pass
        // 64 KiB.
        let mut dag = two_loops(1024, true);
        dag.locals.push(ir::TensorType {
            dtype: DType::F32.to_ir() as i32,
            shape: vec![15 * 1024 + 1],
            ..Default::default()
        });
        assert!(reuse_rows(&dag, RowBudget::PORTABLE).is_none());
        dag.locals[0].shape = vec![14 * 1024];
        assert!(reuse_rows(&dag, RowBudget::PORTABLE).is_some());
        // The CPU's budget: 256 KiB in all.
        dag.locals[0].shape = vec![63 * 1024 + 1];
        assert!(reuse_rows(&dag, RowBudget::CPU).is_none());
        dag.locals[0].shape = vec![62 * 1024];
        assert!(reuse_rows(&dag, RowBudget::CPU).is_some());
    }

    #[test]
    fn different_values_and_rows_too_long_for_a_buffer_are_left_alone() {
        assert!(reuse_rows(&two_loops(64, false), RowBudget::PORTABLE).is_none());
        assert!(reuse_rows(&two_loops(8192, true), RowBudget::PORTABLE).is_none());
        assert!(reuse_rows(&two_loops(65536 + 1, true), RowBudget::CPU).is_none());
    }

    #[test]
    fn the_cpu_budget_keeps_rows_of_up_to_256_kib() {
        let (out, kept) = reuse_rows(&two_loops(65536, true), RowBudget::CPU).expect("a buffer");
        assert_eq!(kept[0].buffer, "f32[65536]");
        assert_eq!(count(&out, Op::Exp), 1);
    }
}

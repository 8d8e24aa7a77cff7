//! Counted loops whose iterations carry values the gradient needs (`p = p * x[j]`, a state
//! `h[n]` updated in place, a product or a min/max reduced over several loops): each worker
//! records the carried state at the start of every iteration in a worker-local *record*, and
//! the backward walk restores it before recomputing an iteration, then walks it backwards.
//!
//! **Which state.** The variables and accumulators from before the loop that it updates (an
//! accumulator so updated is run as a sequential variable in the gradient operator: `acc = acc
//! ⊕ v` in loop order, which equals the forward's lane order up to rounding for sums and
//! products, exactly for min and max), and the local tensors from before the loop that it reads
//! and that change in it or after it: whole (a copy per iteration), or, when every access in
//! the loop is at the loop's own index (`h[j]`), the one element the iteration touches; a local
//! the loop reads but changes only after it is copied once, when the loop starts.
//!
//! **Recorded or checkpointed.** The records of all such loops of an operator share
//! [`crate::limits::PORTABLE_LOCAL_BYTES`] per worker (every backend's local tensors fit in it),
//! given to the loops in program order. A loop whose record of every iteration (`trips x
//! state` bytes) fits is *recorded*: one extra forward pass, the one the sweep makes anyway.
//! One that does not is *checkpointed*: the state at every `k`-th iteration (`k =
//! ceil(sqrt(trips))`), and, walking the segments last first, each segment replayed forward from
//! its checkpoint into a record of `k` iterations, then walked backwards: `(ceil(trips / k) +
//! k) x state` bytes, two extra forward passes. Past that too, the derivation is an error
//! ([`crate::grad::Construct::TapeTooLarge`]) naming the loop.

use super::{zero, State, Sweep};
use crate::builder::LOC;
use crate::dtype::{DType, Literal};
use crate::grad::Construct;
use crate::ir::Op;
use crate::ops::Combiner;
use crate::typed::{Inst, ValueId};
use std::collections::BTreeMap;

/// Which loops are recorded, and how.
#[derive(Default)]
pub(in crate::grad) struct Plan {
    /// Loop (its RANGE) -> its record.
    pub loops: BTreeMap<usize, LoopTape>,
    /// Per expression: an accumulator run as a sequential variable in the gradient operator.
    pub sequential: Vec<bool>,
}

/// The record of one loop.
pub(in crate::grad) struct LoopTape {
    /// The loop's constant bounds and trip count (> 0).
    pub start: i64,
    pub step: i64,
    pub trips: i64,
    /// Variables and accumulators from before the loop that it updates.
    pub vars: Vec<usize>,
    /// Local tensors from before the loop it reads, with how they are restored.
    pub locals: Vec<(u32, Restore)>,
    /// `Some(k)`: checkpoints every `k` iterations; `None`: every iteration recorded.
    pub every: Option<i64>,
}

/// How a local tensor is restored at the start of an iteration.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(in crate::grad) enum Restore {
    /// The whole tensor, recorded per iteration (or per checkpoint).
    Whole,
    /// The element at the loop's index, the only one the iteration touches.
    Element,
    /// The whole tensor as it was when the loop started (the loop does not change it).
    Entry,
}

/// Per recorded variable: (variable, local `[slots]`).
type VarRecords = Vec<(usize, u32)>;
/// Per recorded local tensor: (local, how, record `[slots, ..shape]`).
type LocalRecords = Vec<(u32, Restore, u32)>;

/// The worker-local tensors holding one loop's records.
#[derive(Clone, Default)]
pub(super) struct Records {
    vars: VarRecords,
    locals: LocalRecords,
    /// Checkpointed loops: the records of one segment (same layout, `k` slots).
    fine: Option<(VarRecords, LocalRecords)>,
}

impl Sweep<'_> {
    /// Whether accumulator `acc` is run as a sequential variable.
    pub(super) fn sequential(&self, acc: usize) -> bool {
        self.plan.sequential.get(acc).copied().unwrap_or(false)
    }

    /// The record of loop `l`, if it has one.
    pub(super) fn taped(&self, l: usize) -> Option<&LoopTape> {
        self.plan.loops.get(&l)
    }

    /// Whether loop `l` restores variable `v` (updates to it are recomputed).
    pub(super) fn restores_var(&self, l: usize, v: usize) -> bool {
        self.taped(l).is_some_and(|t| t.vars.contains(&v))
    }

    /// Whether loop `l` restores local tensor `t` (writes to it are recomputed).
    pub(super) fn restores_local(&self, l: usize, t: u32) -> bool {
        self.taped(l)
            .is_some_and(|x| x.locals.iter().any(|&(u, r)| u == t && r != Restore::Entry))
    }

    /// The constant bounds of loop `l` and its trip count, when they are known and it runs.
    fn constant_trips(&self, l: usize) -> Option<(i64, i64, i64)> {
        let k = self.k;
        let constant = |v: ValueId| match k.exprs[v as usize].inst {
            Inst::Const(Literal::Int(i)) => Some(i),
            _ => None,
        };
        let b: Vec<i64> = k.operands(l).map(constant).collect::<Option<_>>()?;
        let [start, end, step] = b[..] else {
            return None;
        };
        if step <= 0 || end <= start {
            return None;
        }
        let trips = (end as i128 - start as i128 + step as i128 - 1) / step as i128;
        Some((start, step, i64::try_from(trips).ok()?))
    }

    /// The records of the loops in `carrying` (those whose iterations carry what the gradient
    /// needs) and of the reduction loops of the accumulators that need a sequence (a product,
    /// a min or max reduced by several loops): what each restores, and whether it is recorded
    /// or checkpointed within the budget.
    pub(super) fn plan_tapes(&self, carrying: Vec<usize>) -> Result<Plan, Construct> {
        let k = self.k;
        let n = k.exprs.len();
        let mut loops: Vec<usize> = carrying;
        let mut sequential = vec![false; n];
        for (a, x) in k.exprs.iter().enumerate() {
            let Inst::Accumulator { combiner, .. } = x.inst else {
                continue;
            };
            if !self.facts.active[a] || combiner == Combiner::Sum {
                continue;
            }
            let one_loop = super::super::check::extremum_loop(k, a).is_some_and(|l| {
                k.enclosing_loops(l as usize).next() == k.enclosing_loops(a).next()
            });
            if combiner == Combiner::Product || !one_loop {
                sequential[a] = true;
                for e in 0..n {
                    if matches!(k.exprs[e].inst, Inst::Accumulate { accumulator, .. } if accumulator as usize == a)
                    {
                        let refused = Construct::Reduction {
                            combiner: combiner.name(),
                        };
                        for l in k.enclosing_loops(e).filter(|&l| l as usize > a) {
                            if self.constant_trips(l as usize).is_none() {
                                return Err(refused);
                            }
                            loops.push(l as usize);
                        }
                    }
                }
            }
        }
        loops.sort_unstable();
        loops.dedup();
        let mut plan = Plan {
            loops: BTreeMap::new(),
            sequential,
        };
        let mut budget = crate::limits::PORTABLE_LOCAL_BYTES;
        for l in loops {
            let Inst::Range { close, .. } = k.exprs[l].inst else {
                continue;
            };
            let close = close as usize;
            let (start, step, trips) = self.constant_trips(l).ok_or(Construct::LoopCarried)?;
            let mut vars = Vec::new();
            for e in l + 1..close {
                if let Inst::Assign { variable: v, .. } | Inst::Accumulate { accumulator: v, .. } =
                    k.exprs[e].inst
                {
                    if (v as usize) < l && !vars.contains(&(v as usize)) {
                        vars.push(v as usize);
                    }
                }
            }
            for &v in &vars {
                if matches!(k.exprs[v].inst, Inst::Accumulator { .. }) {
                    plan.sequential[v] = true;
                }
            }
            let mut locals = Vec::new();
            for t in 0..k.locals.len() as u32 {
                let read = (l + 1..close).any(|e| {
                    matches!(k.exprs[e].inst, Inst::Read { .. }) && self.local_of(e) == Some(t)
                });
                if !read || self.local_origin(t) >= l {
                    continue;
                }
                let restore = if self.local_changed(t, l + 1..close) {
                    let own = (l + 1..close).all(|e| {
                        self.local_of(e) != Some(t)
                            || matches!(&k.exprs[e].inst, Inst::Read { indices, .. } | Inst::Write { indices, .. } if indices[..] == [l as ValueId])
                    });
                    if own {
                        Restore::Element
                    } else {
                        Restore::Whole
                    }
                } else if self.local_changed(t, close..n) {
                    Restore::Entry
                } else {
                    continue;
                };
                locals.push((t, restore));
            }
            let elem = |d: DType| d.size() as u64;
            let numel = |t: u32| -> u64 {
                k.locals[t as usize]
                    .shape
                    .iter()
                    .map(|d| d.known().unwrap_or(0))
                    .product()
            };
            let local_bytes = |t: u32| numel(t) * elem(k.locals[t as usize].dtype);
            // Bytes per slot (the state of one iteration), and the fixed part.
            let mut per_slot: u64 = vars
                .iter()
                .map(|&v| elem(k.exprs[v].dtype.unwrap_or(DType::I64)))
                .sum();
            let mut fixed = 0u64;
            for &(t, r) in &locals {
                match r {
                    Restore::Whole => per_slot += local_bytes(t),
                    Restore::Element => fixed += trips as u64 * elem(k.locals[t as usize].dtype),
                    Restore::Entry => fixed += local_bytes(t),
                }
            }
            let recorded = (trips as u64)
                .saturating_mul(per_slot)
                .saturating_add(fixed);
            let every = (trips as f64).sqrt().ceil() as i64;
            let segments = (trips + every - 1) / every;
            let checkpointed = ((segments + every) as u64)
                .saturating_mul(per_slot)
                .saturating_add(fixed);
            let every = if recorded <= budget {
                budget -= recorded;
                None
            } else if checkpointed <= budget {
                budget -= checkpointed;
                Some(every)
            } else {
                return Err(Construct::TapeTooLarge {
                    at: l as u32,
                    trips: trips as u64,
                    recorded,
                    checkpointed,
                });
            };
            plan.loops.insert(
                l,
                LoopTape {
                    start,
                    step,
                    trips,
                    vars,
                    locals,
                    every,
                },
            );
        }
        Ok(plan)
    }
}

impl State<'_, '_> {
    /// Declares (zero-filled, at the top level) the records of every recorded loop.
    pub(super) fn declare_records(&mut self) {
        let plan = self.s.plan;
        for (&l, tape) in &plan.loops {
            let slots = match tape.every {
                None => tape.trips,
                Some(k) => (tape.trips + k - 1) / k,
            };
            let mut recs = self.tensors(tape, slots as u64, true);
            if let Some(k) = tape.every {
                let fine = self.tensors(tape, k as u64, false);
                recs.fine = Some((fine.vars, fine.locals));
            }
            self.records.insert(l, recs);
        }
    }

    /// The record tensors of `tape` with `slots` slots (the element and entry records only when
    /// `all`: a checkpointed loop keeps them whole).
    fn tensors(&mut self, tape: &LoopTape, slots: u64, all: bool) -> Records {
        let k = self.s.k;
        let mut r = Records::default();
        for &v in &tape.vars {
            let d = k.exprs[v].dtype.unwrap_or(DType::I64);
            let t = self.b.local(d, &[slots], Literal::Float(0.0));
            r.vars.push((v, t));
        }
        for &(t, how) in &tape.locals {
            let decl = &k.locals[t as usize];
            let shape: Vec<u64> = decl.shape.iter().map(|d| d.known().unwrap_or(0)).collect();
            let full: Vec<u64> = match how {
                Restore::Whole => std::iter::once(slots).chain(shape).collect(),
                Restore::Element if all => vec![tape.trips as u64],
                Restore::Entry if all => std::iter::once(1).chain(shape).collect(),
                _ => continue,
            };
            let rec = self.b.local(decl.dtype, &full, Literal::Float(0.0));
            r.locals.push((t, how, rec));
        }
        r
    }

    /// `(index - start) / step` of loop `l` at forward index `index`.
    fn iteration(&mut self, l: usize, index: ValueId) -> ValueId {
        let tape = &self.s.plan.loops[&l];
        let (start, step) = (tape.start, tape.step);
        let b = &mut *self.b;
        let s = b.i64(start);
        let d = b.op(Op::Sub, &[index, s]);
        if step == 1 {
            d
        } else {
            let st = b.i64(step);
            b.op(Op::Div, &[d, st])
        }
    }

    /// At the start of an iteration of recorded loop `l` (forward index `index`), in a
    /// recomputation: stores its state in the records (`inside`: the loop being walked, for the
    /// values of variables).
    pub(super) fn record(&mut self, l: usize, index: ValueId, inside: Option<usize>) {
        let Some(recs) = self.records.get(&l).cloned() else {
            return;
        };
        let every = self.s.plan.loops[&l].every;
        let t = self.iteration(l, index);
        let zero = self.b.i64(0);
        // Element and entry records: every iteration, and at the first.
        for &(local, how, rec) in &recs.locals {
            match how {
                Restore::Element => {
                    let v = self.b.read(LOC, local, &[index]);
                    self.b.write(LOC, rec, &[t], v);
                }
                Restore::Entry => {
                    let first = self.b.op(Op::Eq, &[t, zero]);
                    self.b.if_(first);
                    self.copy(local, rec, zero, true);
                    self.b.end_if();
                }
                Restore::Whole => {}
            }
        }
        let slot = match every {
            None => t,
            Some(k) => {
                let kk = self.b.i64(k);
                let r = self.b.op(Op::Mod, &[t, kk]);
                let at = self.b.op(Op::Eq, &[r, zero]);
                self.b.if_(at);
                self.b.op(Op::Div, &[t, kk])
            }
        };
        self.store(&recs.vars, &recs.locals, slot, inside);
        if every.is_some() {
            self.b.end_if();
        }
    }

    /// Stores the variables and whole locals in slot `slot` of their records.
    fn store(
        &mut self,
        vars: &[(usize, u32)],
        locals: &[(u32, Restore, u32)],
        slot: ValueId,
        inside: Option<usize>,
    ) {
        for &(v, rec) in vars {
            let value = self.map_operand(v as ValueId, inside);
            self.b.write(LOC, rec, &[slot], value);
        }
        for &(local, how, rec) in locals {
            if how == Restore::Whole {
                self.copy(local, rec, slot, true);
            }
        }
    }

    /// Restores the variables and whole locals from slot `slot` of their records.
    fn load(&mut self, vars: &[(usize, u32)], locals: &[(u32, Restore, u32)], slot: ValueId) {
        for &(v, rec) in vars {
            let value = self.b.read(LOC, rec, &[slot]);
            let var = self.fwd[v];
            self.b.assign(var, value);
        }
        for &(local, how, rec) in locals {
            if how == Restore::Whole {
                self.copy(local, rec, slot, false);
            }
        }
    }

    /// Copies local `local` into slot `slot` of record `rec` (`into`), or back.
    fn copy(&mut self, local: u32, rec: u32, slot: ValueId, into: bool) {
        let shape: Vec<u64> = self.s.k.locals[local as usize]
            .shape
            .iter()
            .map(|d| d.known().unwrap_or(0))
            .collect();
        let b = &mut *self.b;
        let (zero, one) = (b.i64(0), b.i64(1));
        let mut idx = Vec::new();
        for &n in &shape {
            let n = b.i64(n as i64);
            idx.push(b.range(zero, n, one));
        }
        let at: Vec<ValueId> = std::iter::once(slot).chain(idx.iter().copied()).collect();
        if into {
            let v = b.read(LOC, local, &idx);
            b.write(LOC, rec, &at, v);
        } else {
            let v = b.read(LOC, rec, &at);
            b.write(LOC, local, &idx, v);
        }
        for _ in &shape {
            b.end_range();
        }
    }

    /// The backward walk of recorded loop `l` (closed at `close`): over its iterations last
    /// first, each restored from the record, recomputed and walked backwards; a checkpointed
    /// loop walks its segments last first, each replayed forward from its checkpoint first.
    pub(super) fn reverse_recorded(&mut self, l: usize, close: usize) {
        let tape = &self.s.plan.loops[&l];
        let (start, step, trips, every) = (tape.start, tape.step, tape.trips, tape.every);
        let recs = self.records[&l].clone();
        let sums = self.loop_sums(l, close);
        self.sums.push(sums);
        // Entry records: restored once, the loop does not change them.
        for &(local, how, rec) in &recs.locals {
            if how == Restore::Entry {
                let zero = self.b.i64(0);
                self.copy(local, rec, zero, false);
            }
        }
        let (zero, one) = (self.b.i64(0), self.b.i64(1));
        match every {
            None => {
                let n = self.b.i64(trips);
                let r = self.b.range(zero, n, one);
                let last = self.b.i64(trips - 1);
                let t = self.b.op(Op::Sub, &[last, r]);
                self.walk_iteration(l, close, t, start, step, &recs.vars, &recs.locals, t);
                self.b.end_range();
            }
            Some(k) => {
                let segments = (trips + k - 1) / k;
                let n = self.b.i64(segments);
                let r = self.b.range(zero, n, one);
                let last = self.b.i64(segments - 1);
                let s = self.b.op(Op::Sub, &[last, r]);
                self.load(&recs.vars, &recs.locals, s);
                // This segment's iterations: first .. first + len.
                let kk = self.b.i64(k);
                let first = self.b.op(Op::Mul, &[s, kk]);
                let all = self.b.i64(trips);
                let left = self.b.op(Op::Sub, &[all, first]);
                let len = self.b.op(Op::Min, &[left, kk]);
                let (fine_vars, fine_locals) = recs.fine.clone().unwrap_or_default();
                // Replay forward, recording each iteration.
                let j = self.b.range(zero, len, one);
                let t = self.b.op(Op::Add, &[first, j]);
                let index = self.forward_index(t, start, step);
                self.loop_index.insert(l as ValueId, index);
                self.store(&fine_vars, &fine_locals, j, Some(l));
                self.restore_elements(&recs.locals, t, index);
                self.recompute(l + 1, close, Some(l));
                self.loop_index.remove(&(l as ValueId));
                self.b.end_range();
                // Walk it backwards.
                let j = self.b.range(zero, len, one);
                let last = self.b.op(Op::Sub, &[len, one]);
                let back = self.b.op(Op::Sub, &[last, j]);
                let t = self.b.op(Op::Add, &[first, back]);
                let mut locals = fine_locals.clone();
                locals.extend(
                    recs.locals
                        .iter()
                        .filter(|x| x.1 == Restore::Element)
                        .copied(),
                );
                self.walk_iteration(l, close, t, start, step, &fine_vars, &locals, back);
                self.b.end_range();
                self.b.end_range();
            }
        }
        for (target, acc) in self.sums.pop().unwrap_or_default() {
            self.add_adj(target as ValueId, acc);
        }
    }

    /// Restores the element records of iteration `t` (forward index `index`).
    fn restore_elements(&mut self, locals: &[(u32, Restore, u32)], t: ValueId, index: ValueId) {
        for &(local, how, rec) in locals {
            if how == Restore::Element {
                let v = self.b.read(LOC, rec, &[t]);
                self.b.write(LOC, local, &[index], v);
            }
        }
    }

    /// `start + t * step`.
    fn forward_index(&mut self, t: ValueId, start: i64, step: i64) -> ValueId {
        let b = &mut *self.b;
        let st = b.i64(step);
        let off = b.op(Op::Mul, &[t, st]);
        let s0 = b.i64(start);
        b.op(Op::Add, &[s0, off])
    }

    /// One iteration `t` of the backward walk of a recorded loop: restore its state (slot
    /// `slot` of `vars`/`locals`, element records at `t`), recompute, walk backwards.
    #[allow(clippy::too_many_arguments)]
    fn walk_iteration(
        &mut self,
        l: usize,
        close: usize,
        t: ValueId,
        start: i64,
        step: i64,
        vars: &[(usize, u32)],
        locals: &[(u32, Restore, u32)],
        slot: ValueId,
    ) {
        let index = self.forward_index(t, start, step);
        self.load(vars, locals, slot);
        self.restore_elements(locals, t, index);
        self.walk_body(l, close, index);
    }

    /// The backward step of ACCUMULATE `e` into a sequential accumulator with adjoint `a`:
    /// `acc = acc ⊕ value` walked back (a product's factor gets the product of the others,
    /// zeros included, as JAX's `cumprod` gradient does; a min or max sends the adjoint to the
    /// value when it became the result, the last equal value in loop order, and a NaN never).
    pub(super) fn sequential_step(&mut self, e: usize, acc: usize, value: ValueId, a: ValueId) {
        let Inst::Accumulator { combiner, .. } = self.s.k.exprs[acc].inst else {
            return;
        };
        match combiner {
            Combiner::Sum => self.add_adj(value, a),
            Combiner::Product => {
                let before = self.value_at(e, 0);
                let v = self.value_at(e, 1);
                let g = self.b.op(Op::Mul, &[a, before]);
                self.add_adj(value, g);
                let next = self.b.op(Op::Mul, &[a, v]);
                self.b.assign(a, next);
            }
            Combiner::Min | Combiner::Max => {
                let before = self.value_at(e, 0);
                let v = self.value_at(e, 1);
                let b = &mut *self.b;
                let cmp = if combiner == Combiner::Max {
                    Op::Ge
                } else {
                    Op::Le
                };
                let wins = b.op(cmp, &[v, before]);
                let was_nan = b.op(Op::Isnan, &[before]);
                let beats = b.op(Op::Or, &[wins, was_nan]);
                let is_nan = b.op(Op::Isnan, &[v]);
                let real = b.op(Op::Not, &[is_nan]);
                let take = b.op(Op::And, &[real, beats]);
                let d = self.dtype(acc);
                let z = zero(self.b, d);
                let g = self.b.op(Op::Select, &[take, a, z]);
                self.add_adj(value, g);
                let rest = self.b.op(Op::Select, &[take, z, a]);
                self.b.assign(a, rest);
            }
        }
    }

    /// Recomputes accumulator `e` or an ACCUMULATE into it, when it is sequential: a variable
    /// and its update in loop order. Returns whether it did.
    pub(super) fn recompute_sequential(&mut self, e: usize, inside: Option<usize>) -> bool {
        let k = self.s.k;
        match k.exprs[e].inst {
            Inst::Accumulator { init, .. } if self.s.sequential(e) => {
                let i = self.map_operand(init, inside);
                self.fwd[e] = self.b.var(i);
                true
            }
            Inst::Accumulate {
                accumulator, value, ..
            } if self.s.sequential(accumulator as usize) => {
                let Inst::Accumulator { combiner, .. } = k.exprs[accumulator as usize].inst else {
                    return false;
                };
                let op = match combiner {
                    Combiner::Sum => Op::Add,
                    Combiner::Product => Op::Mul,
                    Combiner::Min => Op::Min,
                    Combiner::Max => Op::Max,
                };
                let var = self.fwd[accumulator as usize];
                let v = self.map_operand(value, inside);
                let next = self.b.op(op, &[var, v]);
                self.b.assign(var, next);
                true
            }
            _ => false,
        }
    }
}

//! The backward walk of a sweep: statements last first, `if`s mirrored, loops walked over their
//! indices (in reverse order unless the iterations are independent, each iteration recomputed
//! first), each expression's adjoint sent to its operands through the derivative rules, and the
//! adjoints of reads to their sinks.

use super::{zero, ScatterIndex, Sink, State};
use crate::builder::{IN, LOC, OUT};
use crate::derivatives::{rule, Partial, Rule};
use crate::dtype::{DType, Literal};
use crate::grad::check::flows;
use crate::ir::Op;
use crate::ops::Combiner;
use crate::typed::{Inst, ValueId};

impl State<'_, '_> {
    /// `adj[target] += c`: through the innermost walked loop's accumulator for `target` if it
    /// has one.
    pub(super) fn add_adj(&mut self, target: ValueId, c: ValueId) {
        let sum = self.sums.last().and_then(|sums| {
            sums.iter()
                .find(|&&(t, _)| t == target as usize)
                .map(|&(_, acc)| acc)
        });
        if let Some(acc) = sum {
            self.b.accumulate(acc, c);
            return;
        }
        if let Some(&a) = self.adj.get(&(target as usize)) {
            let sum = self.b.op(Op::Add, &[a, c]);
            self.b.assign(a, sum);
        }
    }

    fn partial(&mut self, p: &Partial, e: usize, d: DType) -> ValueId {
        match p {
            Partial::A => self.value_at(e, 0),
            Partial::B => self.value_at(e, 1),
            Partial::C => self.value_at(e, 2),
            Partial::R => self.value_of(e),
            Partial::K(f) => self.b.constant(d, Literal::Float(*f)),
            Partial::Un(op, x) => {
                let x = self.partial(x, e, d);
                self.b.op(*op, &[x])
            }
            Partial::Bin(op, x, y) | Partial::Cmp(op, x, y) => {
                let x = self.partial(x, e, d);
                let y = self.partial(y, e, d);
                self.b.op(*op, &[x, y])
            }
            Partial::Sel(c, t, f) => {
                let c = self.partial(c, e, d);
                let t = self.partial(t, e, d);
                let f = self.partial(f, e, d);
                self.b.op(Op::Select, &[c, t, f])
            }
        }
    }

    /// The backward walk over expressions `lo..hi` (one block level), last first.
    pub(super) fn reverse(&mut self, lo: usize, hi: usize) {
        let k = self.s.k;
        let mut e = hi;
        while e > lo {
            e -= 1;
            if let Inst::EndIf { if_ } = k.exprs[e].inst {
                let i = if_ as usize;
                if let Inst::If { else_, end, .. } = k.exprs[i].inst {
                    if self.s.has_work(i + 1, end as usize) {
                        let c = self.value_at(i, 0);
                        self.b.if_(c);
                        let then_end = else_.map_or(end, |x| x) as usize;
                        self.reverse(i + 1, then_end);
                        if let Some(el) = else_ {
                            self.b.else_();
                            self.reverse(el as usize + 1, end as usize);
                        }
                        self.b.end_if();
                    }
                }
                e = i;
                continue;
            }
            if let Inst::EndRange { range } = k.exprs[e].inst {
                let l = range as usize;
                if self.s.has_work(l + 1, e) {
                    self.reverse_loop(l, e);
                }
                e = l;
                continue;
            }
            self.step(e);
        }
    }

    /// Opens the loop over the reversed iterations of `l` whose bounds are known when it runs;
    /// returns the forward index of the iteration.
    fn reverse_index(&mut self, l: usize) -> ValueId {
        let (start, end, step) = (
            self.value_at(l, 0),
            self.value_at(l, 1),
            self.value_at(l, 2),
        );
        let b = &mut *self.b;
        let (zero, one) = (b.i64(0), b.i64(1));
        // Trip count: (end - start + step - 1) / step when end > start, else 0 (step > 0: the
        // forward faulted otherwise).
        let diff = b.op(Op::Sub, &[end, start]);
        let up = b.op(Op::Add, &[diff, step]);
        let num = b.op(Op::Sub, &[up, one]);
        let count = b.op(Op::Div, &[num, step]);
        let runs = b.op(Op::Gt, &[end, start]);
        let trips = b.op(Op::Select, &[runs, count, zero]);
        let t = b.range(zero, trips, one);
        let last = b.op(Op::Sub, &[trips, one]);
        let back = b.op(Op::Sub, &[last, t]);
        let offset = b.op(Op::Mul, &[back, step]);
        b.op(Op::Add, &[start, offset])
    }

    /// The backward walk of loop `l` (closed at `close`): over its indices in reverse order, or
    /// in forward order where that gives the same result ([`super::Sweep::order_free`]), each
    /// iteration recomputing the body, then walking it backwards. The adjoints of values from
    /// before the loop that its body reads (and does not update) are summed over the iterations
    /// in accumulators (whose lanes vectorize), added to the adjoints after the loop.
    fn reverse_loop(&mut self, l: usize, close: usize) {
        if self.s.taped(l).is_some() {
            self.reverse_recorded(l, close);
            return;
        }
        let sums = self.loop_sums(l, close);
        let index = if self.s.order_free(l, close) {
            let (start, end, step) = (
                self.value_at(l, 0),
                self.value_at(l, 1),
                self.value_at(l, 2),
            );
            self.b.range(start, end, step)
        } else {
            self.reverse_range(l)
        };
        self.sums.push(sums);
        self.walk_body(l, close, index);
        self.b.end_range();
        for (target, acc) in self.sums.pop().unwrap_or_default() {
            self.add_adj(target as ValueId, acc);
        }
    }

    /// The walk of one iteration of loop `l` (closed at `close`) at forward index `index`: its
    /// declarations, the body recomputed, then walked backwards.
    pub(super) fn walk_body(&mut self, l: usize, close: usize, index: ValueId) {
        self.loop_index.insert(l as ValueId, index);
        self.declare(Some(l as ValueId));
        self.recompute(l + 1, close, Some(l));
        self.reverse(l + 1, close);
        self.forget(l as ValueId);
        self.loop_index.remove(&(l as ValueId));
    }

    /// Declares, before the walk of loop `l`, a sum accumulator per value from before the loop
    /// whose adjoint the body may add to: read in the body, not updated there.
    pub(super) fn loop_sums(&mut self, l: usize, close: usize) -> Vec<(usize, ValueId)> {
        let k = self.s.k;
        let body = l + 1..close;
        let updated: Vec<usize> = body
            .clone()
            .filter_map(|e| match k.exprs[e].inst {
                Inst::Assign { variable: v, .. } | Inst::Accumulate { accumulator: v, .. } => {
                    Some(v as usize)
                }
                _ => None,
            })
            .collect();
        let mut targets: Vec<usize> = body
            .flat_map(|e| k.operands(e))
            .map(|o| o as usize)
            .filter(|&o| o < l && self.adj.contains_key(&o) && !updated.contains(&o))
            .collect();
        targets.sort_unstable();
        targets.dedup();
        targets
            .into_iter()
            .map(|t| {
                let z = zero(self.b, self.dtype(t));
                (t, self.b.accumulator(Combiner::Sum, z))
            })
            .collect()
    }

    /// Opens the loop over the reversed iterations of `l`; returns the forward index of the
    /// iteration.
    fn reverse_range(&mut self, l: usize) -> ValueId {
        let constant = |v: ValueId| match self.s.k.exprs[v as usize].inst {
            Inst::Const(Literal::Int(i)) => Some(i),
            _ => None,
        };
        let bounds: Option<Vec<i64>> = self.s.k.operands(l).map(constant).collect();
        match bounds.as_deref() {
            // Known bounds: `last - t * step` over `0..trips`, an affine index (so that the
            // gradient of this gradient can invert reads made with it).
            Some(&[start, end, step]) if step > 0 && start.checked_sub(end).is_some() => {
                let (s0, e0, st) = (start as i128, end as i128, step as i128);
                let trips = if e0 > s0 { (e0 - s0 + st - 1) / st } else { 0 };
                // In range: the last index is below `end`.
                let last = (s0 + (trips - 1).max(0) * st) as i64;
                let trips = trips as i64;
                let b = &mut *self.b;
                let (zero, one, n) = (b.i64(0), b.i64(1), b.i64(trips));
                let t = b.range(zero, n, one);
                let (last, step) = (b.i64(last), b.i64(step));
                let offset = b.op(Op::Mul, &[t, step]);
                b.op(Op::Sub, &[last, offset])
            }
            _ => self.reverse_index(l),
        }
    }

    /// The backward step of one straight-line expression.
    fn step(&mut self, e: usize) {
        let k = self.s.k;
        if self.s.seeded_write(e) {
            let Inst::Write {
                tensor,
                indices,
                value,
            } = &k.exprs[e].inst
            else {
                return;
            };
            let input = self.s.adjoint_inputs[tensor.index as usize].unwrap_or(0);
            let idx: Vec<ValueId> = (0..indices.len()).map(|s| self.value_at(e, s)).collect();
            let g = self.b.read(IN, input, &idx);
            self.add_adj(*value, g);
            return;
        }
        if let Some(t) = self.s.local_of(e) {
            if let Some(&at) = self.adj_local.get(&t) {
                match &k.exprs[e].inst {
                    Inst::LocalTensor { .. } => {
                        self.b.local_fill(at, Literal::Float(0.0));
                        return;
                    }
                    Inst::Write { indices, value, .. } => {
                        // The element's adjoint goes to the value written; before the write
                        // the element had none.
                        let idx: Vec<ValueId> =
                            (0..indices.len()).map(|s| self.value_at(e, s)).collect();
                        let a = self.b.read(LOC, at, &idx);
                        self.add_adj(*value, a);
                        let z = zero(self.b, self.dtype(*value as usize));
                        self.b.write(LOC, at, &idx, z);
                        return;
                    }
                    Inst::Read { indices, .. } if self.s.facts.active[e] => {
                        let g = self.adj[&e];
                        let idx: Vec<ValueId> =
                            (0..indices.len()).map(|s| self.value_at(e, s)).collect();
                        self.add_to_local(at, &idx, g);
                        return;
                    }
                    _ => {}
                }
            }
        }
        if let Inst::Assign { variable, value } = k.exprs[e].inst {
            if let Some(&a) = self.adj.get(&(variable as usize)) {
                // `v = v + m` (`v += m`), `v = m + v`, `v = v - m`: the variable's adjoint goes
                // to `m` and stays what it is (no reset and re-add), so that a loop summing
                // into `v` does not update the adjoint in every iteration.
                if let Some((m, negate)) = self.s.accumulation(e) {
                    let c = if negate { self.b.op(Op::Neg, &[a]) } else { a };
                    self.add_adj(m, c);
                    return;
                }
                self.add_adj(value, a);
                let z = zero(self.b, self.dtype(variable as usize));
                self.b.assign(a, z);
            }
            return;
        }
        if let Inst::Accumulate {
            accumulator, value, ..
        } = k.exprs[e].inst
        {
            if let Some(&a) = self.adj.get(&(accumulator as usize)) {
                if self.s.sequential(accumulator as usize) {
                    self.sequential_step(e, accumulator as usize, value, a);
                } else if self.s.is_extremum(accumulator as usize) {
                    let v = self.value_at(e, 1);
                    self.give_extremum(accumulator as usize, value, v, a);
                } else {
                    // A sum: the value's adjoint is the accumulator's.
                    self.add_adj(value, a);
                }
            }
            return;
        }
        if !self.s.facts.active[e] || self.s.accumulating_sum(e) {
            return;
        }
        let d = self.dtype(e);
        let g = self.adj[&e];
        match &k.exprs[e].inst {
            Inst::Read { .. } => self.sink(e, g),
            Inst::Accumulator { init, .. } if self.s.is_extremum(e) => {
                let v = self.value_at(e, 0);
                self.give_extremum(e, *init, v, g);
            }
            Inst::Variable { init } | Inst::Accumulator { init, .. } => self.add_adj(*init, g),
            Inst::Cast { value } => {
                let to = self.dtype(*value as usize);
                let c = self.b.cast(g, to);
                self.add_adj(*value, c);
            }
            Inst::Select {
                if_true, if_false, ..
            } => {
                let c = self.value_at(e, 0);
                let z = zero(self.b, d);
                if self.s.facts.active[*if_true as usize] {
                    let t = self.b.op(Op::Select, &[c, g, z]);
                    self.add_adj(*if_true, t);
                }
                if self.s.facts.active[*if_false as usize] {
                    let f = self.b.op(Op::Select, &[c, z, g]);
                    self.add_adj(*if_false, f);
                }
            }
            Inst::Unary { op, .. } | Inst::Binary { op, .. } => {
                if let Rule::Partials(ps) = rule(*op) {
                    self.through(e, ps, g, d);
                }
            }
            Inst::Fma { .. } => {
                const FMA: [Partial; 3] = [Partial::B, Partial::A, Partial::K(1.0)];
                self.through(e, &FMA, g, d);
            }
            _ => {}
        }
    }

    /// The adjoint `g` of min/max accumulator `acc` goes to `target` (forward value `v`) when
    /// `v` is the result and no value walked before (a later one in loop order) took it: on a
    /// tie, the last equal value in loop order, then the initial value.
    fn give_extremum(&mut self, acc: usize, target: ValueId, v: ValueId, g: ValueId) {
        let Some(&(last, given)) = self.extremum.get(&acc) else {
            return;
        };
        let b = &mut *self.b;
        let hit = b.op(Op::Eq, &[v, last]);
        let open = b.op(Op::Not, &[given]);
        let take = b.op(Op::And, &[hit, open]);
        b.if_(take);
        let yes = b.boolean(true);
        b.assign(given, yes);
        self.add_adj(target, g);
        self.b.end_if();
    }

    /// Adds the adjoint `g` of read `e` to its sink, where the sink's checks hold.
    fn sink(&mut self, e: usize, g: ValueId) {
        let sinks = self.sinks;
        let (total, checks) = match sinks.get(&(e as ValueId)) {
            None => return,
            Some(Sink::Write { output, index }) => {
                let idx: Vec<ValueId> = index
                    .iter()
                    .map(|a| crate::grad::emit_affine(self.b, a, self.pos, &self.loop_index))
                    .collect();
                self.b.write(OUT, *output, &idx, g);
                return;
            }
            Some(Sink::Local { local, free }) => {
                let idx: Vec<ValueId> = free
                    .iter()
                    .map(|a| crate::grad::emit_affine(self.b, a, self.pos, &self.loop_index))
                    .collect();
                self.add_to_local(*local, &idx, g);
                return;
            }
            Some(Sink::Scatter { local, index }) => {
                let idx: Vec<ValueId> = index
                    .iter()
                    .map(|part| match part {
                        ScatterIndex::Affine(a) => {
                            crate::grad::emit_affine(self.b, a, self.pos, &self.loop_index)
                        }
                        ScatterIndex::Operand(slot) => self.value_at(e, *slot),
                    })
                    .collect();
                self.add_to_local(*local, &idx, g);
                return;
            }
            Some(Sink::Add { total, checks }) => (*total, checks),
        };
        let mut guard = None;
        for (a, q) in checks {
            let v = crate::grad::emit_affine(self.b, a, self.pos, &self.loop_index);
            let c = self.b.op(Op::Eq, &[v, *q]);
            guard = Some(match guard {
                None => c,
                Some(x) => self.b.op(Op::And, &[x, c]),
            });
        }
        if let Some(c) = guard {
            self.b.if_(c);
        }
        let next = self.b.op(Op::Add, &[total, g]);
        self.b.assign(total, next);
        if guard.is_some() {
            self.b.end_if();
        }
    }

    /// `local[idx] += g`.
    fn add_to_local(&mut self, local: u32, idx: &[ValueId], g: ValueId) {
        let cur = self.b.read(LOC, local, idx);
        let next = self.b.op(Op::Add, &[cur, g]);
        self.b.write(LOC, local, idx, next);
    }

    /// Sends `g` times each partial to the operand it belongs to.
    fn through(&mut self, e: usize, partials: &[Partial], g: ValueId, d: DType) {
        for (slot, o) in flows(self.s.k, e) {
            if !self.s.facts.active[o as usize] {
                continue;
            }
            let c = match partials[slot] {
                Partial::K(1.0) => g,
                Partial::K(-1.0) => self.b.op(Op::Neg, &[g]),
                ref p => {
                    let p = self.partial(p, e, d);
                    self.b.op(Op::Mul, &[g, p])
                }
            };
            self.add_adj(o, c);
        }
    }
}

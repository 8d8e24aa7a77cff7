//! One worker's reverse sweep, emitted into a gradient operator: the forward program of the
//! worker at a given position is recomputed (writes dropped), then walked backwards, each
//! active value's adjoint kept in a worker-local variable.
//!
//! Forward values the backward walk needs are *recomputed*, never stored in a tensor: a value
//! computed at the top level is used directly; one computed inside an `if` is copied into a
//! variable declared before the recomputation (its *tape*), and a variable read where the
//! derivative needs it is copied at that point (a *snapshot*), since it may change afterwards.
//! The backward walk mirrors the `if`s with the same conditions, so a branch that did not run
//! contributes nothing (not zero times an infinite derivative).
//!
//! A counted loop is walked backwards by a loop over the same indices in reverse order, whose
//! body first recomputes the forward body at that index (recompute, not store: no tape tensor
//! whose size depends on the trip count, and the gradient stays an elementwise-style worker
//! program that fuses), then walks it backwards. This is exact when every value the backward
//! walk needs inside the loop is computed from the loop index and values from before the loop:
//! the state carried from one iteration to the next may only be summed (`s += f(..)`, sum
//! accumulators), whose derivative does not read it. Other loops ([`Sweep::check_loops`] finds
//! them before anything is emitted) are recurrences: their carried state is recorded per
//! iteration, or checkpointed (`tape`), and restored before each iteration is recomputed.

use super::check::Facts;

mod loops;
mod reverse;
mod tape;
use crate::builder::Builder;
use crate::derivatives::{rule, Partial, Rule};
use crate::dtype::{DType, Literal};
use crate::ir::{self, Op};
use crate::ops::Combiner;
use crate::typed::{Inst, Kernel, ValueId};
use std::collections::{BTreeMap, HashMap};
pub(super) use tape::Plan;

/// The sweep's environment: the forward operator and where its pieces live in the gradient
/// operator.
pub(super) struct Sweep<'a> {
    pub dag: &'a ir::ExpressionDag,
    pub k: &'a Kernel,
    pub facts: &'a Facts,
    /// Per forward output: the gradient operator's input holding its adjoint, if it has one.
    pub adjoint_inputs: &'a [Option<u32>],
    /// The loops whose carried state is recorded ([`Sweep::check_loops`]).
    pub plan: &'a Plan,
}

/// Where the adjoint of a read goes when the backward walk reaches it (indices that name a
/// loop's index are evaluated at the iteration being walked).
pub(super) enum Sink {
    /// Gather: added to `total` where every `(index, q)` of `checks` agrees.
    Add {
        total: ValueId,
        checks: Vec<(super::Affine, ValueId)>,
    },
    /// The only read of an input, which no other worker or iteration reads: written at once
    /// to output `output` at the read's index.
    Write { output: u32, index: super::IndexMap },
    /// A read of an owned slice: added to element `free` of local tensor `local`.
    Local {
        local: u32,
        free: Vec<super::Affine>,
    },
    /// A read at indices computed from data: added to element `index` of local tensor `local`
    /// (a scatter-add, in the order the backward walk reaches the reads).
    Scatter {
        local: u32,
        index: Vec<ScatterIndex>,
    },
}

/// An index of a [`Sink::Scatter`].
pub(super) enum ScatterIndex {
    /// Affine in the position and loop indices.
    Affine(super::Affine),
    /// The forward value of the read's index operand in this slot (computed from data).
    Operand(usize),
}

/// The emitted sweep of one worker.
struct State<'s, 'a> {
    s: &'s Sweep<'a>,
    b: &'s mut Builder,
    pos: &'s [ValueId],
    /// Forward expression -> its recomputed value.
    fwd: Vec<ValueId>,
    /// (The maps the emission iterates over are ordered: the same operator must give the same
    /// gradient IR in every run, or its cache key changes.)
    /// Forward expression -> its tape variable (values inside an `if` the backward walk needs).
    tape: HashMap<usize, ValueId>,
    /// (expression, operand slot) -> the snapshot of the variable it reads there.
    snap: BTreeMap<(usize, usize), ValueId>,
    /// (loop, variable declared before it) -> the variable's value when the loop started.
    entry: BTreeMap<(usize, usize), ValueId>,
    /// Active expression -> its adjoint variable.
    adj: HashMap<usize, ValueId>,
    /// Loop -> its index in the backward walk's iteration.
    loop_index: HashMap<ValueId, ValueId>,
    /// Local tensor of the forward -> the local tensor holding its adjoint.
    adj_local: HashMap<u32, u32>,
    /// Min/max accumulator -> (its value after its loop, whether its adjoint was given).
    extremum: BTreeMap<usize, (ValueId, ValueId)>,
    /// Per loop being walked, innermost last: the sum accumulator that collects, over its
    /// iterations, the adjoint of each value from before the loop that the loop reads and does
    /// not update (added to the adjoint once the loop is done).
    sums: Vec<Vec<(usize, ValueId)>>,
    sinks: &'s HashMap<ValueId, Sink>,
    /// Recorded loop -> the local tensors holding its records.
    records: HashMap<usize, tape::Records>,
}

impl Sweep<'_> {
    /// Emits the sweep of the worker at `pos` into `b` at its current point; the adjoint of a
    /// read with a sink goes there; returns the adjoint variable of each active read of an
    /// input (by the read's expression), final for reads outside loops.
    pub fn emit(
        &self,
        b: &mut Builder,
        pos: &[ValueId],
        sinks: &HashMap<ValueId, Sink>,
    ) -> HashMap<ValueId, ValueId> {
        let n = self.k.exprs.len();
        let mut st = State {
            s: self,
            b,
            pos,
            fwd: vec![0; n],
            tape: HashMap::new(),
            snap: BTreeMap::new(),
            entry: BTreeMap::new(),
            adj: HashMap::new(),
            loop_index: HashMap::new(),
            extremum: BTreeMap::new(),
            adj_local: HashMap::new(),
            sums: Vec::new(),
            sinks,
            records: HashMap::new(),
        };
        // A local tensor the forward never fills starts zeroed in each of its workers: so it
        // does in each recomputed worker.
        for t in 0..self.k.locals.len() as u32 {
            if self.local_origin(t) == 0 && !self.local_filled_at_start(t) {
                st.b.local_fill(t, Literal::Float(0.0));
            }
        }
        st.declare_records();
        st.declare(None);
        st.recompute(0, n, None);
        st.reverse(0, n);
        // Adjoints of reads inside loops were per iteration (and are gone).
        (0..n)
            .filter(|&e| matches!(self.k.exprs[e].inst, Inst::Read { .. }))
            .filter_map(|e| Some((e as ValueId, *st.adj.get(&e)?)))
            .collect()
    }

    /// The operand slots of `e` whose forward values its derivative reads.
    fn needs(&self, e: usize) -> Vec<usize> {
        let x = &self.k.exprs[e];
        match &x.inst {
            Inst::Unary { op, .. } | Inst::Binary { op, .. } => match rule(*op) {
                Rule::Partials(ps) => {
                    let mut slots = Vec::new();
                    for p in ps {
                        collect_slots(p, &mut slots);
                    }
                    slots
                }
                _ => Vec::new(),
            },
            Inst::Fma { .. } => vec![0, 1],
            Inst::Select { .. } => vec![0],
            _ => Vec::new(),
        }
    }

    /// Whether the derivative of `e` reads its own result.
    fn needs_result(&self, e: usize) -> bool {
        match &self.k.exprs[e].inst {
            Inst::Unary { op, .. } | Inst::Binary { op, .. } => match rule(*op) {
                Rule::Partials(ps) => ps.iter().any(uses_result),
                _ => false,
            },
            _ => false,
        }
    }

    /// A write of an output with an adjoint whose value is active.
    fn seeded_write(&self, e: usize) -> bool {
        match &self.k.exprs[e].inst {
            Inst::Write { tensor, value, .. } => {
                tensor.kind == ir::TensorKind::Output
                    && self.adjoint_inputs[tensor.index as usize].is_some()
                    && self.facts.active[*value as usize]
            }
            _ => false,
        }
    }

    /// Whether the backward walk does anything for expressions `lo..hi`.
    fn has_work(&self, lo: usize, hi: usize) -> bool {
        (lo..hi).any(|e| self.facts.active[e] || self.seeded_write(e) || self.local_work(e))
    }

    /// The local tensor expression `e` reads, writes or fills, if any.
    fn local_of(&self, e: usize) -> Option<u32> {
        match &self.k.exprs[e].inst {
            Inst::Read { tensor, .. }
            | Inst::Write { tensor, .. }
            | Inst::LocalTensor { tensor, .. }
                if tensor.kind == ir::TensorKind::Local =>
            {
                Some(tensor.index)
            }
            _ => None,
        }
    }

    /// A write into or a fill of a local tensor that carries a gradient.
    fn local_work(&self, e: usize) -> bool {
        matches!(
            self.k.exprs[e].inst,
            Inst::Write { .. } | Inst::LocalTensor { .. }
        ) && self
            .local_of(e)
            .is_some_and(|t| self.facts.active_locals[t as usize])
    }

    /// Where local tensor `t` comes to life: its first fill, or the start of the program.
    fn local_origin(&self, t: u32) -> usize {
        (0..self.k.exprs.len())
            .find(|&e| {
                matches!(self.k.exprs[e].inst, Inst::LocalTensor { .. })
                    && self.local_of(e) == Some(t)
            })
            .unwrap_or(0)
    }

    /// Whether expression 0 fills local tensor `t`.
    fn local_filled_at_start(&self, t: u32) -> bool {
        !self.k.exprs.is_empty()
            && matches!(self.k.exprs[0].inst, Inst::LocalTensor { .. })
            && self.local_of(0) == Some(t)
    }

    /// Whether local tensor `t` is written or filled in `range`.
    fn local_changed(&self, t: u32, range: std::ops::Range<usize>) -> bool {
        range.into_iter().any(|e| {
            matches!(
                self.k.exprs[e].inst,
                Inst::Write { .. } | Inst::LocalTensor { .. }
            ) && self.local_of(e) == Some(t)
        })
    }

    /// The number of operand uses of `v`.
    fn uses(&self, v: ValueId) -> u32 {
        self.facts.uses[v as usize]
    }

    /// Whether operand `o` reads `variable`: directly, or through a cast to its own dtype used
    /// only there (the DSL's `v += m` reads `v` so).
    fn reads_variable(&self, o: ValueId, variable: ValueId) -> bool {
        o == variable
            || matches!(self.k.exprs[o as usize].inst, Inst::Cast { value } if value == variable
                && self.k.exprs[o as usize].dtype == self.k.exprs[variable as usize].dtype
                && self.uses(o) == 1)
    }

    /// For `v = v + m`, `v = m + v` or `v = v - m` (ASSIGN `e` whose sum is used by nothing
    /// else): `m` and whether it is subtracted.
    pub(super) fn accumulation(&self, e: usize) -> Option<(ValueId, bool)> {
        let Inst::Assign { variable, value } = self.k.exprs[e].inst else {
            return None;
        };
        if self.uses(value) != 1 {
            return None;
        }
        let reads = |o: ValueId| self.reads_variable(o, variable);
        match self.k.exprs[value as usize].inst {
            Inst::Binary { op: Op::Add, a, b } if reads(a) && !reads(b) => Some((b, false)),
            Inst::Binary { op: Op::Add, a, b } if reads(b) && !reads(a) => Some((a, false)),
            Inst::Binary { op: Op::Sub, a, b } if reads(a) && !reads(b) => Some((b, true)),
            _ => None,
        }
    }

    /// Whether `e` is the sum of an [`Sweep::accumulation`], or the cast reading its variable:
    /// its step is the ASSIGN's.
    pub(super) fn accumulating_sum(&self, e: usize) -> bool {
        let sum = |x: usize| {
            x + 1 < self.k.exprs.len()
                && matches!(self.k.exprs[x + 1].inst, Inst::Assign { value, .. } if value as usize == x)
                && self.accumulation(x + 1).is_some()
        };
        if sum(e) {
            return true;
        }
        if !matches!(self.k.exprs[e].inst, Inst::Cast { .. }) || self.uses(e as ValueId) != 1 {
            return false;
        }
        // Its one user: the sum of an accumulation into the variable it reads.
        let user =
            (e + 1..self.k.exprs.len()).find(|&x| self.k.operands(x).any(|o| o as usize == e));
        user.is_some_and(|x| {
            sum(x)
                && matches!(self.k.exprs[x + 1].inst, Inst::Assign { variable, .. }
                    if self.reads_variable(e as ValueId, variable))
        })
    }

    /// Whether `acc` is an active min or max accumulator: its adjoint goes to one value.
    fn is_extremum(&self, acc: usize) -> bool {
        !self.sequential(acc)
            && matches!(
                self.k.exprs[acc].inst,
                Inst::Accumulator {
                    combiner: Combiner::Min | Combiner::Max,
                    ..
                }
            )
            && self.facts.active[acc]
    }

    /// The operand slots of `e` that read a value (not the variable an ASSIGN or ACCUMULATE
    /// updates).
    fn read_slots(&self, e: usize) -> impl Iterator<Item = (usize, ValueId)> + '_ {
        let skip_first = matches!(
            self.k.exprs[e].inst,
            Inst::Assign { .. } | Inst::Accumulate { .. }
        );
        self.k
            .operands(e)
            .enumerate()
            .filter(move |&(slot, _)| !(skip_first && slot == 0))
    }

    fn operand_of(&self, e: usize, slot: usize) -> ValueId {
        self.k.operands(e).nth(slot).unwrap_or(0)
    }
}

/// The operand slots a partial reads (A = 0, B = 1, C = 2).
fn collect_slots(p: &Partial, out: &mut Vec<usize>) {
    let mut add = |s: usize| {
        if !out.contains(&s) {
            out.push(s)
        }
    };
    match p {
        Partial::A => add(0),
        Partial::B => add(1),
        Partial::C => add(2),
        Partial::R | Partial::K(_) => {}
        Partial::Un(_, x) => collect_slots(x, out),
        Partial::Bin(_, x, y) | Partial::Cmp(_, x, y) => {
            collect_slots(x, out);
            collect_slots(y, out);
        }
        Partial::Sel(c, t, f) => {
            collect_slots(c, out);
            collect_slots(t, out);
            collect_slots(f, out);
        }
    }
}

fn uses_result(p: &Partial) -> bool {
    match p {
        Partial::R => true,
        Partial::A | Partial::B | Partial::C | Partial::K(_) => false,
        Partial::Un(_, x) => uses_result(x),
        Partial::Bin(_, x, y) | Partial::Cmp(_, x, y) => uses_result(x) || uses_result(y),
        Partial::Sel(c, t, f) => uses_result(c) || uses_result(t) || uses_result(f),
    }
}

fn zero(b: &mut Builder, d: DType) -> ValueId {
    let v = if d.is_float() {
        Literal::Float(0.0)
    } else if d == DType::Bool {
        Literal::Bool(false)
    } else if d.is_unsigned_int() {
        Literal::UInt(0)
    } else {
        Literal::Int(0)
    };
    b.constant(d, v)
}

impl State<'_, '_> {
    fn dtype(&self, e: usize) -> DType {
        self.s.k.exprs[e].dtype.unwrap_or(DType::F32)
    }

    fn operand(&self, e: usize, slot: usize) -> ValueId {
        self.s.k.operands(e).nth(slot).unwrap_or(0)
    }

    fn is_variable(&self, v: ValueId) -> bool {
        matches!(
            self.s.k.exprs[v as usize].inst,
            Inst::Variable { .. } | Inst::Accumulator { .. }
        )
    }

    /// The values the backward walk reads: (expression, slot) operands and results.
    fn wanted_values(&self) -> (Vec<usize>, Vec<(usize, usize)>) {
        let k = self.s.k;
        let mut values = Vec::new();
        let mut uses = Vec::new();
        let mut operand_use = |e: usize, slot: usize, values: &mut Vec<usize>| {
            uses.push((e, slot));
            values.push(self.operand(e, slot) as usize);
        };
        for e in 0..k.exprs.len() {
            if self.s.facts.active[e] {
                for slot in self.s.needs(e) {
                    operand_use(e, slot, &mut values);
                }
                if self.s.needs_result(e) {
                    values.push(e);
                }
            }
            if let Some(Sink::Scatter { index, .. }) = self.sinks.get(&(e as ValueId)) {
                for part in index {
                    if let ScatterIndex::Operand(slot) = part {
                        operand_use(e, *slot, &mut values);
                    }
                }
            }
            let local_read = self.s.facts.active[e] && self.s.local_of(e).is_some();
            if self.s.seeded_write(e) || self.s.local_work(e) || local_read {
                if let Inst::Write { indices, .. } | Inst::Read { indices, .. } = &k.exprs[e].inst {
                    for slot in 0..indices.len() {
                        operand_use(e, slot, &mut values);
                    }
                }
            }
            if let Inst::If { end, .. } = k.exprs[e].inst {
                if self.s.has_work(e + 1, end as usize) {
                    operand_use(e, 0, &mut values);
                }
            }
            if let Inst::Range { close, .. } = k.exprs[e].inst {
                if self.s.has_work(e + 1, close as usize) {
                    for slot in 0..3 {
                        operand_use(e, slot, &mut values);
                    }
                }
            }
            match k.exprs[e].inst {
                Inst::Accumulate { accumulator, .. }
                    if self.s.is_extremum(accumulator as usize) =>
                {
                    operand_use(e, 1, &mut values)
                }
                Inst::Accumulate { accumulator, .. }
                    if self.s.sequential(accumulator as usize)
                        && self.s.facts.active[accumulator as usize] =>
                {
                    operand_use(e, 0, &mut values);
                    operand_use(e, 1, &mut values);
                }
                Inst::Accumulator { .. } if self.s.is_extremum(e) => operand_use(e, 0, &mut values),
                _ => {}
            }
        }
        (values, uses)
    }

    /// The innermost loop around `e`: the scope of its tapes, snapshots and adjoint, declared
    /// where the walk of that loop's iteration starts (fresh for each iteration, so that
    /// nothing but the forward's own sums carries from one iteration to the next).
    fn scope_of(&self, e: usize) -> Option<ValueId> {
        self.s.k.enclosing_loops(e).next()
    }

    /// Declares the tapes, snapshots and adjoints of scope `scope` (`None`: outside loops; the
    /// adjoint local tensors too, zero-filled).
    fn declare(&mut self, scope: Option<ValueId>) {
        let k = self.s.k;
        if scope.is_none() {
            for (t, &active) in self.s.facts.active_locals.iter().enumerate() {
                if active {
                    let decl = &k.locals[t];
                    let shape: Vec<u64> =
                        decl.shape.iter().map(|d| d.known().unwrap_or(0)).collect();
                    let a = self.b.declare_local(decl.dtype, &shape);
                    self.b.local_fill(a, Literal::Float(0.0));
                    self.adj_local.insert(t as u32, a);
                }
            }
        }
        let (values, uses) = self.wanted_values();
        for (e, slot) in uses {
            let v = self.operand(e, slot);
            if self.scope_of(e) == scope
                && self.is_variable(v)
                && !self.snap.contains_key(&(e, slot))
            {
                let z = zero(self.b, self.dtype(v as usize));
                let var = self.b.var(z);
                self.snap.insert((e, slot), var);
            }
        }
        for v in values {
            let x = &k.exprs[v];
            let simple = matches!(x.inst, Inst::Const(_) | Inst::Position { .. });
            // Inside an `if` (not directly in the loop's body or at the top level).
            let branched = x.block.is_some() && x.block != self.scope_of(v);
            if self.scope_of(v) == scope && branched && !simple && !self.is_variable(v as ValueId) {
                if let std::collections::hash_map::Entry::Vacant(slot) = self.tape.entry(v) {
                    let z = zero(self.b, x.dtype.unwrap_or(DType::F32));
                    slot.insert(self.b.var(z));
                }
            }
        }
        for e in 0..k.exprs.len() {
            if self.s.facts.active[e] && self.scope_of(e) == scope {
                let z = zero(self.b, self.dtype(e));
                let var = self.b.var(z);
                self.adj.insert(e, var);
            }
        }
        for e in 0..k.exprs.len() {
            if self.s.is_extremum(e) && self.scope_of(e) == scope {
                let z = zero(self.b, self.dtype(e));
                let last = self.b.var(z);
                let no = self.b.boolean(false);
                let given = self.b.var(no);
                self.extremum.insert(e, (last, given));
            }
        }
        // The variables from before each walked loop that its body reads.
        for l in 0..k.exprs.len() {
            let Inst::Range { close, .. } = k.exprs[l].inst else {
                continue;
            };
            if self.scope_of(l) != scope || !self.s.has_work(l + 1, close as usize) {
                continue;
            }
            for e in l + 1..close as usize {
                let outer: Vec<ValueId> = self
                    .s
                    .read_slots(e)
                    .map(|(_, o)| o)
                    .filter(|&o| (o as usize) < l && self.is_variable(o))
                    .collect();
                for v in outer {
                    if !self.entry.contains_key(&(l, v as usize)) {
                        let z = zero(self.b, self.dtype(v as usize));
                        let var = self.b.var(z);
                        self.entry.insert((l, v as usize), var);
                    }
                }
            }
        }
    }

    /// Forgets the declarations of scope `scope` once its loop is closed.
    fn forget(&mut self, scope: ValueId) {
        let k = self.s.k;
        let inside = |e: usize| k.enclosing_loops(e).next() == Some(scope);
        self.snap.retain(|&(e, _), _| !inside(e));
        self.tape.retain(|&v, _| !inside(v));
        self.adj.retain(|&e, _| !inside(e));
        self.entry.retain(|&(l, _), _| !inside(l));
        self.extremum.retain(|&a, _| !inside(a));
    }

    /// Recomputes forward expressions `lo..hi` (without writes), filling tapes and snapshots:
    /// the whole program (`inside: None`), or the body of loop `inside` at the index the
    /// backward walk is at, without the updates of state from before the loop.
    fn recompute(&mut self, lo: usize, hi: usize, inside: Option<usize>) {
        let k = self.s.k;
        let mut next = lo;
        while next < hi {
            let e = next;
            next += 1;
            let snaps: Vec<((usize, usize), ValueId)> = self
                .snap
                .iter()
                .filter(|((x, _), _)| *x == e)
                .map(|(&key, &v)| (key, v))
                .collect();
            for ((_, slot), var) in snaps {
                let value = self.map_operand(self.operand(e, slot), inside);
                self.b.assign(var, value);
            }
            let entries: Vec<((usize, usize), ValueId)> = self
                .entry
                .iter()
                .filter(|((l, _), _)| *l == e)
                .map(|(&key, &v)| (key, v))
                .collect();
            for ((_, v), var) in entries {
                let value = self.map_operand(v as ValueId, inside);
                self.b.assign(var, value);
            }
            match &k.exprs[e].inst {
                Inst::Range { close, .. }
                    if self.s.taped(e).is_none()
                        && self.s.recomputes_nothing(e, *close as usize) =>
                {
                    next = *close as usize + 1;
                    continue;
                }
                Inst::Write { tensor, .. } if tensor.kind == ir::TensorKind::Output => continue,
                Inst::Write { tensor, .. }
                    if inside.is_some_and(|l| {
                        self.s.local_origin(tensor.index) < l
                            && !self.s.restores_local(l, tensor.index)
                    }) =>
                {
                    continue
                }
                Inst::Assign { variable: v, .. } | Inst::Accumulate { accumulator: v, .. }
                    if inside.is_some_and(|l| {
                        (*v as usize) < l && !self.s.restores_var(l, *v as usize)
                    }) =>
                {
                    continue
                }
                Inst::Position { axis } => {
                    self.fwd[e] = self.pos[*axis as usize];
                    continue;
                }
                _ => {}
            }
            if self.recompute_sequential(e, inside) {
                continue;
            }
            let mut x = self.s.dag.expressions[e].clone();
            let updates = matches!(
                k.exprs[e].inst,
                Inst::Assign { .. } | Inst::Accumulate { .. }
            );
            for (slot, o) in x.operands.iter_mut().enumerate() {
                *o = if updates && slot == 0 {
                    self.fwd[*o as usize]
                } else {
                    self.map_operand(*o, inside)
                };
            }
            self.fwd[e] = self.b.raw(x);
            if matches!(k.exprs[e].inst, Inst::Range { .. }) {
                self.record(e, self.fwd[e], inside);
            }
            if let Some(&t) = self.tape.get(&e) {
                self.b.assign(t, self.fwd[e]);
            }
            if let Inst::EndRange { range } = k.exprs[e].inst {
                // The value of each min/max accumulator this loop reduces, after it.
                let done: Vec<(usize, ValueId)> = self
                    .extremum
                    .iter()
                    .filter(|(&a, _)| super::check::extremum_loop(k, a) == Some(range))
                    .map(|(&a, &(last, _))| (a, last))
                    .collect();
                for (a, last) in done {
                    self.b.assign(last, self.fwd[a]);
                }
            }
        }
    }

    /// Operand `o` in a recomputation (see [`State::recompute`]).
    fn map_operand(&mut self, o: ValueId, inside: Option<usize>) -> ValueId {
        let Some(l) = inside else {
            return self.fwd[o as usize];
        };
        let o = o as usize;
        if o == l {
            self.loop_index[&(l as ValueId)]
        } else if o > l || self.s.restores_var(l, o) {
            self.fwd[o]
        } else if let Some(&v) = self.entry.get(&(l, o)) {
            v
        } else if self.is_variable(o as ValueId) {
            self.fwd[o]
        } else {
            self.value_of(o)
        }
    }

    /// The forward value of operand `slot` of `e`, as the backward walk sees it.
    fn value_at(&mut self, e: usize, slot: usize) -> ValueId {
        if let Some(&s) = self.snap.get(&(e, slot)) {
            return s;
        }
        self.value_of(self.operand(e, slot) as usize)
    }

    /// The forward value of (non-variable) expression `v`, as the backward walk sees it.
    fn value_of(&mut self, v: usize) -> ValueId {
        let x = &self.s.k.exprs[v];
        match &x.inst {
            Inst::Position { axis } => self.pos[*axis as usize],
            Inst::Range { .. } if self.loop_index.contains_key(&(v as ValueId)) => {
                self.loop_index[&(v as ValueId)]
            }
            Inst::Const(_) if x.block.is_some() => {
                let c = self.s.dag.expressions[v].clone();
                self.b.raw(c)
            }
            _ => match self.tape.get(&v) {
                Some(&t) => t,
                None => self.fwd[v],
            },
        }
    }
}

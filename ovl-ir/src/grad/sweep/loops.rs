//! What the sweep needs to know about the forward's counted loops: whether each can be
//! recomputed iteration by iteration ([`Sweep::check_loops`]), whether its backward walk may
//! visit the iterations in forward order ([`Sweep::order_free`]), and whether recomputing it
//! leaves anything behind ([`Sweep::recomputes_nothing`]).

use super::Sweep;
use crate::ir;
use crate::typed::{Inst, ValueId};
use std::collections::HashMap;

impl Sweep<'_> {
    /// Checks that every loop the backward walk goes through can be recomputed iteration by
    /// iteration: what the walk reads inside it does not depend on state the loop carries.
    /// Loops that fail are recorded instead (`super::tape`): the plan of their records.
    pub fn check_loops(&self) -> Result<super::tape::Plan, crate::grad::Construct> {
        let k = self.k;
        let mut carrying = Vec::new();
        'loops: for (l, x) in k.exprs.iter().enumerate() {
            let Inst::Range { close, .. } = x.inst else {
                continue;
            };
            let close = close as usize;
            if !self.has_work(l + 1, close) {
                continue;
            }
            let body = l + 1..close;
            // Variables and accumulators from before the loop that it updates.
            let mut carried = vec![false; k.exprs.len()];
            for e in body.clone() {
                match k.exprs[e].inst {
                    Inst::Assign { variable: v, .. } | Inst::Accumulate { accumulator: v, .. }
                        if (v as usize) < l =>
                    {
                        carried[v as usize] = true
                    }
                    _ => {}
                }
            }
            // Values of the body computed from carried state.
            let mut tainted = carried.clone();
            // A local tensor the loop changes (and that lives across it), or that changes after
            // the loop: its elements differ when the iteration is recomputed.
            for e in body.clone() {
                if let (Some(t), Inst::Read { .. }) = (self.local_of(e), &k.exprs[e].inst) {
                    let carried_local =
                        self.local_origin(t) < l && self.local_changed(t, body.clone());
                    if carried_local || self.local_changed(t, close..k.exprs.len()) {
                        tainted[e] = true;
                    }
                }
            }
            loop {
                let mut changed = false;
                for e in body.clone() {
                    let from = self.read_slots(e).any(|(_, o)| tainted[o as usize]);
                    let target = match k.exprs[e].inst {
                        Inst::Assign { variable, .. } => variable as usize,
                        _ => e,
                    };
                    if from && !tainted[target] && target > l {
                        tainted[target] = true;
                        changed = true;
                    }
                }
                if !changed {
                    break;
                }
            }
            // What the recomputation and the walk read inside the loop.
            for e in body {
                let mut read: Vec<ValueId> = Vec::new();
                if self.facts.active[e] {
                    read.extend(self.needs(e).into_iter().map(|s| self.operand_of(e, s)));
                    if self.needs_result(e) {
                        read.push(e as ValueId);
                    }
                }
                match &k.exprs[e].inst {
                    Inst::Accumulate {
                        accumulator, value, ..
                    } if self.is_extremum(*accumulator as usize) => read.push(*value),
                    Inst::Read { indices, .. } => read.extend(indices),
                    Inst::Write { indices, .. } if self.seeded_write(e) => read.extend(indices),
                    Inst::If { condition, end, .. } if self.has_work(e + 1, *end as usize) => {
                        read.push(*condition)
                    }
                    Inst::Range {
                        start,
                        end,
                        step,
                        close,
                    } if self.has_work(e + 1, *close as usize) => {
                        read.extend([*start, *end, *step])
                    }
                    _ => {}
                }
                if read.iter().any(|&v| tainted[v as usize]) {
                    carrying.push(l);
                    continue 'loops;
                }
            }
        }
        self.plan_tapes(carrying)
    }

    /// Whether the backward walk of loop `l` (closed at `close`) may visit its iterations in
    /// forward order: what it does in one iteration does not depend on the others'. So when the
    /// only state the body shares across iterations is summed into (variables from before the
    /// loop updated by `v += m` and read only there, sum accumulators), no min or max from
    /// before the loop is reduced in it (its adjoint goes to the last equal value), and every
    /// access to a local tensor that carries a gradient is at the loop's own index (each
    /// iteration owns its element). Walking forward reads memory in the forward's order, and the
    /// walk is a loop over the forward's own index (vectorized like the forward).
    pub(super) fn order_free(&self, l: usize, close: usize) -> bool {
        let k = self.k;
        if self.taped(l).is_some() {
            return false;
        }
        let body = l + 1..close;
        let mut summed: HashMap<ValueId, (usize, usize)> = HashMap::new();
        for e in body.clone() {
            match &k.exprs[e].inst {
                Inst::Assign { variable, .. } if (*variable as usize) < l => {
                    if self.accumulation(e).is_none() {
                        return false;
                    }
                    summed.entry(*variable).or_default().0 += 1;
                }
                Inst::Accumulate { accumulator, .. }
                    if (*accumulator as usize) < l && self.is_extremum(*accumulator as usize) =>
                {
                    return false
                }
                inst => {
                    let carries_gradient = self
                        .local_of(e)
                        .is_some_and(|t| self.facts.active_locals[t as usize]);
                    let own_element = match inst {
                        Inst::Read { indices, .. } | Inst::Write { indices, .. } => {
                            indices[..] == [l as ValueId]
                        }
                        _ => false,
                    };
                    if carries_gradient && !own_element {
                        return false;
                    }
                }
            }
        }
        for e in body {
            for (_, o) in self.read_slots(e) {
                if let Some(counts) = summed.get_mut(&o) {
                    counts.1 += 1;
                }
            }
        }
        // Each `v += m` reads `v` once (directly or through its cast): no other read.
        summed.values().all(|&(sums, reads)| sums == reads)
    }

    /// Whether recomputing loop `l` (closed at `close`) leaves nothing behind: it updates no
    /// variable or accumulator from before it and no local tensor (its writes of outputs are
    /// not recomputed). Its values are then seen by nothing after it, and the walk of the loop,
    /// if it has one, recomputes each iteration itself.
    pub(super) fn recomputes_nothing(&self, l: usize, close: usize) -> bool {
        (l + 1..close).all(|e| match &self.k.exprs[e].inst {
            Inst::Assign { variable: v, .. } | Inst::Accumulate { accumulator: v, .. } => {
                (*v as usize) > l
            }
            Inst::Write { tensor, .. } | Inst::LocalTensor { tensor, .. } => {
                tensor.kind == ir::TensorKind::Output
            }
            _ => true,
        })
    }
}

//! The predicted time of a whole kernel, memory access and vectorization included, and the
//! rule that no merge makes a graph slower: a merge is kept only when the operator it makes
//! (plus a producer that stays beside it) is predicted to cost at most [`SLACK`] times the
//! pair it replaces as they are, and at most [`SLACK_TOTAL`] times their original operators
//! as they were before fusion ([`Price::admit`]).
//!
//! The other checks of fusion judge one hand-over at a time (`cost`: how often an element is
//! recomputed, whether a substitution makes a producer's reads strided). A merge can still lose
//! in ways they do not see: a transposed producer substituted into a row reduction makes the
//! reduction's loop walk a column (a cache line per element); a transposed operand substituted
//! into a product (a worker per element) keeps its workers from running in lockstep, so its
//! loop, a sequential fold, no longer runs in vector lanes (10x slower); a transposed read
//! keeps the `tanh` of an elementwise kernel scalar (5x); a chain of statistics recomputed
//! inside a loop multiplies its work. So the search (`strategy`) prices every merge (a
//! hand-over in a register, an epilogue, a looped consumer, an index substitution) with one
//! model, from the IR alone (never the machine), and refuses it
//! ([`crate::report::Reason::SlowerFused`]) when it loses. The second bound, against the
//! operators before fusion, keeps steps that each lose a little from compounding: on random
//! graphs, chains of substitutions into a transpose, each within [`SLACK`], ended 3-4x slower.
//!
//! The model, per worker then times the workers, in operation units (the op table's cost
//! column; `cost::MEMORY_UNITS` per element loaded or stored), each expression counted once
//! per run of its enclosing loops:
//! - arithmetic: its cost;
//! - a read or write of an input or output: an element when consecutive runs touch
//!   neighbouring elements (the last index moves by ±1 with the innermost loop, and no other
//!   index does), or neighbouring workers do and they run side by side (at the top level; in a
//!   loop only when the kernel runs its workers in lockstep); once per loop when the index does
//!   not move with the loop (it stays in cache); otherwise a cache line
//!   (`cost::LINE_ELEMENTS` elements) in a loop, and a quarter of one at the top level
//!   (neighbouring workers along another axis reuse the line); a contiguous read that every
//!   worker along some axis shares (a product's operands) costs one unit, like an operation:
//!   it comes from the cache;
//! - divided by [`VECTOR_LANES`] where the compiler runs it in vector lanes: everything, in a
//!   kernel whose workers run in lockstep (`ovl-codegen`'s blocked workers: `ovl_ir::lockstep`)
//!   or that is straight-line code (the loop over workers vectorizes); in a loop without a
//!   branch, a nested loop or an assignment (accumulators vectorize, a fold into a variable
//!   does not); but not the arithmetic of a scope (a loop, or the top level) with an access
//!   that is not contiguous (a gather per element), whose contiguous accesses still stream;
//! - plus [`KERNEL_UNITS`] per kernel, whatever its size.
//!
//! The model ranks kernels; it does not time them. When an operator involved has a size known
//! only at run time or a while loop, the merge is not judged (the other checks decide).

use crate::cost::{self, LINE_ELEMENTS, MEMORY_UNITS};
use crate::graph::Work;
use crate::report::Reason;
use ovl_ir::intervals::Intervals;
use ovl_ir::ir::{self, TensorKind};
use ovl_ir::motion::{Motion, Var};
use ovl_ir::typed::{Inst, Kernel, ValueId};

/// How much more than the operators it replaces, as they are, a merge may be predicted to
/// cost: the model's tolerance for one step (it counts, it does not time). The losses it exists
/// for were predicted at 4x and more (and measured at 10x); a guarded stencil's substitution,
/// which pays, at 1.6x.
pub(crate) const SLACK: f64 = 2.0;

/// How much more than the original operators it holds, as they were before fusion, a merged
/// operator (plus what stays beside it) may be predicted to cost. Each step within [`SLACK`]
/// compounds: on random graphs, chains of substitutions into a transpose, each predicted at
/// 1.3-1.5x, ended measured 3-4x slower than the unfused graph. Tight, because the model is
/// optimistic about arithmetic: a scaling substituted into a product's loop, predicted +18%,
/// measured +30%.
pub(crate) const SLACK_TOTAL: f64 = 1.1;

/// How many operations a vector instruction does (f32 in 256 bits): arithmetic the compiler
/// vectorizes costs this much less.
pub(crate) const VECTOR_LANES: f64 = 8.0;

/// What running one more kernel costs whatever its size, in operation units: the hand-off to
/// the threads and back (about a microsecond on the CPU), so that merges of small operators,
/// which pay by saving it, are not refused for a few more operations.
pub(crate) const KERNEL_UNITS: f64 = 4096.0;

/// What a merge of producer `p` into consumer `c` is compared with.
pub(crate) struct Price {
    /// The producer's predicted cost as it is.
    producer: f64,
    /// The producer's and the consumer's, as they are.
    before: f64,
    /// Their original operators', each once, as they were before fusion (`None` when one
    /// could not be priced).
    unfused: Option<f64>,
}

/// What merging `p` into `c` is compared with, or `None` when either cannot be priced (the
/// merge is then not judged here).
pub(crate) fn price(work: &Work, p: usize, c: usize) -> Option<Price> {
    let producer = node_cost(work, p)?;
    Some(Price {
        producer,
        before: producer + node_cost(work, c)?,
        unfused: unfused_cost(work, p, c),
    })
}

impl Price {
    /// Refuses `merged` (with `p` still there beside it when `producer_stays`) when it is
    /// predicted to cost more than [`SLACK`] times the pair as it is, or more than
    /// [`SLACK_TOTAL`] times their original operators before fusion.
    pub(crate) fn admit(
        &self,
        merged: &ir::ExpressionDag,
        producer_stays: bool,
    ) -> Result<(), Reason> {
        let kernel = Kernel::from_validated(merged);
        let Some(fused) = kernel_cost(&kernel, &Intervals::of(&kernel)) else {
            return Ok(());
        };
        let after = fused + if producer_stays { self.producer } else { 0.0 };
        let refuse = |than: f64| Reason::SlowerFused {
            fused: after.round() as u64,
            unfused: than.round() as u64,
        };
        if after > SLACK * self.before {
            return Err(refuse(self.before));
        }
        match self.unfused {
            Some(unfused) if after > SLACK_TOTAL * unfused => Err(refuse(unfused)),
            _ => Ok(()),
        }
    }
}

/// The predicted cost of node `id`'s operator (`None` when it cannot be priced).
pub(crate) fn node_cost(work: &Work, id: usize) -> Option<f64> {
    kernel_cost(&work.kernel(id), &work.intervals(id))
}

/// The predicted cost of each of the `originals` operators as `work` holds them before any
/// merge (`None` for those it cannot price, or that a node holds with others).
pub(crate) fn unfused_costs(work: &Work, originals: usize) -> Vec<Option<f64>> {
    let mut costs = vec![None; originals];
    for (id, node) in work.nodes.iter().enumerate() {
        if let Some(node) = node {
            if let [m] = node.members[..] {
                if let Some(slot) = costs.get_mut(m) {
                    *slot = node_cost(work, id);
                }
            }
        }
    }
    costs
}

/// The predicted cost of the original operators that `p` and `c` hold, each once, as they
/// were before fusion (`None` when one of them cannot be priced).
fn unfused_cost(work: &Work, p: usize, c: usize) -> Option<f64> {
    let mut members: Vec<usize> = work.node(p).members.clone();
    members.extend(&work.node(c).members);
    members.sort_unstable();
    members.dedup();
    members
        .into_iter()
        .map(|m| work.unfused.get(m).copied().flatten())
        .sum()
}

/// The predicted cost of `kernel` (see the module).
pub(crate) fn kernel_cost(kernel: &Kernel, iv: &Intervals) -> Option<f64> {
    let mut workers = 1.0f64;
    for d in &kernel.workgroup {
        workers *= d.known()? as f64;
    }
    let inner = cost::innermost_axis(kernel);
    let mut motion = Motion::new(kernel);
    let lockstep = ovl_ir::lockstep::width(kernel).is_some();
    let scalar = scalar_loops(kernel);
    let straight = !kernel.exprs.iter().any(|x| {
        matches!(
            x.inst,
            Inst::Range { .. } | Inst::If { .. } | Inst::WhileBegin { .. }
        )
    });
    // Each expression's units and runs per worker, and the scopes (a loop, or the top level
    // at index `exprs.len()`) with an access that is not contiguous: the compiler does not
    // vectorize their arithmetic (a gather per element; measured: a transposed read in an
    // elementwise kernel kept its `tanh` scalar, 5x slower than the transpose alone).
    let extents: Vec<u64> = kernel
        .workgroup
        .iter()
        .map(|d| d.known().unwrap_or(0))
        .collect();
    let top = kernel.exprs.len();
    let mut gathers = vec![false; top + 1];
    let mut priced = Vec::with_capacity(top);
    for (i, x) in kernel.exprs.iter().enumerate() {
        let runs = cost::runs_per_worker(kernel, iv, i)?;
        let loop_ = kernel.enclosing_loops(i).next();
        // Contiguous accesses keep their lanes in a scope with a gather: they stream.
        let (units, streams) = match &x.inst {
            Inst::Read { tensor, indices }
            | Inst::Write {
                tensor, indices, ..
            } if tensor.kind != TensorKind::Local => {
                let trips = match loop_ {
                    Some(l) => iv.trips(l as usize)? as f64,
                    None => 1.0,
                };
                let elements = access(&mut motion, indices, loop_, inner, lockstep, trips);
                if elements > 1.0 {
                    gathers[loop_.map_or(top, |l| l as usize)] = true;
                    (MEMORY_UNITS * elements, false)
                } else if matches!(x.inst, Inst::Read { .. })
                    && shared(&mut motion, indices, &extents)
                {
                    // Read by every worker along an axis: from the cache, like an operation.
                    (elements.min(1.0 / MEMORY_UNITS) * MEMORY_UNITS, true)
                } else {
                    (MEMORY_UNITS * elements, true)
                }
            }
            Inst::WhileBegin { .. } => return None,
            inst => (cost::weight(inst.op()), false),
        };
        priced.push((loop_, units * runs, streams));
    }
    let mut per_worker = 0.0;
    for (loop_, units, streams) in priced {
        let scope = loop_.map_or(top, |l| l as usize);
        let vectorized = (streams || !gathers[scope])
            && (lockstep
                || match loop_ {
                    None => straight,
                    Some(l) => !scalar[l as usize],
                });
        per_worker += units / if vectorized { VECTOR_LANES } else { 1.0 };
    }
    Some(per_worker * workers + KERNEL_UNITS)
}

/// The loops whose iterations the compiler cannot run in vector lanes: those with a branch, a
/// loop, or an assignment inside (a fold into a variable is sequential; accumulators are not).
fn scalar_loops(kernel: &Kernel) -> Vec<bool> {
    let mut scalar = vec![false; kernel.exprs.len()];
    for (i, x) in kernel.exprs.iter().enumerate() {
        if matches!(
            x.inst,
            Inst::Assign { .. } | Inst::If { .. } | Inst::Range { .. } | Inst::WhileBegin { .. }
        ) {
            for l in kernel.enclosing_loops(i) {
                scalar[l as usize] = true;
            }
        }
    }
    scalar
}

/// The cost of one access at `indices`, in elements (see the module): `loop_` is its
/// innermost enclosing loop, of `trips` iterations, `inner` the innermost position axis.
fn access(
    motion: &mut Motion,
    indices: &[ValueId],
    loop_: Option<ValueId>,
    inner: Option<usize>,
    lockstep: bool,
    trips: f64,
) -> f64 {
    if indices.is_empty() {
        return 1.0;
    }
    let neighbours = inner.is_some_and(|a| motion.follows(indices, Var::Position(a)));
    match loop_ {
        Some(l) => {
            if motion.fixed(indices, Var::Loop(l)) {
                1.0 / trips.max(1.0)
            } else if motion.follows(indices, Var::Loop(l)) || (lockstep && neighbours) {
                1.0
            } else {
                LINE_ELEMENTS
            }
        }
        None => {
            let fixed = inner.is_none_or(|a| motion.fixed(indices, Var::Position(a)));
            if fixed || neighbours {
                1.0
            } else {
                LINE_ELEMENTS / 4.0
            }
        }
    }
}

/// Whether every worker along some axis of the workgroup (`extents`, of more than one
/// worker) reads the same element at `indices`: it stays in the cache after the first.
fn shared(motion: &mut Motion, indices: &[ValueId], extents: &[u64]) -> bool {
    (0..extents.len()).any(|a| extents[a] > 1 && motion.fixed(indices, Var::Position(a)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ovl_ir::fixtures;

    fn priced(dag: &ir::ExpressionDag) -> (bool, f64) {
        let kernel = Kernel::decode(dag).unwrap();
        let iv = Intervals::of(&kernel);
        let lockstep = ovl_ir::lockstep::width(&kernel).is_some();
        // The work alone, without the fixed cost of a kernel.
        (lockstep, kernel_cost(&kernel, &iv).unwrap() - KERNEL_UNITS)
    }

    #[test]
    fn a_column_walked_without_lockstep_costs_a_line_per_element() {
        // Column sums, a worker per column: with 64 columns the workers run in lockstep and
        // each read down a column costs an element (vectorized); with 40 they do not, and
        // each read costs a cache line.
        let per_column = |cols: u64| priced(&fixtures::sum_columns(100, cols)).1 / cols as f64;
        let ratio = per_column(40) / per_column(64);
        assert!(ratio > LINE_ELEMENTS / 2.0, "{ratio}");
        // Twice the rows, twice the cost.
        let tall = priced(&fixtures::sum_columns(200, 64)).1 / 64.0;
        assert!((1.9..2.1).contains(&(tall / per_column(64))));
    }

    #[test]
    fn steps_within_the_slack_do_not_compound_past_the_operators_before_fusion() {
        // Chains of substitutions into a transpose, each predicted at 1.3-1.5x the pair they
        // replaced, ended 3-4x slower than the unfused graph (the property check's graph 17).
        let merged = fixtures::norm_rows(64, 512);
        let kernel = Kernel::decode(&merged).unwrap();
        let cost = kernel_cost(&kernel, &Intervals::of(&kernel)).unwrap();
        let price = |before: f64, unfused: Option<f64>| Price {
            producer: before / 2.0,
            before,
            unfused,
        };
        // Within one step's slack, and within the bound of the operators before fusion.
        assert!(price(cost / 1.5, Some(cost)).admit(&merged, false).is_ok());
        // Within one step's slack, past the bound: refused, against the operators before.
        match price(cost / 1.5, Some(cost / 1.5)).admit(&merged, false) {
            Err(Reason::SlowerFused { unfused, .. }) => {
                assert_eq!(unfused, (cost / 1.5).round() as u64)
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        // Past one step's slack.
        assert!(price(cost / 3.0, None).admit(&merged, false).is_err());
        // A producer that stays counts beside the merged operator.
        assert!(price(cost / 1.5, Some(cost)).admit(&merged, true).is_err());
    }
}

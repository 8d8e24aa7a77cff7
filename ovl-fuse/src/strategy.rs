//! The ways a producer merges into its consumer, each a [`Strategy`]: a plan, or the [`Reason`]
//! it is refused, then its application, which may still be refused (the merged operator did
//! not validate) and then leaves the graph as it was. The search (`crate::search`) decides
//! which strategy to try on which pair, and in what order.
//!
//! - [`Vertical`]: a hand-over in a register (`legality`, `merge`).
//! - [`Epilogue`]: an elementwise consumer inside the producer's row loop (`epilogue`).
//! - [`Substitution`]: the producer recomputed at the consumer's reads (`substitute`).
//! - [`Looped`]: the consumer run as a loop inside the producer's workers (`looped`), then a
//!   hand-over in a register.

use crate::graph::{self, Src, Work};
use crate::legality::{self, NotVertical};
use crate::report::NotEpilogue;
use crate::report::{Merge, MergeKind, Reason};
use crate::{epilogue, looped, memory, merge, rebase, substitute};
use ovl_ir::ir;

/// One way to merge producer `p` into consumer `c` (see the module's documentation).
pub(crate) trait Strategy {
    /// What `plan` found, for `apply`.
    type Plan;
    /// How its merges are reported.
    const KIND: MergeKind;
    /// The lowest `opt_level` that uses it.
    const MIN_LEVEL: u8;
    /// How `p` would merge into `c`, or why it cannot.
    fn plan(&self, work: &Work, p: usize, c: usize) -> Result<Self::Plan, Reason>;
    /// Merges `p` into `c` as planned: the merge entry, or why the result was refused (the
    /// graph is then unchanged).
    fn apply(
        &self,
        work: &mut Work,
        p: usize,
        c: usize,
        plan: Self::Plan,
        originals: &[String],
    ) -> Result<Merge, Reason>;

    /// `plan`, then `apply`.
    fn attempt(
        &self,
        work: &mut Work,
        p: usize,
        c: usize,
        originals: &[String],
    ) -> Result<Merge, Reason> {
        let plan = self.plan(work, p, c)?;
        self.apply(work, p, c, plan, originals)
    }
}

/// `p`'s outputs described for the report.
fn describe(work: &Work, p: usize, o: u32) -> String {
    work.describe(Src::Op { node: p, output: o })
}

/// A merged operator that passes validation, or the refusal.
fn valid(dag: &ir::ExpressionDag) -> Result<(), Reason> {
    ovl_ir::validate::validate(dag).map_err(|e| Reason::InvalidMerge {
        error: e.to_string(),
    })
}

/// A hand-over in a register: equal workgroups, one proven write per worker, reads at the same
/// affine map (`legality`).
pub(crate) struct Vertical;

impl Strategy for Vertical {
    type Plan = legality::VerticalPlan;
    const KIND: MergeKind = MergeKind::Vertical;
    const MIN_LEVEL: u8 = 1;

    fn plan(&self, work: &Work, p: usize, c: usize) -> Result<Self::Plan, Reason> {
        legality::check_vertical(work, p, c).map_err(|not| match not {
            NotVertical::Refused(r) | NotVertical::Cycle(r) => r,
            NotVertical::ReadsDiffer => Reason::ReadsDiffer,
        })
    }

    fn apply(
        &self,
        work: &mut Work,
        p: usize,
        c: usize,
        plan: Self::Plan,
        originals: &[String],
    ) -> Result<Merge, Reason> {
        let price = memory::price(work, p, c);
        merge_pair(work, p, c, &plan, Self::KIND, originals, price)
    }
}

/// Merges producer `p` into consumer `c` following a legal vertical `plan` (the consumer
/// replaced by the merged node): the merge entry of `kind`, or the reason it was refused (the
/// result did not validate, or `price` refuses it).
fn merge_pair(
    work: &mut Work,
    p: usize,
    c: usize,
    plan: &legality::VerticalPlan,
    kind: MergeKind,
    originals: &[String],
    price: Option<memory::Price>,
) -> Result<Merge, Reason> {
    let (pn, cn) = (work.node(p), work.node(c));
    // Only handed-over outputs (one proven in-bounds write each) may disappear: dropping
    // another unused output could hide its out-of-bounds writes.
    let keep: Vec<bool> = (0..pn.dag.outputs.len() as u32)
        .map(|o| {
            !plan.handoffs.iter().any(|h| h.output == o)
                || work.used_outside(Src::Op { node: p, output: o }, c)
        })
        .collect();
    let merged = merge::merge_vertical(pn, cn, plan, &keep, originals);
    valid(&merged.node.dag)?;
    if let Some(price) = price {
        price.admit(&merged.node.dag, false)?;
    }
    let entry = Merge {
        kind,
        first: pn.label.clone(),
        second: cn.label.clone(),
        through: plan
            .handoffs
            .iter()
            .map(|h| describe(work, p, h.output))
            .collect(),
        kept: plan
            .handoffs
            .iter()
            .filter(|h| keep[h.output as usize])
            .map(|h| describe(work, p, h.output))
            .collect(),
        recompute: 0,
    };
    work.replace(p, c, merged.node, &merged.map_first, &merged.map_second);
    Ok(entry)
}

/// An elementwise consumer run at the end of each iteration of the loop in which the producer
/// writes a row of what it reads (`epilogue`), when the producer's workgroup is the consumer's
/// without one axis of extent above 1, and no other path leads from `p` to `c`.
pub(crate) struct Epilogue;

impl Strategy for Epilogue {
    /// The producer over the consumer's workgroup (that axis of extent 1), and the plan.
    type Plan = (graph::Node, epilogue::EpiloguePlan);
    const KIND: MergeKind = MergeKind::Epilogue;
    const MIN_LEVEL: u8 = 3;

    fn plan(&self, work: &Work, p: usize, c: usize) -> Result<Self::Plan, Reason> {
        let no = |why: NotEpilogue| Reason::NoEpilogue { why };
        if let Some(through) = work.other_path(p, c) {
            return Err(Reason::WouldCreateCycle {
                through: work.node(through).label.clone(),
            });
        }
        let (pn, cn) = (work.node(p), work.node(c));
        let (target, axes) = looped::loop_axes(&pn.dag.workgroup_shape, &cn.dag.workgroup_shape)
            .ok_or(no(NotEpilogue::AxesDropped))?;
        let [axis] = axes[..] else {
            return Err(no(NotEpilogue::SeveralAxes));
        };
        let producer = graph::Node {
            dag: rebase::rebased(&pn.dag, &work.kernel(p), &target)
                .ok_or(no(NotEpilogue::NotRebased))?,
            ..pn.clone()
        };
        let plan = epilogue::check(&producer, cn, p, axis).map_err(no)?;
        Ok((producer, plan))
    }

    fn apply(
        &self,
        work: &mut Work,
        p: usize,
        c: usize,
        (producer, plan): Self::Plan,
        originals: &[String],
    ) -> Result<Merge, Reason> {
        let cn = work.node(c);
        let keep: Vec<bool> = (0..producer.dag.outputs.len() as u32)
            .map(|o| o != plan.output || work.used_outside(Src::Op { node: p, output: o }, c))
            .collect();
        let merged = epilogue::merge(&producer, cn, &plan, &keep, originals);
        valid(&merged.node.dag)?;
        if let Some(price) = memory::price(work, p, c) {
            price.admit(&merged.node.dag, false)?;
        }
        let through = describe(work, p, plan.output);
        let entry = Merge {
            kind: Self::KIND,
            first: work.node(p).label.clone(),
            second: cn.label.clone(),
            through: vec![through.clone()],
            kept: if keep[plan.output as usize] {
                vec![through]
            } else {
                Vec::new()
            },
            recompute: 0,
        };
        work.replace(p, c, merged.node, &merged.map_first, &merged.map_second);
        Ok(entry)
    }
}

/// The producer recomputed inside the consumer at every read (`substitute`): the producer is
/// removed when nothing reads it any more.
pub(crate) struct Substitution;

impl Strategy for Substitution {
    type Plan = substitute::SubstitutionPlan;
    const KIND: MergeKind = MergeKind::Inlined;
    const MIN_LEVEL: u8 = 1;

    fn plan(&self, work: &Work, p: usize, c: usize) -> Result<Self::Plan, Reason> {
        substitute::check(work, p, c)
    }

    fn apply(
        &self,
        work: &mut Work,
        p: usize,
        c: usize,
        plan: Self::Plan,
        originals: &[String],
    ) -> Result<Merge, Reason> {
        let (pn, cn) = (work.node(p), work.node(c));
        let node = substitute::substitute(pn, cn, &plan, originals);
        valid(&node.dag)?;
        if let Some(price) = memory::price(work, p, c) {
            price.admit(&node.dag, !plan.kept.is_empty())?;
        }
        let mut through: Vec<u32> = plan.slot_output.iter().flatten().copied().collect();
        through.sort_unstable();
        through.dedup();
        let entry = Merge {
            kind: Self::KIND,
            first: pn.label.clone(),
            second: cn.label.clone(),
            through: through.iter().map(|&o| describe(work, p, o)).collect(),
            kept: plan.kept.iter().map(|&o| describe(work, p, o)).collect(),
            recompute: plan.recompute.round().max(1.0) as u64,
        };
        work.replace_one(c, node);
        work.remove_if_unused(p);
        Ok(entry)
    }
}

/// The consumer run as a loop inside the workers of the producer (`looped`), then merged
/// vertically: when the producer's workgroup is the consumer's with axes dropped, the producer
/// loops per worker at least half as often as the consumer's dropped axes hold elements, the
/// consumer cannot fault, and the looped reads hand over.
pub(crate) struct Looped;

impl Strategy for Looped {
    /// The producer over the consumer's workgroup and the consumer looped inside it.
    type Plan = (ir::ExpressionDag, ir::ExpressionDag);
    const KIND: MergeKind = MergeKind::Looped;
    const MIN_LEVEL: u8 = 3;

    fn plan(&self, work: &Work, p: usize, c: usize) -> Result<Self::Plan, Reason> {
        let no = |why: &str| Reason::NotLoopable { why: why.into() };
        let (pn, cn) = (work.node(p), work.node(c));
        let (target, axes) = looped::loop_axes(&pn.dag.workgroup_shape, &cn.dag.workgroup_shape)
            .ok_or_else(|| {
                no("the producer's workgroup is not the consumer's with axes dropped")
            })?;
        let extent: u64 = axes.iter().map(|&a| cn.dag.workgroup_shape[a]).product();
        if !looped::loops_enough(&work.kernel(p), &work.intervals(p), extent) {
            return Err(no(
                "the producer's workers loop less than half as often as the consumer's dropped \
                 axes hold elements (parallelism would drop)",
            ));
        }
        // A consumer that may fault would stop its whole row at the first fault (and report
        // another worker): only consumers that cannot fault are looped.
        if let Some(why) = work.intervals(c).first_possible_fault(&cn.dag) {
            return Err(no(&format!("the consumer may fault: {why}")));
        }
        let producer = rebase::rebased(&pn.dag, &work.kernel(p), &target)
            .ok_or_else(|| no("the producer cannot run over the consumer's workgroup"))?;
        let consumer = looped::looped(&cn.dag, &work.kernel(c), &target, &axes)
            .ok_or_else(|| no("the consumer cannot be written as a loop"))?;
        Ok((producer, consumer))
    }

    fn apply(
        &self,
        work: &mut Work,
        p: usize,
        c: usize,
        (producer, consumer): Self::Plan,
        originals: &[String],
    ) -> Result<Merge, Reason> {
        let price = memory::price(work, p, c);
        let old_producer = std::mem::replace(&mut work.node_mut(p).dag, producer);
        let old_consumer = std::mem::replace(&mut work.node_mut(c).dag, consumer);
        let merged = Vertical
            .plan(work, p, c)
            .and_then(|plan| merge_pair(work, p, c, &plan, Self::KIND, originals, price));
        if merged.is_err() {
            work.node_mut(p).dag = old_producer;
            work.node_mut(c).dag = old_consumer;
        }
        merged
    }
}

//! The search: which [`Strategy`] is tried on which pair, in what order, and what is reported
//! when every way is refused.
//!
//! Each step makes merges; the next step starts over on the changed graph (a merge can change
//! another pair's verdict: index substitution removes paths, and a producer with fewer readers
//! is cheaper to recompute). One step tries, in this order:
//!
//! 1. every producer -> consumer pair, from the outputs towards the inputs (as in the
//!    original): a hand-over in a register ([`Vertical`]); when the producer's writes rule it
//!    out, the consumer as an epilogue of the producer's row loop ([`Epilogue`], level 3). This
//!    phase is a sweep: after a merge it goes on with the pairs of operators that no merge of
//!    this step touched, each judged on the graph as it is then, so that a chain of `n`
//!    operators fuses in about `log2(n)` steps, by merges of similar sizes, in time near-linear
//!    in `n` (one merge per step made each step copy the ever-growing merged operator);
//!
//! When the sweep made no merge:
//!
//! 2. the pairs whose reads differ or whose merge would close a cycle, in the same order:
//!    index substitution ([`Substitution`]; cheaper pairs first: a hand-over in a register
//!    needs no duplicate);
//! 3. at level 3, sibling fusion (`horizontal`);
//! 4. the pairs whose reads differ and that substitution refused: the consumer as a loop in the
//!    producer's workers ([`Looped`], level 3; after siblings, so that siblings reading the
//!    same statistic are looped as one).
//!
//! A strategy above the level in force is not tried. Every refusal of every strategy tried is
//! kept for the report ([`Refused`]); the search ends when a step finds nothing.

use crate::graph::{Src, Work};
use crate::horizontal;
use crate::report::{Merge, MergeKind, Reason};
use crate::strategy::{Epilogue, Looped, Strategy, Substitution, Vertical};
use crate::{FuseError, OptLevel};
use std::collections::{HashMap, HashSet};

/// Why a producer -> consumer pair was not merged: the refusal of the first way tried, and
/// those of the others.
#[derive(Clone, Debug)]
pub(crate) struct Refused {
    pub reason: Reason,
    pub also: Vec<(MergeKind, Reason)>,
    /// Substitution refused a pair whose reads differ: looping the consumer inside the
    /// producer's workers is still to be tried (step 4).
    looped_pending: bool,
}

impl Refused {
    /// Whether a refusal rests on another path from the producer to the consumer (a merge
    /// would close a cycle).
    fn rests_on_paths(&self) -> bool {
        std::iter::once(&self.reason)
            .chain(self.also.iter().map(|(_, r)| r))
            .any(|r| matches!(r, Reason::WouldCreateCycle { .. }))
    }
}

/// The state of the search over one graph.
pub(crate) struct Search<'a> {
    pub work: Work,
    level: OptLevel,
    /// The original operators' names, for the labels of merged ones.
    originals: &'a [String],
    /// Why each producer -> consumer pair of live nodes was refused. A refusal is kept across
    /// steps while it still holds: it rests on the two operators, the producer's readers
    /// (`Work::take_changes` says whose changed) and the paths between them, which merges
    /// keep ([`Search::forget_stale`]). So a step re-plans only the pairs near its merges, and a graph
    /// whose merges enable one another one at a time (substitutions along a recurrence) is
    /// not re-planned whole at every step.
    pub refused: HashMap<(usize, usize), Refused>,
    /// The pairs a register hand-over refused because the consumer reads another way than the
    /// producer writes: that rests on the two operators alone, so it is kept while neither
    /// changes, and such a pair goes straight to index substitution.
    reads_differ: HashSet<(usize, usize)>,
    /// Sibling pairs whose merged operator failed validation.
    siblings_blocked: HashSet<(usize, usize)>,
    /// Forget every refusal after each step (`fuse_replanning_every_step`, for tests).
    pub replan_every_step: bool,
}

impl<'a> Search<'a> {
    pub fn new(mut work: Work, level: OptLevel, originals: &'a [String]) -> Search<'a> {
        work.unfused = crate::memory::unfused_costs(&work, originals.len());
        Search {
            work,
            level,
            originals,
            refused: HashMap::new(),
            reads_differ: HashSet::new(),
            siblings_blocked: HashSet::new(),
            replan_every_step: false,
        }
    }

    /// Makes merges until none is left; returns them in the order made.
    pub fn run(&mut self) -> Result<Vec<Merge>, FuseError> {
        let mut merges = Vec::new();
        self.work.take_changes();
        loop {
            let made = self.step()?;
            if made.is_empty() {
                self.name_paths();
                return Ok(merges);
            }
            merges.extend(made);
            self.forget_stale();
        }
    }

    /// Forgets the refusals a step's merges may have changed (see [`Search::refused`]).
    ///
    /// A refusal because another path leads from the producer to the consumer stays true as
    /// well: merging a producer into its consumer, siblings, or a consumer looped into its
    /// producer keep every path between other nodes (a path through either merged node goes
    /// through the merged one), and index substitution removes only edges leaving the
    /// substituted producer, whose readers changed. (Which node the path goes through may
    /// change: [`Search::name_paths`] names them again at the end.)
    fn forget_stale(&mut self) {
        let changes = self.work.take_changes();
        if self.replan_every_step {
            self.refused.clear();
            self.reads_differ.clear();
            return;
        }
        let work = &self.work;
        let same_operators = |p: usize, c: usize| {
            work.nodes[p].is_some()
                && work.nodes[c].is_some()
                && !changes.operator.contains(&p)
                && !changes.operator.contains(&c)
        };
        self.reads_differ.retain(|&(p, c)| same_operators(p, c));
        self.refused
            .retain(|&(p, c), _| same_operators(p, c) && !changes.readers.contains(&p));
    }

    /// Names, in every refusal that rests on another path from the producer to the consumer,
    /// a node that path goes through now.
    fn name_paths(&mut self) {
        let work = &self.work;
        for (&(p, c), r) in self.refused.iter_mut() {
            if !r.rests_on_paths() {
                continue;
            }
            let Some(through) = work.other_path(p, c) else {
                continue;
            };
            let label = &work.node(through).label;
            for reason in std::iter::once(&mut r.reason).chain(r.also.iter_mut().map(|(_, r)| r)) {
                if let Reason::WouldCreateCycle { through } = reason {
                    through.clone_from(label);
                }
            }
        }
    }

    /// Whether strategy `S` runs at the level in force.
    fn enabled<S: Strategy>(&self) -> bool {
        self.level.get() >= S::MIN_LEVEL
    }

    /// Makes the merges of one step (see the module's documentation); none when nothing is
    /// left to merge.
    fn step(&mut self) -> Result<Vec<Merge>, FuseError> {
        let order = self.work.topological_order()?;
        // 1. Hand-overs in a register (or epilogues), from the outputs towards the inputs, in
        // one sweep: a node made by a merge of this sweep waits for the next step.
        let made_before = self.work.nodes.len();
        let mut swept = Vec::new();
        let mut substitutable: Vec<(usize, usize, Reason)> = Vec::new();
        for &c in order.iter().rev() {
            if self.work.nodes[c].is_none() {
                continue;
            }
            for p in self.work.producers(c) {
                if p >= made_before || self.refused.contains_key(&(p, c)) {
                    continue;
                }
                if let Some(r) = gate(&self.work, p, c, self.level) {
                    self.refuse(p, c, r, Vec::new());
                    continue;
                }
                if self.reads_differ.contains(&(p, c)) {
                    substitutable.push((p, c, Reason::ReadsDiffer));
                    continue;
                }
                // `[rows]` and `[rows, 1]` are the same workers: one shape for both.
                self.work.rebase(p, c);
                match Vertical.plan(&self.work, p, c) {
                    Ok(plan) => match Vertical.apply(&mut self.work, p, c, plan, self.originals) {
                        Ok(m) => {
                            swept.push(m);
                            break; // `c` is merged: on to the next consumer
                        }
                        Err(r) => self.refuse(p, c, r, Vec::new()),
                    },
                    Err(Reason::ReadsDiffer) => {
                        self.reads_differ.insert((p, c));
                        substitutable.push((p, c, Reason::ReadsDiffer));
                    }
                    Err(r @ Reason::WouldCreateCycle { .. }) => substitutable.push((p, c, r)),
                    Err(r) => {
                        let mut also = Vec::new();
                        if self.enabled::<Epilogue>() {
                            match Epilogue.attempt(&mut self.work, p, c, self.originals) {
                                Ok(m) => {
                                    swept.push(m);
                                    break;
                                }
                                Err(e) => also.push((MergeKind::Epilogue, e)),
                            }
                        }
                        self.refuse(p, c, r, also);
                    }
                }
            }
        }
        if !swept.is_empty() {
            return Ok(swept);
        }
        // 2. Index substitution.
        for (p, c, first) in substitutable {
            match Substitution.attempt(&mut self.work, p, c, self.originals) {
                Ok(m) => return Ok(vec![m]),
                // A cycle is the first reason a register hand-over failed.
                Err(r) if matches!(first, Reason::WouldCreateCycle { .. }) => {
                    self.refuse(p, c, first, vec![(MergeKind::Inlined, r)]);
                }
                Err(r) => {
                    self.refuse(p, c, r, Vec::new());
                    if let Some(refused) = self.refused.get_mut(&(p, c)) {
                        refused.looped_pending = true;
                    }
                }
            }
        }
        // 3. Siblings.
        if self.level.get() >= 3 {
            if let Some(m) = self.siblings(&order)? {
                return Ok(vec![m]);
            }
        }
        // 4. Consumers looped inside the workers of a reduction.
        if self.enabled::<Looped>() {
            for &c in order.iter().rev() {
                for p in self.work.producers(c) {
                    match self.refused.get_mut(&(p, c)) {
                        Some(refused) if refused.looped_pending => refused.looped_pending = false,
                        _ => continue,
                    }
                    match Looped.attempt(&mut self.work, p, c, self.originals) {
                        Ok(m) => return Ok(vec![m]),
                        Err(r) => {
                            if let Some(refused) = self.refused.get_mut(&(p, c)) {
                                refused.also.push((MergeKind::Looped, r));
                            }
                        }
                    }
                }
            }
        }
        Ok(Vec::new())
    }

    fn refuse(&mut self, p: usize, c: usize, reason: Reason, also: Vec<(MergeKind, Reason)>) {
        self.refused.insert(
            (p, c),
            Refused {
                reason,
                also,
                looped_pending: false,
            },
        );
    }

    /// Merges the first pair of independent operators over the same workgroup whose merged
    /// operator validates (a pair that does not is never tried again).
    fn siblings(&mut self, order: &[usize]) -> Result<Option<Merge>, FuseError> {
        let desc = self.work.descendants()?;
        loop {
            let blocked = &self.siblings_blocked;
            let skip = |a: usize, b: usize| blocked.contains(&(a, b));
            let Some((a, b)) = horizontal::find_siblings(&self.work, order, &desc, &skip) else {
                return Ok(None);
            };
            self.work.rebase(a, b);
            let merged =
                horizontal::merge_siblings(self.work.node(a), self.work.node(b), self.originals);
            if ovl_ir::validate::validate(&merged.node.dag).is_err() {
                self.siblings_blocked.insert((a, b));
                continue;
            }
            let m = Merge {
                kind: MergeKind::Horizontal,
                first: self.work.node(a).label.clone(),
                second: self.work.node(b).label.clone(),
                through: Vec::new(),
                kept: Vec::new(),
                recompute: 0,
            };
            self.work
                .replace(a, b, merged.node, &merged.map_first, &merged.map_second);
            return Ok(Some(m));
        }
    }
}

/// The refusal due to the operators' kinds (a library call is a boundary, and so is the cut of
/// a stacked result whose pieces the runner reads in place) or the optimization level alone,
/// if any.
fn gate(work: &Work, p: usize, c: usize, level: OptLevel) -> Option<Reason> {
    if let Some(n) = [p, c]
        .into_iter()
        .find(|&n| ovl_ir::library::is_library_call(&work.node(n).dag))
    {
        let node = work.node(n);
        return Some(Reason::LibraryCall {
            operator: node.label.clone(),
            call: ovl_ir::library::describe(&node.dag),
        });
    }
    // The other boundaries: cuts read in place.
    if let Some(n) = [p, c].into_iter().find(|&n| work.is_boundary(n)) {
        return Some(Reason::CutReadInPlace {
            operator: work.node(n).label.clone(),
        });
    }
    match level.get() {
        0 => Some(Reason::OptLevel {
            needs: "merging".into(),
            level: 0,
        }),
        1 => {
            let outputs = work.node(p).dag.outputs.len() as u32;
            let shared = (0..outputs).any(|o| work.used_outside(Src::Op { node: p, output: o }, c));
            shared.then(|| Reason::OptLevel {
                needs: "keeping an intermediate in memory for another reader (opt_level 2)".into(),
                level: 1,
            })
        }
        _ => None,
    }
}

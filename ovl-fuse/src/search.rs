//! The search: which [`Strategy`] is tried on which pair, in what order, and what is reported
//! when every way is refused.
//!
//! Each step finds one merge and makes it; the next step starts over on the changed graph
//! (a merge can change another pair's verdict: index substitution removes paths, and a
//! producer with fewer readers is cheaper to recompute). One step tries, in this order:
//!
//! 1. every producer -> consumer pair, from the outputs towards the inputs (as in the
//!    original): a hand-over in a register ([`Vertical`]); when the producer's writes rule it
//!    out, the consumer as an epilogue of the producer's row loop ([`Epilogue`], level 3);
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
}

/// The state of the search over one graph.
pub(crate) struct Search<'a> {
    pub work: Work,
    level: OptLevel,
    /// The original operators' names, for the labels of merged ones.
    originals: &'a [String],
    /// Why each producer -> consumer pair of live nodes was refused, since the last merge.
    pub refused: HashMap<(usize, usize), Refused>,
    /// Sibling pairs whose merged operator failed validation.
    siblings_blocked: HashSet<(usize, usize)>,
}

impl<'a> Search<'a> {
    pub fn new(work: Work, level: OptLevel, originals: &'a [String]) -> Search<'a> {
        Search {
            work,
            level,
            originals,
            refused: HashMap::new(),
            siblings_blocked: HashSet::new(),
        }
    }

    /// Makes merges until none is left; returns them in the order made.
    pub fn run(&mut self) -> Result<Vec<Merge>, FuseError> {
        let mut merges = Vec::new();
        while let Some(m) = self.step()? {
            merges.push(m);
            self.refused.clear();
        }
        Ok(merges)
    }

    /// Whether strategy `S` runs at the level in force.
    fn enabled<S: Strategy>(&self) -> bool {
        self.level.get() >= S::MIN_LEVEL
    }

    /// Finds and makes one merge (see the module's documentation).
    fn step(&mut self) -> Result<Option<Merge>, FuseError> {
        let order = self.work.topological_order()?;
        // 1. Hand-overs in a register (or epilogues), from the outputs towards the inputs.
        let mut substitutable: Vec<(usize, usize, Reason)> = Vec::new();
        for &c in order.iter().rev() {
            for p in self.work.producers(c) {
                if self.refused.contains_key(&(p, c)) {
                    continue;
                }
                if let Some(r) = gate(&self.work, p, c, self.level) {
                    self.refuse(p, c, r, Vec::new());
                    continue;
                }
                // `[rows]` and `[rows, 1]` are the same workers: one shape for both.
                self.work.rebase(p, c);
                match Vertical.plan(&self.work, p, c) {
                    Ok(plan) => match Vertical.apply(&mut self.work, p, c, plan, self.originals) {
                        Ok(m) => return Ok(Some(m)),
                        Err(r) => self.refuse(p, c, r, Vec::new()),
                    },
                    Err(r @ (Reason::ReadsDiffer | Reason::WouldCreateCycle { .. })) => {
                        substitutable.push((p, c, r));
                    }
                    Err(r) => {
                        let mut also = Vec::new();
                        if self.enabled::<Epilogue>() {
                            match Epilogue.attempt(&mut self.work, p, c, self.originals) {
                                Ok(m) => return Ok(Some(m)),
                                Err(e) => also.push((MergeKind::Epilogue, e)),
                            }
                        }
                        self.refuse(p, c, r, also);
                    }
                }
            }
        }
        // 2. Index substitution.
        let mut loopable: Vec<(usize, usize)> = Vec::new();
        for (p, c, first) in substitutable {
            match Substitution.attempt(&mut self.work, p, c, self.originals) {
                Ok(m) => return Ok(Some(m)),
                // A cycle is the first reason a register hand-over failed.
                Err(r) if matches!(first, Reason::WouldCreateCycle { .. }) => {
                    self.refuse(p, c, first, vec![(MergeKind::Inlined, r)]);
                }
                Err(r) => {
                    loopable.push((p, c));
                    self.refuse(p, c, r, Vec::new());
                }
            }
        }
        // 3. Siblings.
        if self.level.get() >= 3 {
            if let Some(m) = self.siblings(&order)? {
                return Ok(Some(m));
            }
        }
        // 4. Consumers looped inside the workers of a reduction.
        if self.enabled::<Looped>() {
            for (p, c) in loopable {
                match Looped.attempt(&mut self.work, p, c, self.originals) {
                    Ok(m) => return Ok(Some(m)),
                    Err(r) => {
                        if let Some(refused) = self.refused.get_mut(&(p, c)) {
                            refused.also.push((MergeKind::Looped, r));
                        }
                    }
                }
            }
        }
        Ok(None)
    }

    fn refuse(&mut self, p: usize, c: usize, reason: Reason, also: Vec<(MergeKind, Reason)>) {
        self.refused.insert((p, c), Refused { reason, also });
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

/// The refusal due to the operators' kinds (a library call is a boundary) or the optimization
/// level alone, if any.
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

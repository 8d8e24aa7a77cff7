//! The cost of one worker of an operator, in expressions run: what the runtimes use to decide
//! whether a kernel is worth splitting over threads (the C++ runtime with the symbol values
//! of a run, the interpreter with none). The work of each op in operation units, for the cost
//! models of fusion, is the op table's cost column ([`crate::ops::OpInfo::cost`]).

use crate::dtype::Literal;
use crate::intervals::Intervals;
use crate::ir;
use crate::typed::{Inst, Kernel, ValueId};

/// A rough cost of one worker: each expression counts once per run of the blocks around it, a
/// loop by its trip count where [`Intervals`] bounds it, a loop `0..s` over the value of a
/// symbol (a size given at run time) by that value, any other loop (a `while`, bounds the
/// worker computes from data) as [`UNKNOWN_TRIPS`] iterations. A softmax worker over a row of
/// 65536 costs about a million, so 64 such workers run on every core.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerCost {
    /// `coefficient × Π value of symbol s`, summed.
    terms: Vec<(u64, Vec<u32>)>,
}

/// How often a loop whose trip count is not known runs, for [`WorkerCost`].
pub const UNKNOWN_TRIPS: u64 = 64;

impl WorkerCost {
    /// The cost of a worker of `dag` (validated; symbolic sizes allowed).
    pub fn of(dag: &ir::ExpressionDag) -> WorkerCost {
        // A library call costs what its reference program does.
        WorkerCost::of_kernel(&Kernel::from_validated(&crate::library::expand(dag)))
    }

    /// The cost of a worker of `kernel`.
    pub fn of_kernel(kernel: &Kernel) -> WorkerCost {
        /// A loop's iterations: a count, or the value of a symbol.
        #[derive(Clone, Copy)]
        enum Trips {
            Known(u64),
            Symbol(u32),
        }
        let iv = Intervals::of(kernel);
        let inst = |id: ValueId| kernel.exprs.get(id as usize).map(|x| &x.inst);
        let mut open: Vec<Trips> = Vec::new();
        let mut terms: std::collections::BTreeMap<Vec<u32>, u64> = Default::default();
        for (i, x) in kernel.exprs.iter().enumerate() {
            match x.inst {
                Inst::Range {
                    start, end, step, ..
                } => open.push(match (inst(start), inst(end), inst(step)) {
                    (
                        Some(Inst::Const(Literal::Int(0))),
                        Some(&Inst::Symbol { symbol }),
                        Some(Inst::Const(Literal::Int(1))),
                    ) => Trips::Symbol(symbol),
                    _ => Trips::Known(
                        iv.trips(i)
                            .map_or(UNKNOWN_TRIPS, |t| u64::try_from(t).unwrap_or(u64::MAX)),
                    ),
                }),
                Inst::WhileBegin { .. } => open.push(Trips::Known(UNKNOWN_TRIPS)),
                Inst::EndRange { .. } | Inst::WhileEnd { .. } => {
                    open.pop();
                }
                _ => {}
            }
            let mut coefficient = 1u64;
            let mut symbols = Vec::new();
            for t in &open {
                match *t {
                    Trips::Known(n) => coefficient = coefficient.saturating_mul(n),
                    Trips::Symbol(s) => symbols.push(s),
                }
            }
            symbols.sort_unstable();
            let c = terms.entry(symbols).or_default();
            *c = c.saturating_add(coefficient);
        }
        WorkerCost {
            terms: terms.into_iter().map(|(s, c)| (c, s)).collect(),
        }
    }

    /// The cost when the symbols have `values` (a missing value counts as [`UNKNOWN_TRIPS`]).
    pub fn at(&self, values: &[u64]) -> u64 {
        let value = |s: &u32| values.get(*s as usize).copied().unwrap_or(UNKNOWN_TRIPS);
        self.terms
            .iter()
            .map(|(c, syms)| syms.iter().map(value).fold(*c, u64::saturating_mul))
            .fold(0u64, u64::saturating_add)
            .max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::WorkerCost;
    use crate::fixtures;

    #[test]
    fn a_worker_costs_its_loops_trip_counts() {
        let cost = |dag| WorkerCost::of(&dag).at(&[]);
        // No loop: one per expression.
        let flat = fixtures::add_2d(4, 4);
        assert_eq!(cost(flat.clone()), flat.expressions.len() as u64);
        // A counted loop: the expressions in it count once per iteration.
        let cumsum = |cols| cost(fixtures::cumsum(4, cols, 1));
        let (c100, c1000, c2000) = (cumsum(100), cumsum(1000), cumsum(2000));
        let per_iteration = (c2000 - c1000) / 1000;
        assert!(per_iteration >= 4, "{c100} {c1000} {c2000}");
        assert_eq!(c2000 - c1000, 1000 * per_iteration);
        assert_eq!(c1000 - c100, 900 * per_iteration);
        // A step of 2 runs half as many iterations.
        assert_eq!(cost(fixtures::cumsum(4, 2000, 2)) - cumsum(1000), 0);
        // A while loop counts as 64 iterations.
        let collatz = fixtures::collatz(16);
        assert!(cost(collatz) > 64);
        // A loop over a symbol's value counts that value, given when the kernel runs.
        let looped = WorkerCost::of(&fixtures::sym_symbol_loop(5));
        let (a, b, c) = (looped.at(&[10]), looped.at(&[1010]), looped.at(&[2010]));
        assert!(b - a >= 1000, "{a} {b} {c}");
        assert_eq!(c - b, b - a);
        assert_eq!(looped.at(&[]), looped.at(&[64]));
    }
}

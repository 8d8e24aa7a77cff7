//! The cost model of index substitution: how much work recomputing a producer at its reads adds,
//! against the memory traffic of storing the intermediate and loading it back.
//!
//! Work is counted in *operation units*, the op table's cost column
//! ([`ovl_ir::ops::OpInfo::cost`]: a cheap arithmetic operation 1, a transcendental function 8,
//! ...). Each expression counts once per run of its enclosing loops (their trip counts, from
//! `ovl_ir::intervals`, multiply). Storing or loading one element costs
//! [`MEMORY_UNITS`].
//!
//! With `R` the number of times each element of the intermediate is recomputed (the
//! consumer's workers times its reads of the intermediate per worker, loop trip counts
//! included, divided by the producer's workers) and `W` the producer's work per element:
//! - `R <= 1` (each element computed at most once, e.g. an elementwise producer, a transpose):
//!   always inline;
//! - otherwise inline when the work after, `R * W`, is at most the cost it replaces: the `R`
//!   loads of the element, plus, when the producer disappears (no other reader), its work `W`
//!   and its store.
//!
//! So a cheap producer read by a few workers (a squared bias vector broadcast over 4 rows, a
//! 3-point stencil) is inlined, and a row reduction read by every element of its row (a row
//! maximum recomputed 4096 times per row) is not. Whatever the model says, no original
//! operator ends up computed more than [`MOST_COMPUTED`] times in the fused graph.

use ovl_ir::intervals::Intervals;
use ovl_ir::ir::Op;
use ovl_ir::ops;
use ovl_ir::typed::{Inst, Kernel};

/// The cost of storing or loading one element, in operation units.
pub(crate) const MEMORY_UNITS: f64 = 8.0;

/// The most times index substitution lets the fused graph compute an original operator (each
/// copy into a consumer while the producer stays for another reader adds one). Copies that
/// end in one kernel (a layer norm's centred values, recomputed by the loops of its forward
/// and backward) pay for themselves; without a bound, copies of copies along a recurrence
/// (an unrolled LSTM's forward values, read by two kernels each step) grew with its length:
/// quadratic work, kernels and fusion time.
pub(crate) const MOST_COMPUTED: u32 = 4;

/// The work of one execution of an expression, in operation units: the op table's
/// [`ovl_ir::ops::OpInfo::cost`].
pub(crate) fn weight(op: Op) -> f64 {
    ops::info(op).map_or(1.0, |row| f64::from(row.cost))
}

/// How many times expression `i` runs per worker: the product of the trip counts of its
/// enclosing loops (`None` inside a while loop or a loop without a bound).
pub(crate) fn runs_per_worker(kernel: &Kernel, iv: &Intervals, i: usize) -> Option<f64> {
    let mut factor = 1.0f64;
    for l in kernel.enclosing_loops(i) {
        if !matches!(kernel.exprs[l as usize].inst, Inst::Range { .. }) {
            return None;
        }
        factor *= iv.trips(l as usize)? as f64;
    }
    Some(factor)
}

/// The work of the expressions of `kernel` marked in `part`, per worker (`None` when a loop
/// has no bound).
pub(crate) fn work(kernel: &Kernel, part: &[bool], iv: &Intervals) -> Option<f64> {
    let mut total = 0.0;
    for (i, e) in kernel.exprs.iter().enumerate() {
        if !part.get(i).copied().unwrap_or(false) {
            continue;
        }
        let w = weight(e.inst.op());
        if w > 0.0 {
            total += w * runs_per_worker(kernel, iv, i)?;
        }
    }
    Some(total)
}

/// The verdict of the cost model for one handed-over output.
#[derive(Clone, Debug)]
pub(crate) struct Verdict {
    /// How many times each element is computed after inlining.
    pub recompute: f64,
    /// The producer's work per element.
    pub work: f64,
    /// The cost per element after inlining: `recompute * work`.
    pub fused: f64,
    /// The cost per element it replaces: the loads of the element (`recompute` of them), and
    /// when the producer goes away its work and its store.
    pub unfused: f64,
}

impl Verdict {
    /// The cost model's verdict for recomputing an element `recompute` times, of a producer
    /// doing `work` per element, which goes away (`producer_stays == false`) or not.
    pub fn new(recompute: f64, work: f64, producer_stays: bool) -> Verdict {
        let loads = recompute * MEMORY_UNITS;
        let unfused = if producer_stays {
            loads
        } else {
            work + MEMORY_UNITS + loads
        };
        Verdict {
            recompute,
            work,
            fused: recompute * work,
            unfused,
        }
    }

    /// Whether inlining pays.
    pub fn accepts(&self) -> bool {
        self.recompute <= 1.0 + 1e-9 || self.fused <= self.unfused
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elementwise_always_and_row_reductions_never() {
        assert!(Verdict::new(1.0, 100.0, true).accepts());
        // A squared vector broadcast over 4 rows: 4 reads and multiplications per element
        // against a store and 4 loads.
        assert!(Verdict::new(4.0, 2.0, false).accepts());
        // An exp broadcast over 64 rows is not worth it, nor over 4 when the producer stays.
        assert!(!Verdict::new(64.0, 9.0, false).accepts());
        assert!(!Verdict::new(4.0, 9.0, true).accepts());
        // A row maximum of 4096 elements recomputed for each of them.
        assert!(!Verdict::new(4096.0, 2.0 * 4096.0, false).accepts());
        assert_eq!(weight(Op::Exp), 8.0);
        assert_eq!(weight(Op::Const), 0.0);
    }
}

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
//!   always inline, unless the producer stays for another reader and `W` is more than
//!   [`DUPLICATE_WORK`] (then it is weighed like the rest); and with the producer staying, the
//!   work per element the consumer so repeats, its earlier such copies included, stays within
//!   [`DUPLICATE_WORK`]; and where a boundary (a library call) between the two keeps them
//!   apart for good, the copy loads no more elements of tensors the consumer does not read
//!   ([`loads`]) than it saves: the element's loads, and its store where no other reader keeps
//!   it (both checked where substitutions are planned, `substitute::check`);
//! - otherwise inline when the work after, `R * W`, is at most the cost it replaces: the `R`
//!   loads of the element, plus, when the producer disappears (no other reader), its work `W`
//!   and its store;
//! - memory access: a producer's reads inside loops that neighbouring workers make at
//!   neighbouring elements (`x[k, p1]`: a column reduction, a product's `b[k, j]`) cost an
//!   element each where it runs alone. When a read of the consumer does not move the producer's
//!   innermost position with its own (a transpose: the consumer's `[p1, p0]`), neighbouring
//!   workers of the fused kernel recompute producer workers far apart, and each of those reads
//!   costs a cache line ([`LINE_ELEMENTS`] elements) instead: added to the work after, this
//!   refuses even an element computed once (a product read through a transpose ran 16x
//!   slower fused than unfused).
//!
//! So a cheap producer read by a few workers (a squared bias vector broadcast over 4 rows, a
//! 3-point stencil) is inlined, and a row reduction read by every element of its row (a row
//! maximum recomputed 4096 times per row) is not. Whatever the model says, no original
//! operator ends up computed more than [`MOST_COMPUTED`] times in the fused graph.

use ovl_ir::intervals::Intervals;
use ovl_ir::ir::{Op, TensorKind};
use ovl_ir::motion::{Motion, Var};
use ovl_ir::ops;
use ovl_ir::typed::{Inst, Kernel};

/// The cost of storing or loading one element, in operation units.
pub(crate) const MEMORY_UNITS: f64 = 8.0;

/// Elements per cache line (64 bytes of f32). A read that neighbouring workers make at
/// neighbouring elements (`x[k, p1]` in a loop over `k`) costs an element's load for each of
/// them: the CPU runs such workers in lockstep, vectorized, and a GPU coalesces their loads.
/// Made by workers that are not neighbours, each such read costs a whole line.
pub(crate) const LINE_ELEMENTS: f64 = 16.0;

/// The most times index substitution lets the fused graph compute an original operator (each
/// copy into a consumer while the producer stays for another reader adds one). Copies that
/// end in one kernel (a layer norm's centred values, recomputed by the loops of its forward
/// and backward) pay for themselves; without a bound, copies of copies along a recurrence
/// (an unrolled LSTM's forward values, read by two kernels each step) grew with its length:
/// quadratic work, kernels and fusion time.
pub(crate) const MOST_COMPUTED: u32 = 4;

/// The most work per element (operation units) that an element computed once may repeat in a
/// consumer while its producer stays for another reader: a few operations, not a loop (a
/// product's element of 512 multiply-adds computed in two kernels doubled the graph's time).
/// Also the most a consumer so repeats in all, its copies of several producers summed:
/// one step's LSTM cell state (about 40 units) copied into the next step's kernel, not a chain
/// of them (the last three kernels of a 35-step layer recomputed every step, and the layer's
/// forward took 23-28 ms at the default level against 13-15 ms at level 1, Zen 5).
pub(crate) const DUPLICATE_WORK: f64 = 64.0;

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

/// The loads of input elements among the expressions of `kernel` marked in `part`, per worker
/// (loop trips multiplied), counting only the inputs `counted` selects by input slot (`None`
/// when a loop has no bound).
pub(crate) fn loads(
    kernel: &Kernel,
    part: &[bool],
    iv: &Intervals,
    counted: impl Fn(u32) -> bool,
) -> Option<f64> {
    let mut total = 0.0;
    for i in 0..kernel.exprs.len() {
        if !part.get(i).copied().unwrap_or(false) {
            continue;
        }
        if kernel.input_read(i).is_some_and(&counted) {
            total += runs_per_worker(kernel, iv, i)?;
        }
    }
    Some(total)
}

/// The innermost workgroup axis with more than one worker (neighbouring workers, in the
/// order workers are numbered, differ in it); `None` when there is none.
pub(crate) fn innermost_axis(kernel: &Kernel) -> Option<usize> {
    kernel
        .workgroup
        .iter()
        .rposition(|d| d.known().is_none_or(|n| n > 1))
}

/// The reads inside loops, among the expressions of `kernel` marked in `part`, that
/// neighbouring workers make at neighbouring elements: the last index moves with the innermost
/// position ([`innermost_axis`]) by ±1 and no other index depends on it. Per worker, loop trips
/// multiplied (`None` when a loop has no bound); 0 for a single worker.
pub(crate) fn lockstep_reads(kernel: &Kernel, part: &[bool], iv: &Intervals) -> Option<f64> {
    let Some(inner) = innermost_axis(kernel) else {
        return Some(0.0);
    };
    let mut motion = Motion::new(kernel);
    let mut total = 0.0;
    for (i, x) in kernel.exprs.iter().enumerate() {
        let Inst::Read { tensor, indices } = &x.inst else {
            continue;
        };
        if !part.get(i).copied().unwrap_or(false)
            || tensor.kind != TensorKind::Input
            || kernel.enclosing_loops(i).next().is_none()
        {
            continue;
        }
        if motion.follows(indices, Var::Position(inner)) {
            total += runs_per_worker(kernel, iv, i)?;
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
    /// Whether `fused` includes reads made a cache line apart ([`Verdict::strided`]).
    pub strided: bool,
    /// Whether the producer stays for another reader (its work is then done twice).
    pub stays: bool,
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
            strided: false,
            stays: producer_stays,
        }
    }

    /// The verdict when the recomputation, unlike the producer, makes its `reads` lockstep
    /// reads per element ([`lockstep_reads`]) from workers that are not neighbours: each costs
    /// a cache line instead of an element.
    pub fn strided(mut self, reads: f64) -> Verdict {
        if reads > 0.0 {
            self.fused += self.recompute * reads * MEMORY_UNITS * (LINE_ELEMENTS - 1.0);
            self.strided = true;
        }
        self
    }

    /// Whether inlining pays.
    pub fn accepts(&self) -> bool {
        let once = self.recompute <= 1.0 + 1e-9
            && !self.strided
            && (!self.stays || self.work <= DUPLICATE_WORK);
        once || self.fused <= self.unfused
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elementwise_always_and_row_reductions_never() {
        assert!(Verdict::new(1.0, 100.0, false).accepts());
        // Computed once more beside a producer that stays: a few operations, not a loop.
        assert!(Verdict::new(1.0, 20.0, true).accepts());
        assert!(!Verdict::new(1.0, 3.0 * 512.0, true).accepts());
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

    #[test]
    fn strided_loop_reads_refuse_even_an_element_computed_once() {
        // A product's element (64 multiply-adds, 64 reads of `b[k, j]`) read once, transposed.
        let once = Verdict::new(1.0, 3.0 * 64.0, false);
        assert!(once.accepts());
        assert!(!once.clone().strided(64.0).accepts());
        // Without lockstep reads (an elementwise producer) a transpose costs nothing more.
        assert!(once.strided(0.0).accepts());
    }

    #[test]
    fn lockstep_reads_count_loop_reads_that_follow_the_innermost_position() {
        use ovl_ir::fixtures;
        // `gate_products`: per worker 4 loops of 5 iterations, each reading `a[i, q]` (not
        // moving with the innermost position p1) and `w[q, p1 + g * h]` (moving with it).
        let dag = fixtures::gate_products(3, 5, 70);
        let kernel = Kernel::decode(&dag).unwrap();
        let iv = Intervals::of(&kernel);
        let all = vec![true; kernel.exprs.len()];
        assert_eq!(lockstep_reads(&kernel, &all, &iv), Some(20.0));
        // `matmul` over [3, 2] workers: 4 iterations reading `b[q, j]`.
        let dag = fixtures::matmul(3, 4, 2);
        let kernel = Kernel::decode(&dag).unwrap();
        let iv = Intervals::of(&kernel);
        let all = vec![true; kernel.exprs.len()];
        assert_eq!(lockstep_reads(&kernel, &all, &iv), Some(4.0));
    }
}

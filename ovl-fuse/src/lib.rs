//! The operator merger of ovl: many small operators in, few kernels out.
//!
//! [`optimize`] takes an [`ir::OperatorDag`] and merges operators whose workgroups and index
//! patterns allow one worker to hand a value to the next in a register instead of memory
//! (vertical fusion); where they do not, a producer may be recomputed inside its consumer at
//! every read (index substitution: broadcasts, transposes, stencils, reads inside loops and
//! reductions, different workgroups) when a cost model finds it pays; and, at the highest
//! level, independent operators over the same workgroup share a kernel (horizontal fusion). [`fuse`] does the same and keeps the graph from before, so
//! that both can be drawn ([`Fusion::to_dot`]) and every decision explained
//! ([`FusionReport`]).
//!
//! - `search`: which way of merging is tried on which pair, in what order; `strategy`: each
//!   way of merging a producer into its consumer as a `Strategy` (a plan or the [`Reason`] it
//!   is refused, then its application).
//! - `ovl_ir::pattern`: index patterns as canonical affine maps of the worker position (shared
//!   with the CUDA emitter's vector lanes).
//! - `legality`: the rules of a hand-over in a register, each refusal a [`Reason`].
//! - `merge` / `horizontal`: splicing expression DAGs.
//! - `substitute`: recomputing a producer at the consumer's reads (what is inverted, what is
//!   proved, what is refused, with `ovl_ir::intervals`); `cost`: the cost model; `rebase`: workgroups that differ only by axes of extent 1; `looped`: a consumer
//!   run as a loop inside the worker of the reduction that feeds it; `reuse`: a value two loops
//!   of a worker compute kept in a row buffer by the first.
//! - [`report`]: what was merged and what was not, and why.
//! - `dot`: Graphviz output.
//!
//! The merger is deterministic: the same graph always fuses the same way, so the fused graph's
//! canonical hash ([`ovl_ir::hash::canonical_hash_operator_dag`]) is a stable cache key.
//!
//! ```
//! use ovl_ir::ir;
//! // An empty graph fuses to itself.
//! let dag = ir::OperatorDag { version: ovl_ir::IR_VERSION, ..Default::default() };
//! let fusion = ovl_fuse::fuse(&dag, ovl_fuse::OptLevel::FULL).unwrap();
//! assert_eq!(fusion.report.kernels_after, 0);
//! assert!(fusion.to_dot().contains("digraph"));
//! ```

#![warn(missing_docs)]

mod cache;
mod column_pass;
mod cost;
mod dot;
mod epilogue;
mod error;
pub mod gemm_pair;
mod graph;
mod horizontal;
mod legality;
mod looped;
mod memory;
mod merge;
mod rebase;
pub mod report;
mod reuse;
mod search;
mod stack;
mod strategy;
mod substitute;
mod target;

pub use cache::{cache as fusion_cache, FUSION_VERSION};
pub use dot::{render_dot, render_dot_bytes, to_dot, to_dot_pair, ImageFormat};
pub use error::FuseError;
pub use gemm_pair::{EpiloguePair, NotPaired, NotPairedReason};
pub use ovl_ir::pattern::{Affine, IndexPattern};
pub use ovl_ir::unstack::cut_offsets;
pub use report::NotEpilogue;
pub use report::{
    FusionReport, Merge, MergeKind, NotStacked, NotStackedReason, Reason, Refusal, RowBuffer,
    SplitPass, Stacked,
};
pub use target::FusionTarget;

use graph::{Src, Work};
use ovl_ir::ir;
use std::collections::BTreeSet;
use std::fmt;
use std::path::Path;

/// How hard the merger works, like the original's `opt_level`.
///
/// - 0: no merging; every operator is one kernel.
/// - 1: a producer merges into its consumer when that consumer is the only reader of its
///   outputs and none of them is a requested result.
/// - 2: also producers with several consumers or requested intermediates (they stay in memory
///   for the others), and consumers fed by several producers.
/// - 3 (the default): also independent operators over the same workgroup (horizontal fusion),
///   consumers of a reduction run as loops inside its workers (a row statistic and its
///   elementwise use in one kernel), and elementwise consumers run inside the loop in which
///   their producer writes each row (`layernorm(x) * gamma + beta` in one kernel).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OptLevel(u8);

impl OptLevel {
    /// No merging.
    pub const NONE: OptLevel = OptLevel(0);
    /// Everything the merger can do.
    pub const FULL: OptLevel = OptLevel(3);

    /// The level `level`, clamped to 0..=3 (as compilers treat `-O4`).
    pub const fn new(level: u8) -> OptLevel {
        OptLevel(if level > 3 { 3 } else { level })
    }

    /// The level as a number.
    pub const fn get(self) -> u8 {
        self.0
    }
}

impl Default for OptLevel {
    /// [`OptLevel::FULL`].
    fn default() -> Self {
        OptLevel::FULL
    }
}

impl From<u8> for OptLevel {
    fn from(level: u8) -> Self {
        OptLevel::new(level)
    }
}

impl fmt::Display for OptLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "opt_level {}", self.0)
    }
}

/// An operator DAG before and after fusion, with the report of what happened.
#[derive(Clone, Debug)]
pub struct Fusion {
    /// The graph as built from the lazy handles.
    pub before: ir::OperatorDag,
    /// The fused graph (what the executor runs).
    pub after: ir::OperatorDag,
    /// Every merge and every refusal, with reasons.
    pub report: FusionReport,
}

impl Fusion {
    /// The DOT text of the graph before fusion.
    pub fn before_dot(&self) -> String {
        to_dot(&self.before, "before fusion")
    }

    /// The DOT text of the graph after fusion; an edge between two kernels that were not
    /// merged is dashed and carries the reason.
    pub fn after_dot(&self) -> String {
        dot::to_dot_noted(&self.after, "after fusion", &self.notes())
    }

    /// One DOT picture with the graph before and after fusion side by side (with the reasons
    /// on the edges that stayed, as in [`Fusion::after_dot`]).
    pub fn to_dot(&self) -> String {
        dot::to_dot_pair_noted(&self.before, &self.after, &self.notes())
    }

    fn notes(&self) -> Vec<dot::EdgeNote> {
        // A stacked product's note first: the edge into it is also a library call's refusal.
        let stacked = self.report.stacked.iter().map(|s| {
            (
                s.operand_kernel,
                s.kernel,
                format!(
                    "stacked: {} products sharing {}",
                    s.products.len(),
                    s.shared
                ),
            )
        });
        // An epilogue pair's note follows the reason its edge was not merged.
        let pair_of = |from: usize, to: usize| {
            self.report
                .epilogue_pairs
                .iter()
                .find(|p| (p.gemm, p.consumer) == (from, to))
                .map(|p| format!("epilogue pair: by blocks of its {} rows", p.rows))
        };
        let refused = self.report.refusals.iter().map(|r| {
            let (from, to) = (r.producer_kernel, r.consumer_kernel);
            let note = match pair_of(from, to) {
                Some(pair) => format!("not merged: {}; {pair}", r.reason),
                None => format!("not merged: {}", r.reason),
            };
            (from, to, note)
        });
        let paired = self.report.epilogue_pairs.iter().filter_map(|p| {
            let refused = self
                .report
                .refusals
                .iter()
                .any(|r| (r.producer_kernel, r.consumer_kernel) == (p.gemm, p.consumer));
            let note = pair_of(p.gemm, p.consumer).filter(|_| !refused)?;
            Some((p.gemm, p.consumer, note))
        });
        stacked.chain(refused).chain(paired).collect()
    }

    /// Renders [`Fusion::to_dot`] into `path` (SVG or PNG) with Graphviz's `dot`; a clear
    /// [`FuseError::DotNotFound`] when it is not installed.
    pub fn render(&self, format: ImageFormat, path: &Path) -> Result<(), FuseError> {
        render_dot(&self.to_dot(), format, path)
    }
}

/// Whether [`optimize`] and its kin finish with [`reuse_rows`] (at opt_level 1 and up).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RowReuse {
    /// Keep values a worker's later loop would compute again in row buffers, within the
    /// budget (the default: [`RowBudget::PORTABLE`]).
    Apply(RowBudget),
    /// Leave kernels as merged: for graphs traced at stand-in sizes (a polymorphic export
    /// traces at three sizes and unifies them), where a loop's length may become a size known
    /// only at run time, which a row buffer cannot have; apply [`reuse_rows`] after unifying.
    Skip,
}

impl Default for RowReuse {
    fn default() -> Self {
        RowReuse::Apply(RowBudget::PORTABLE)
    }
}

/// How much worker-local memory [`reuse_rows`] may spend: per row buffer, and for all local
/// tensors of a worker (the operator's own included). A row longer than a buffer computes its
/// values again. It also says, per target, whether fusion ends by splitting column kernels'
/// elementwise passes off (`column_pass`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RowBudget {
    /// The largest row buffer, in bytes per worker.
    pub buffer_bytes: u64,
    /// The most local memory per worker an operator may have after row reuse.
    pub locals_bytes: u64,
    /// Whether a column kernel's elementwise pass down a large strided axis becomes a kernel of
    /// its own that runs in memory order (before row reuse; see `column_pass`): for the CPU,
    /// whose blocked column workers walk such a pass one page per row; not for a GPU, whose
    /// cooperative column layout writes a warp's neighbouring columns together.
    pub split_column_passes: bool,
}

impl RowBudget {
    /// For kernels that may run on a GPU, which reserves local memory for every thread that
    /// can be resident at once: 16 KiB per buffer (4096 f32; about 4 GiB reserved on a GPU of
    /// 132 multiprocessors of 2048 threads), 64 KiB of locals per worker in all.
    pub const PORTABLE: RowBudget = RowBudget {
        buffer_bytes: ovl_ir::limits::GPU_ROW_BUFFER_BYTES,
        locals_bytes: ovl_ir::limits::CUDA_LOCAL_BYTES,
        split_column_passes: false,
    };
    /// For kernels compiled for the CPU: 256 KiB per buffer and in all (rows of up to 65536
    /// f32, a vocabulary-sized softmax; the C++ backend's limit for a worker's locals, which
    /// live on the worker thread's stack). Such a buffer stays in a core's L2 cache, so
    /// reading it back is still cheaper than computing an `exp` again.
    pub const CPU: RowBudget = RowBudget {
        buffer_bytes: ovl_ir::limits::CPU_LOCALS_BYTES,
        locals_bytes: ovl_ir::limits::CPU_LOCALS_BYTES,
        split_column_passes: true,
    };
}

/// Keeps, in every operator of `dag`, values that a later loop of a worker would compute
/// again in row buffers filled by the earlier loop (loops with constant bounds `0..n`, buffers
/// within `budget`; results bit for bit unchanged). Returns what was kept, per buffer.
///
/// ```
/// use ovl_ir::ir;
/// let mut dag = ir::OperatorDag { version: ovl_ir::IR_VERSION, ..Default::default() };
/// assert!(ovl_fuse::reuse_rows(&mut dag, ovl_fuse::RowBudget::CPU).is_empty());
/// ```
pub fn reuse_rows(dag: &mut ir::OperatorDag, budget: RowBudget) -> Vec<RowBuffer> {
    let mut kept = Vec::new();
    for op in &mut dag.operators {
        if let Some((reused, buffers)) = reuse::reuse_rows(op, budget) {
            *op = reused;
            kept.extend(buffers);
        }
    }
    kept
}

/// Fuses `dag` at `level` (row buffers within [`RowBudget::PORTABLE`]) and returns it together
/// with the graph before fusion.
pub fn fuse(dag: &ir::OperatorDag, level: OptLevel) -> Result<Fusion, FuseError> {
    fuse_with(dag, level, RowReuse::default())
}

/// [`fuse`], with or without [`reuse_rows`] at the end, within the given budget.
pub fn fuse_with(
    dag: &ir::OperatorDag,
    level: OptLevel,
    reuse: RowReuse,
) -> Result<Fusion, FuseError> {
    fuse_for(dag, level, reuse, &FusionTarget::default())
}

/// [`fuse_with`] for the machine `target` describes (the constants its rules are tuned by;
/// the other entry points take [`FusionTarget::default`], the CPU).
pub fn fuse_for(
    dag: &ir::OperatorDag,
    level: OptLevel,
    reuse: RowReuse,
    target: &FusionTarget,
) -> Result<Fusion, FuseError> {
    let (after, _, report) = run_replanning(dag, level, reuse, false, target)?;
    Ok(Fusion {
        before: dag.clone(),
        after,
        report,
    })
}

/// Fuses `dag` at `level`, then applies [`reuse_rows`] (from level 1, within
/// [`RowBudget::PORTABLE`]): the fused graph (valid IR, same graph inputs and requested
/// outputs in the same order) and the report.
///
/// Fails only when `dag` is not valid IR, or on an internal error (an invalid result).
pub fn optimize(
    dag: ir::OperatorDag,
    level: OptLevel,
) -> Result<(ir::OperatorDag, FusionReport), FuseError> {
    let (fused, _, report) = run(&dag, level, RowReuse::default())?;
    Ok((fused, report))
}

/// Like [`optimize`] without the report, remembering results in memory: evaluating the same
/// graph again (a training loop) costs a hash of the graph instead of a new search. The
/// remembered graphs get the source locations of the graph passed in.
pub fn optimize_cached(
    dag: ir::OperatorDag,
    level: OptLevel,
) -> Result<ir::OperatorDag, FuseError> {
    cache::optimize_cached(dag, level, RowReuse::default())
}

/// [`optimize_cached`], with or without [`reuse_rows`] at the end (see [`RowReuse`]).
pub fn optimize_cached_with(
    dag: ir::OperatorDag,
    level: OptLevel,
    reuse: RowReuse,
) -> Result<ir::OperatorDag, FuseError> {
    cache::optimize_cached(dag, level, reuse)
}

/// The fused graph (with row reuse as `reuse` says, from level 1), for each of its operators
/// the original operator whose source location it carries, and the report.
pub(crate) fn run(
    dag: &ir::OperatorDag,
    level: OptLevel,
    reuse: RowReuse,
) -> Result<(ir::OperatorDag, Vec<usize>, FusionReport), FuseError> {
    run_replanning(dag, level, reuse, false, &FusionTarget::default())
}

/// [`fuse_with`] re-planning every pair at every step instead of keeping the refusals that
/// still hold (the search before it kept them): the same merges in the same order, only
/// slower. For the tests that check exactly that; not for use.
#[doc(hidden)]
pub fn fuse_replanning_every_step(
    dag: &ir::OperatorDag,
    level: OptLevel,
    reuse: RowReuse,
) -> Result<Fusion, FuseError> {
    let (after, _, report) = run_replanning(dag, level, reuse, true, &FusionTarget::default())?;
    Ok(Fusion {
        before: dag.clone(),
        after,
        report,
    })
}

fn run_replanning(
    dag: &ir::OperatorDag,
    level: OptLevel,
    reuse: RowReuse,
    replan_every_step: bool,
    target: &FusionTarget,
) -> Result<(ir::OperatorDag, Vec<usize>, FusionReport), FuseError> {
    ovl_ir::validate::validate_operator_dag(dag)?;
    let mut originals: Vec<String> = dag.operators.iter().map(|o| o.name.clone()).collect();
    let mut work = Work::from_dag(dag)?;
    let stacking = if level.get() >= 1 {
        stack::stack_products(&mut work, &mut originals)?
    } else {
        stack::Stacking::default()
    };
    let mut search = search::Search::new(work, level, &originals);
    search.replan_every_step = replan_every_step;
    let mut report = FusionReport {
        opt_level: level.get(),
        kernels_before: dag.operators.len(),
        merges: search.run()?,
        ..Default::default()
    };
    let work = &search.work;

    // Every remaining producer -> consumer edge, with its reasons.
    let order = work.topological_order()?;
    let mut position = vec![usize::MAX; work.nodes.len()];
    for (k, &n) in order.iter().enumerate() {
        position[n] = k;
    }
    let kernel_of = |n: usize| position[n];
    for &c in &order {
        for p in work.producers(c) {
            let Some(refused) = search.refused.get(&(p, c)).cloned() else {
                return Err(FuseError::Internal(format!(
                    "{} was neither merged into {} nor refused",
                    work.node(p).label,
                    work.node(c).label
                )));
            };
            let tensors: Vec<String> = work
                .node(c)
                .inputs
                .iter()
                .filter(|s| matches!(s, Src::Op { node, .. } if *node == p))
                .map(|&s| work.describe(s))
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            report.refusals.push(Refusal {
                producer: work.node(p).label.clone(),
                consumer: work.node(c).label.clone(),
                tensor: tensors.join(", "),
                reason: refused.reason,
                also: refused.also,
                producer_kernel: kernel_of(p),
                consumer_kernel: kernel_of(c),
            });
        }
    }

    for (mut stacked, node) in stacking.stacks {
        let live = |n: usize| work.nodes.get(n).is_some_and(Option::is_some);
        let operand = match work.nodes.get(node).and_then(Option::as_ref) {
            Some(n) => n.inputs[0],
            None => {
                return Err(FuseError::Internal(format!(
                    "the stacked product of {} was merged away",
                    stacked.products.join(", ")
                )))
            }
        };
        stacked.kernel = kernel_of(node);
        stacked.operand_kernel = match operand {
            Src::Op { node: p, .. } if live(p) => kernel_of(p),
            _ => usize::MAX,
        };
        report.stacked.push(stacked);
    }
    report.not_stacked = stacking.refused;

    let mut fused = work.to_dag()?;
    let mut sources: Vec<usize> = order.iter().map(|&n| work.node(n).source_of).collect();
    if let (true, RowReuse::Apply(budget)) = (level.get() >= 1, reuse) {
        if budget.split_column_passes {
            let splits = column_pass::split_passes(&mut fused);
            if !splits.passes.is_empty() {
                sources = splits.origin.iter().map(|&k| sources[k]).collect();
                let first = |k: usize| splits.first.get(k).copied().unwrap_or(k);
                for r in &mut report.refusals {
                    r.producer_kernel = first(r.producer_kernel);
                    r.consumer_kernel = first(r.consumer_kernel);
                }
                for s in &mut report.stacked {
                    s.kernel = first(s.kernel);
                    s.operand_kernel = first(s.operand_kernel);
                }
                report.split_passes = splits.passes;
            }
        }
        report.row_buffers = reuse_rows(&mut fused, budget);
    }
    ovl_ir::validate::validate_operator_dag(&fused)
        .map_err(|e| FuseError::Internal(format!("the fused graph is invalid: {e}")))?;
    report.kernels_after = fused.operators.len();
    (report.epilogue_pairs, report.not_paired) = gemm_pair::epilogue_pairs(&fused, target);
    Ok((fused, sources, report))
}

//! The fusion report: every merge the optimizer made and every producer -> consumer edge it
//! left alone, with the reason.

pub use crate::gemm_pair::{EpiloguePair, NotPaired, NotPairedReason};
use ovl_ir::pattern::IndexPattern;
use std::fmt;

/// Why a producer was not merged into a consumer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    /// The producer or the consumer is a library call (a GEMM), which runs as a call of its
    /// library: never merged with another operator.
    LibraryCall {
        /// The operator that is one.
        operator: String,
        /// What it calls (`gemm`, `gemm(bᵀ)`, ...).
        call: String,
    },
    /// The producer or the consumer is the cut of a stacked product's result into the
    /// products' results, each a contiguous block: the runner lets their readers read the
    /// stacked result in place and runs no kernel for it, which a merge would turn into
    /// copies (35 slices of 208 KB, 0.6 ms per call of an LSTM layer's forward).
    CutReadInPlace {
        /// The cut.
        operator: String,
    },
    /// The optimization level does not allow this kind of merge.
    OptLevel {
        /// What the merge needs.
        needs: String,
        /// The level in force.
        level: u8,
    },
    /// Merging would put the merged operator both before and after another operator: the
    /// producer feeds `through`, which (directly or not) feeds the consumer.
    WouldCreateCycle {
        /// The operator on the other path.
        through: String,
    },
    /// The producer never writes the tensor.
    NeverWritten {
        /// The producer's output index.
        output: u32,
    },
    /// The producer writes the tensor more than once per worker.
    MultipleWrites {
        /// The producer's output index.
        output: u32,
        /// How many writes.
        count: usize,
    },
    /// The write is inside a staged loop or a branch, so it is not one simple value per worker.
    WriteInControlFlow {
        /// The producer's output index.
        output: u32,
        /// `staged loop`, `while loop` or `branch`.
        region: &'static str,
    },
    /// The write index is not an affine function of the position.
    OpaqueWrite {
        /// The producer's output index.
        output: u32,
        /// The pattern (opaque, with its explanation).
        write: IndexPattern,
    },
    /// Two workers may write the same element.
    WriteNotOneToOne {
        /// The producer's output index.
        output: u32,
        /// The write pattern.
        write: IndexPattern,
    },
    /// Some worker's write may fall outside the tensor (an error the merge must not hide).
    WriteMayBeOutOfBounds {
        /// The producer's output index.
        output: u32,
        /// The write pattern.
        write: IndexPattern,
        /// The tensor's shape.
        shape: Vec<u64>,
    },
    /// A read index in the consumer is not an affine function of the position.
    OpaqueRead {
        /// The write pattern in the producer.
        write: IndexPattern,
        /// The read pattern (opaque, with its explanation).
        read: IndexPattern,
    },
    /// The consumer reads the tensor at an index from which the producer's worker cannot be
    /// found: the write is not an invertible map of the position (each position component in
    /// exactly one index, with coefficient 1 or -1), so the producer cannot be recomputed
    /// at the read.
    NotInvertible {
        /// The producer's output index.
        output: u32,
        /// The write pattern.
        write: IndexPattern,
    },
    /// The producer could fault for some worker: recomputing it at the consumer's reads would
    /// move or multiply the fault, so it keeps its own kernel.
    ProducerMayFault {
        /// What may fault, e.g. "its access %7 may index axis 0 outside its size 5".
        why: String,
    },
    /// A read in the consumer may land on an element the producer does not write (or outside
    /// the tensor, which must fault as before): the producer cannot be recomputed there.
    ReadOutsideWrites {
        /// The producer's output index.
        output: u32,
        /// The write pattern.
        write: IndexPattern,
        /// The read pattern.
        read: IndexPattern,
        /// The tensor axis whose index may leave the written elements.
        axis: usize,
    },
    /// A read of the tensor sits in a loop without a known trip count (a while loop): how
    /// often the producer would be recomputed is unknown.
    UnknownRecomputeCount {
        /// The producer's output index.
        output: u32,
    },
    /// The cost model refuses: recomputing the producer at every read costs more work than the
    /// memory traffic it saves (see the cost model in `ovl-fuse`'s `cost` module).
    TooCostly {
        /// The producer's output index.
        output: u32,
        /// The write pattern.
        write: IndexPattern,
        /// The (first) read pattern.
        read: IndexPattern,
        /// How many times each element would be computed, rounded.
        recompute: u64,
        /// The producer's work per element, in operation units, rounded.
        work: u64,
    },
    /// The cost model refuses: the producer's loops read elements that are neighbours for
    /// neighbouring producer workers (`x[k, p1]`), which the CPU runs in lockstep and the GPU
    /// coalesces; at the consumer's reads neighbouring workers would recompute producer
    /// workers that are not neighbours, so each such read would cost a cache line instead of
    /// an element (see the cost model in `ovl-fuse`'s `cost` module).
    StridedRecompute {
        /// The producer's output index.
        output: u32,
        /// The write pattern.
        write: IndexPattern,
        /// The read whose innermost position does not follow the producer's.
        read: IndexPattern,
        /// The producer's reads per element that are contiguous across its workers, rounded.
        reads: u64,
    },
    /// The graph after the merge is predicted to cost more than before it (`ovl-fuse`'s
    /// `memory` module: work and memory access of whole kernels).
    SlowerFused {
        /// The predicted cost after the merge, in operation units, rounded.
        fused: u64,
        /// Before it.
        unfused: u64,
    },
    /// The producer stays for another reader and its operators are already computed as often
    /// as fusion allows (`ovl-fuse`'s `cost::MOST_COMPUTED`): another copy is refused.
    ComputedTooOften {
        /// How many times the most copied of its operators is computed.
        times: u32,
    },
    /// The producer stays for another reader, and the consumer would repeat more of its
    /// producers' work per element than fusion allows (`ovl-fuse`'s `cost::DUPLICATE_WORK`,
    /// counting the copies it already holds).
    DuplicatesTooMuch {
        /// The work per element it would repeat, in operation units, rounded.
        work: u64,
    },
    /// The producer stays for another reader, a boundary between the two (a library call, or
    /// a cut read in place) keeps them apart for good, and a copy of the producer in the consumer would load more
    /// elements of tensors the consumer does not read than the copy saves (the loads of the
    /// handed-over element, and its store where no other reader keeps it).
    CopyLoadsMore {
        /// The handed-over output.
        output: u32,
        /// Elements the copies of one element load from tensors the consumer does not read.
        loads: u64,
        /// Loads and stores per element the copy saves.
        saved: u64,
    },
    /// The tensor type the producer writes differs from the one the consumer declares.
    ShapeMismatch {
        /// `f32[4, 5]` as written.
        written: String,
        /// As declared by the consumer.
        read: String,
    },
    /// The merged operator did not pass validation (a bug in the merger; the merge was
    /// skipped, so evaluation stays correct).
    InvalidMerge {
        /// The validation error.
        error: String,
    },
    /// The consumer reads the tensor with another workgroup or index map than the producer
    /// writes it, so it cannot be handed over in a register. (Index substitution is tried
    /// next; a report gives its reason instead when it is refused too.)
    ReadsDiffer,
    /// The consumer cannot run inside the producer's row loop as an epilogue.
    NoEpilogue {
        /// Which rule does not hold.
        why: NotEpilogue,
    },
    /// The consumer cannot run as a loop inside the workers of the reduction that feeds it.
    NotLoopable {
        /// Which rule does not hold.
        why: String,
    },
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::LibraryCall { operator, call } => write!(
                f,
                "{operator} is a library call ({call}): it runs as a call of its library, never \
                 merged with another operator"
            ),
            Reason::CutReadInPlace { operator } => write!(
                f,
                "{operator} cuts a stacked product's result into blocks that its readers read \
                 in place (no kernel runs): never merged with another operator"
            ),
            Reason::OptLevel { needs, level } => {
                write!(f, "{needs}, which opt_level {level} does not do")
            }
            Reason::WouldCreateCycle { through } => write!(
                f,
                "would create a cycle: the producer also feeds {through}, which feeds the consumer"
            ),
            Reason::NeverWritten { output } => {
                write!(f, "output {output} is never written by the producer")
            }
            Reason::MultipleWrites { output, count } => write!(
                f,
                "output {output} is written {count} times per worker, not once"
            ),
            Reason::WriteInControlFlow { output, region } => write!(
                f,
                "output {output} is written inside a {region}: not one simple value per worker"
            ),
            Reason::OpaqueWrite { output, write } => {
                write!(f, "the write index of output {output} is opaque: {write}")
            }
            Reason::WriteNotOneToOne { output, write } => write!(
                f,
                "the write {write} of output {output} is not one element per worker"
            ),
            Reason::WriteMayBeOutOfBounds {
                output,
                write,
                shape,
            } => write!(
                f,
                "the write {write} of output {output} may fall outside its shape {shape:?}"
            ),
            Reason::OpaqueRead { write, read } => {
                write!(f, "opaque read index: written {write}, read {read}")
            }
            Reason::NotInvertible { output, write } => write!(
                f,
                "the write {write} of output {output} cannot be inverted (each position \
                 component must appear in one index, with coefficient 1 or -1), so the worker \
                 that wrote a read element is unknown"
            ),
            Reason::ProducerMayFault { why } => write!(
                f,
                "the producer may fault ({why}); recomputing it at the consumer's reads would move \
                 the fault"
            ),
            Reason::ReadOutsideWrites {
                output,
                write,
                read,
                axis,
            } => write!(
                f,
                "the read {read} of output {output} may fall outside the elements written \
                 {write} (axis {axis}); it keeps reading memory"
            ),
            Reason::UnknownRecomputeCount { output } => write!(
                f,
                "output {output} is read inside a loop without a known trip count: the number of \
                 recomputations is unknown"
            ),
            Reason::TooCostly {
                output,
                write,
                read,
                recompute,
                work,
            } => write!(
                f,
                "recomputing output {output} (written {write}) at every read {read} costs \
                 ~{recompute}x its work of ~{work} operation(s) per element, more than storing and \
                 loading it"
            ),
            Reason::StridedRecompute {
                output,
                write,
                read,
                reads,
            } => write!(
                f,
                "recomputing output {output} (written {write}) at the read {read} would make its \
                 ~{reads} loop read(s) per element, contiguous across neighbouring workers where it \
                 is written, a cache line apart each; more than storing and loading it"
            ),
            Reason::SlowerFused { fused, unfused } => write!(
                f,
                "the merged operator is predicted to cost ~{fused} operation units against ~{unfused} \
                 for the operators it replaces (their work and memory access: strided loops, \
                 workers no longer in lockstep)"
            ),
            Reason::ComputedTooOften { times } => write!(
                f,
                "the producer stays for another reader and some of its work is already computed \
                 {times} times; another copy is refused"
            ),
            Reason::DuplicatesTooMuch { work } => write!(
                f,
                "the producer stays for another reader, and with this copy the consumer would \
                 repeat ~{work} operation units per element that other kernels compute too"
            ),
            Reason::CopyLoadsMore {
                output,
                loads,
                saved,
            } => write!(
                f,
                "the producer stays for another reader, a library call (or a cut read in \
                 place) between the two keeps them apart, and a copy of output {output} in the consumer would load ~{loads} \
                 elements per element from tensors the consumer does not read, more than the \
                 {saved} loads and stores it saves"
            ),
            Reason::ShapeMismatch { written, read } => {
                write!(f, "shape mismatch: written {written}, read {read}")
            }
            Reason::InvalidMerge { error } => {
                write!(f, "the merged operator would be invalid ({error})")
            }
            Reason::ReadsDiffer => write!(
                f,
                "the consumer reads with another workgroup or index map than the producer writes"
            ),
            Reason::NoEpilogue { why } => {
                write!(
                    f,
                    "the consumer cannot run in the producer's row loop: {why}"
                )
            }
            Reason::NotLoopable { why } => {
                write!(
                    f,
                    "the consumer cannot run as a loop in the producer's workers: {why}"
                )
            }
        }
    }
}

/// How two operators were merged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MergeKind {
    /// A producer into its consumer: the intermediate stays in a register.
    Vertical,
    /// Two independent operators over the same workgroup: one launch instead of two.
    Horizontal,
    /// A producer recomputed inside its consumer at every read (index substitution): the
    /// workgroups or index maps differ, the intermediate no longer goes through memory.
    Inlined,
    /// A consumer run as a loop inside the workers of the reduction that feeds it (a row
    /// statistic and its elementwise use, one worker per row), then merged vertically.
    Looped,
    /// An elementwise consumer run at the end of each iteration of the loop in which its
    /// producer writes a row (`layernorm(x) * gamma + beta`): the value just written is
    /// handed over in a register.
    Epilogue,
}

impl MergeKind {
    /// The kind in words, as a report names it.
    pub fn word(self) -> &'static str {
        match self {
            MergeKind::Vertical => "a hand-over in a register",
            MergeKind::Horizontal => "sibling fusion",
            MergeKind::Inlined => "index substitution",
            MergeKind::Looped => "looping",
            MergeKind::Epilogue => "an epilogue",
        }
    }
}

/// One merge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Merge {
    /// Vertical or horizontal.
    pub kind: MergeKind,
    /// The producer (vertical) or the first sibling (horizontal), e.g. "`add` (#1)".
    pub first: String,
    /// The consumer (vertical) or the second sibling (horizontal).
    pub second: String,
    /// The tensors passed in registers (vertical), e.g. "output 0 of `add` (#1)".
    pub through: Vec<String>,
    /// Intermediates that stay in memory because they are requested or used elsewhere.
    pub kept: Vec<String>,
    /// Inlined: how many times each element of the intermediate is computed now, rounded
    /// (0 for other kinds).
    pub recompute: u64,
}

impl fmt::Display for Merge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            MergeKind::Vertical | MergeKind::Looped | MergeKind::Epilogue => {
                write!(f, "merged {} into {}", self.first, self.second)?;
                if self.kind == MergeKind::Looped {
                    write!(f, ", run as a loop in each of its workers,")?;
                }
                if self.kind == MergeKind::Epilogue {
                    write!(f, ", run in the loop that writes each row,")?;
                }
                if !self.through.is_empty() {
                    write!(f, " through {}", self.through.join(", "))?;
                }
                if !self.kept.is_empty() {
                    write!(f, "; kept in memory: {}", self.kept.join(", "))?;
                }
                Ok(())
            }
            MergeKind::Horizontal => write!(
                f,
                "merged siblings {} and {} (same workgroup, independent)",
                self.first, self.second
            ),
            MergeKind::Inlined => {
                write!(f, "inlined {} into {}", self.first, self.second)?;
                if !self.through.is_empty() {
                    write!(f, " at its reads of {}", self.through.join(", "))?;
                }
                write!(f, " (each element computed ~{}x)", self.recompute)?;
                if !self.kept.is_empty() {
                    write!(f, "; the producer stays for: {}", self.kept.join(", "))?;
                }
                Ok(())
            }
        }
    }
}

/// A producer -> consumer edge of the final graph that was not merged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The producer.
    pub producer: String,
    /// The consumer.
    pub consumer: String,
    /// The tensor between them, e.g. "output 0 of `cumsum_rows` (#0)".
    pub tensor: String,
    /// Why they stay apart: the refusal of the first way tried.
    pub reason: Reason,
    /// The other ways tried for this pair, each refused too, in the order tried.
    pub also: Vec<(MergeKind, Reason)>,
    /// The producer's index among the fused graph's operators.
    pub producer_kernel: usize,
    /// The consumer's index among the fused graph's operators.
    pub consumer_kernel: usize,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "not merged {} into {} ({}): {}",
            self.producer, self.consumer, self.tensor, self.reason
        )?;
        for (kind, reason) in &self.also {
            write!(f, "; also tried {}: {reason}", kind.word())?;
        }
        Ok(())
    }
}

/// Library-call products that read the same second operand and none of which depends on
/// another's result, made one product over their first operands stacked along the rows
/// (`crate::stack`); each original result is a slice of the stacked one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stacked {
    /// The products, in the order of their rows, e.g. "`matmul` (#3)".
    pub products: Vec<String>,
    /// The operand they share, e.g. "graph input 1".
    pub shared: String,
    /// What each calls (`gemm`, `gemm(bᵀ)`, ...).
    pub call: String,
    /// The stacked first operand's shape.
    pub stacked_shape: Vec<u64>,
    /// The fused graph's kernel (its index) that runs the stacked product.
    pub kernel: usize,
    /// The kernel that writes the stacked first operand.
    pub operand_kernel: usize,
}

impl fmt::Display for Stacked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown: Vec<&str> = self.products.iter().take(4).map(String::as_str).collect();
        write!(
            f,
            "stacked {} products {}{} sharing {} into one {} over a {:?} operand (kernel {})",
            self.products.len(),
            shown.join(", "),
            if self.products.len() > 4 { ", ..." } else { "" },
            self.shared,
            self.call,
            self.stacked_shape,
            self.kernel
        )
    }
}

/// A product that shares its second operand with another but was not stacked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotStacked {
    /// The product, e.g. "`matmul` (#5)".
    pub product: String,
    /// The operand it shares.
    pub shared: String,
    /// Why not.
    pub reason: NotStackedReason,
}

/// Why a product was not stacked with the others sharing its operand.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotStackedReason {
    /// Its first operand depends on the other's result (a recurrence: `h U`), or its result
    /// feeds the other's first operand: one product cannot compute both.
    Depends {
        /// The other product.
        other: String,
        /// Whether this product's operand depends on the other's result (else the reverse).
        on_other: bool,
    },
    /// Stacking copies the first operands (`copied` elements) and saves fewer reads of the
    /// shared operand (`saved` elements).
    CopyCostsMore {
        /// Elements of the stacked first operand.
        copied: u64,
        /// Elements of the shared operand not read again.
        saved: u64,
    },
}

impl fmt::Display for NotStacked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "not stacked {} (sharing {}): ",
            self.product, self.shared
        )?;
        match &self.reason {
            NotStackedReason::Depends {
                other,
                on_other: true,
            } => write!(f, "its first operand depends on the result of {other}"),
            NotStackedReason::Depends {
                other,
                on_other: false,
            } => write!(f, "its result feeds the first operand of {other}"),
            NotStackedReason::CopyCostsMore { copied, saved } => write!(
                f,
                "stacking copies {copied} elements to save reading {saved} of the shared operand"
            ),
        }
    }
}

/// A value that a later loop of a worker reads from a row buffer instead of computing it
/// again (row reuse, after merging).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowBuffer {
    /// The kernel (its label after fusion, as in the DOT picture), e.g. "extreme+sub+exp+sum".
    pub kernel: String,
    /// The operation whose value is kept, e.g. "exp".
    pub value: String,
    /// The buffer's length (the loops' trip count) and element type, e.g. `f32[4096]`.
    pub buffer: String,
}

impl fmt::Display for RowBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "in `{}`: the `{}` a loop computes is kept in a row buffer ({}) for a later loop \
             that computed it again",
            self.kernel, self.value, self.buffer
        )
    }
}

/// A column kernel's elementwise pass split off into a contiguous kernel of its own (on the
/// CPU, after merging: `crate::column_pass`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitPass {
    /// The fused kernel whose pass was split off (its name), which keeps the statistics.
    pub kernel: String,
    /// The pass kernel's name.
    pub pass: String,
    /// The pass kernel's workgroup (the output's shape).
    pub shape: Vec<u64>,
    /// The axis the pass's loop ran along (reduced in the statistics kernel).
    pub axis: usize,
    /// The values handed from the statistics kernel to the pass kernel.
    pub statistics: usize,
}

impl fmt::Display for SplitPass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "in `{}`: the pass down axis {} runs as `{}` over {:?} in memory order ({} \
             statistic(s) handed over)",
            self.kernel, self.axis, self.pass, self.shape, self.statistics
        )
    }
}

/// What the optimizer did to an operator DAG.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FusionReport {
    /// The optimization level used.
    pub opt_level: u8,
    /// Operators (kernels) before fusion.
    pub kernels_before: usize,
    /// Operators (kernels) after fusion.
    pub kernels_after: usize,
    /// The merges, in the order they were made.
    pub merges: Vec<Merge>,
    /// Every producer -> consumer edge of the fused graph, with the reason it was not merged.
    pub refusals: Vec<Refusal>,
    /// Values kept in row buffers after merging ([`crate::reuse_rows`]).
    pub row_buffers: Vec<RowBuffer>,
    /// Column kernels' elementwise passes split off into kernels of their own
    /// (`crate::column_pass`; on the CPU only).
    pub split_passes: Vec<SplitPass>,
    /// Products sharing an operand stacked into one before the merges (`crate::stack`).
    pub stacked: Vec<Stacked>,
    /// Products that share an operand with another but were not stacked, and why.
    pub not_stacked: Vec<NotStacked>,
    /// GEMMs the CPU runner runs with their consumer as an epilogue (`crate::gemm_pair`).
    pub epilogue_pairs: Vec<EpiloguePair>,
    /// GEMMs not paired with a consumer, and why.
    pub not_paired: Vec<NotPaired>,
}

impl FusionReport {
    /// The refusals whose reason satisfies `pred`.
    pub fn refusals_where(&self, pred: impl Fn(&Reason) -> bool) -> Vec<&Refusal> {
        self.refusals.iter().filter(|r| pred(&r.reason)).collect()
    }
}

impl fmt::Display for FusionReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "fusion at opt_level {}: {} kernel(s) -> {} kernel(s)",
            self.opt_level, self.kernels_before, self.kernels_after
        )?;
        for m in &self.merges {
            writeln!(f, "  {m}")?;
        }
        for r in &self.refusals {
            writeln!(f, "  {r}")?;
        }
        for b in &self.row_buffers {
            writeln!(f, "  {b}")?;
        }
        for s in &self.split_passes {
            writeln!(f, "  {s}")?;
        }
        for s in &self.stacked {
            writeln!(f, "  {s}")?;
        }
        for s in &self.not_stacked {
            writeln!(f, "  {s}")?;
        }
        for p in &self.epilogue_pairs {
            writeln!(f, "  {p}")?;
        }
        for p in &self.not_paired {
            writeln!(f, "  {p}")?;
        }
        Ok(())
    }
}

/// Which rule of epilogue fusion (`crate::epilogue`) a merge breaks ([`Reason::NoEpilogue`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotEpilogue {
    /// The producer's workgroup is not the consumer's with some axes dropped.
    #[error("the producer's workgroup is not the consumer's with axes dropped")]
    AxesDropped,
    /// The workgroups differ in more than one axis.
    #[error("the workgroups differ in more than one axis")]
    SeveralAxes,
    /// The producer cannot be rebased onto the consumer's workgroup.
    #[error("the producer cannot run over the consumer's workgroup")]
    NotRebased,
    /// An operator has sizes given at run time.
    #[error("a size is given at run time")]
    Symbolic,
    /// The consumer has a local tensor.
    #[error("the consumer has a local tensor")]
    ConsumerLocal,
    /// The loop's axis is not an axis of the consumer's workgroup.
    #[error("the loop's axis is outside the consumer's workgroup")]
    AxisOutside,
    /// The producer's workgroup is not the consumer's with the loop's axis of extent 1.
    #[error("the producer's workgroup is not the consumer's without the loop's axis")]
    Workgroup,
    /// The consumer reads several outputs of the producer.
    #[error("the consumer reads more than one output of the producer")]
    SeveralOutputs,
    /// The consumer reads an output the producer does not have.
    #[error("the consumer reads an output the producer lacks")]
    NoSuchOutput,
    /// The output is not of the consumer's workgroup's shape.
    #[error("the output's shape is not the consumer's workgroup")]
    OutputShape,
    /// The consumer has a loop or a branch.
    #[error("the consumer has a loop or a branch")]
    ConsumerControlFlow,
    /// The consumer may fault (the first access the interval analysis cannot prove).
    #[error("the consumer may fault: {0}")]
    ConsumerMayFault(String),
    /// The consumer reads the output elsewhere than at its own position.
    #[error("the consumer reads the output elsewhere than at its own position")]
    ReadElsewhere,
    /// The producer writes the output more than once.
    #[error("the producer writes the output more than once")]
    SeveralWrites,
    /// The producer does not write the output in a top-level loop `0..n`.
    #[error("the producer does not write the output in a top-level loop `0..{n}`")]
    NotInRowLoop {
        /// The loop's extent.
        n: u64,
    },
    /// The producer's write is not at its position and the loop's index.
    #[error("the producer's write is not at its position and the loop's index")]
    WriteIndex,
    /// The producer writes an accumulator inside its loop.
    #[error("the producer writes an accumulator inside its loop")]
    WritesAccumulator,
}

//! The fusion report: every merge the optimizer made and every producer -> consumer edge it
//! left alone, with the reason.

use crate::pattern::IndexPattern;
use std::fmt;

/// Why a producer was not merged into a consumer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
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
    /// The consumer reads one element from several workers (a broadcast).
    Broadcast {
        /// The write pattern in the producer.
        write: IndexPattern,
        /// The read pattern in the consumer.
        read: IndexPattern,
    },
    /// The workgroups differ.
    DifferentWorkgroup {
        /// The producer's workgroup shape.
        producer: Vec<u64>,
        /// The consumer's workgroup shape.
        consumer: Vec<u64>,
    },
    /// The consumer reads a neighbour of the element its own worker would receive.
    Stencil {
        /// The write pattern in the producer.
        write: IndexPattern,
        /// The read pattern in the consumer.
        read: IndexPattern,
    },
    /// The consumer reads elements with another index map than the producer wrote them.
    PatternMismatch {
        /// The write pattern in the producer.
        write: IndexPattern,
        /// The read pattern in the consumer.
        read: IndexPattern,
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
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
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
            Reason::Broadcast { write, read } => write!(
                f,
                "broadcast: written {write}, read {read} (several workers read one element)"
            ),
            Reason::DifferentWorkgroup { producer, consumer } => write!(
                f,
                "different workgroup: producer {producer:?}, consumer {consumer:?}"
            ),
            Reason::Stencil { write, read } => write!(
                f,
                "stencil: written {write}, read {read} (a neighbour's element)"
            ),
            Reason::PatternMismatch { write, read } => {
                write!(f, "index pattern mismatch: written {write}, read {read}")
            }
            Reason::ShapeMismatch { written, read } => {
                write!(f, "shape mismatch: written {written}, read {read}")
            }
            Reason::InvalidMerge { error } => {
                write!(f, "the merged operator would be invalid ({error})")
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
}

impl fmt::Display for Merge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            MergeKind::Vertical => {
                write!(f, "merged {} into {}", self.first, self.second)?;
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
    /// Why they stay apart.
    pub reason: Reason,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "not merged {} into {} ({}): {}",
            self.producer, self.consumer, self.tensor, self.reason
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
        Ok(())
    }
}

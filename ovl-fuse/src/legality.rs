//! The fusion rules. Each check returns what the merge needs, or the [`Reason`] it is refused.
//!
//! Vertical (producer `P` into consumer `C`), for every output `o` of `P` that `C` reads:
//! 1. no other path leads from `P` to `C` (the merged operator would be its own ancestor);
//! 2. `P` writes `o` exactly once, outside any staged loop or branch, at an affine index of the
//!    position that is one-to-one and provably inside `o`'s shape;
//! 3. every read of `o` in `C` uses an affine index, the workgroups are equal, and each read
//!    index is the same map of the position as the write.
//!
//! Then worker `w` of `C` reads exactly the element worker `w` of `P` wrote, so the merged
//! operator can hand the written value over in a register. When 1 or 3 fails, the producer
//! may still be recomputed at the consumer's reads (`substitute`).
//!
//! Horizontal (siblings `A` and `B`): equal workgroups and no path between them.

use crate::graph::{Src, Work};
use crate::report::Reason;
use ovl_ir::ir::{self, TensorKind};
use ovl_ir::pattern::{IndexPattern, PatternAnalysis};
use ovl_ir::typed::{Inst, Kernel};

/// A producer output that the consumer reads, with what the merge needs to know about it.
#[derive(Clone, Debug)]
pub(crate) struct Handoff {
    /// The producer's output index.
    pub output: u32,
    /// The producer's only write of it (an expression index).
    pub write: usize,
}

/// What a legal vertical merge needs: the handed-over outputs and the consumer's input slots
/// that read them.
#[derive(Clone, Debug)]
pub(crate) struct VerticalPlan {
    pub handoffs: Vec<Handoff>,
    /// For each consumer input slot: the producer output it reads, if any.
    pub slot_output: Vec<Option<u32>>,
}

/// The innermost staged region enclosing expression `i` (`None` at the top level).
fn region(kernel: &Kernel, i: usize) -> Option<&'static str> {
    let opener = kernel.exprs[i].block?;
    Some(match kernel.exprs[opener as usize].inst {
        Inst::Range { .. } => "staged loop",
        Inst::WhileBegin { .. } => "while loop",
        _ => "branch",
    })
}

/// Why a vertical merge (a hand-over in a register) is not possible.
#[derive(Clone, Debug)]
pub(crate) enum NotVertical {
    /// The producer's writes rule out every merge, index substitution included.
    Refused(Reason),
    /// Merging would close a cycle; recomputing the producer in the consumer would not.
    Cycle(Reason),
    /// The consumer reads with another workgroup or index map than the producer wrote:
    /// recomputing the producer at the reads may work.
    ReadsDiffer,
}

/// The checks for merging `producer` into `consumer` (which reads at least one of its outputs).
pub(crate) fn check_vertical(
    work: &Work,
    producer: usize,
    consumer: usize,
) -> Result<VerticalPlan, NotVertical> {
    if let Some(through) = work.other_path(producer, consumer) {
        return Err(NotVertical::Cycle(Reason::WouldCreateCycle {
            through: work.node(through).label.clone(),
        }));
    }
    check_reads(work, producer, consumer)
}

/// Rule 2 for every output of `producer` that `consumer` reads: the handed-over outputs with
/// their single write and its pattern, and the consumer's input slots.
pub(crate) fn check_writes(
    work: &Work,
    producer: usize,
    consumer: usize,
) -> Result<(VerticalPlan, Vec<(u32, IndexPattern)>), Reason> {
    let p = work.node(producer);
    let c = work.node(consumer);
    let slot_output: Vec<Option<u32>> = c
        .inputs
        .iter()
        .map(|s| match *s {
            Src::Op { node, output } if node == producer => Some(output),
            _ => None,
        })
        .collect();

    let mut outputs: Vec<u32> = slot_output.iter().flatten().copied().collect();
    outputs.sort_unstable();
    outputs.dedup();

    let kp = work.kernel(producer);
    let mut writes_of = PatternAnalysis::new(&kp, &p.dag.workgroup_shape);
    let mut handoffs = Vec::new();
    let mut write_patterns = Vec::new();
    for &o in &outputs {
        let written = p.dag.outputs.get(o as usize);
        for (slot, so) in slot_output.iter().enumerate() {
            if *so == Some(o) {
                let read = c.dag.inputs.get(slot);
                if written != read {
                    return Err(Reason::ShapeMismatch {
                        written: type_name(written),
                        read: type_name(read),
                    });
                }
            }
        }
        let writes: Vec<usize> = (0..kp.exprs.len())
            .filter(|&i| {
                matches!(kp.exprs[i].inst, Inst::Write { tensor, .. }
                    if tensor.kind == TensorKind::Output && tensor.index == o)
            })
            .collect();
        let write = match writes.as_slice() {
            [] => return Err(Reason::NeverWritten { output: o }),
            [w] => *w,
            many => {
                if let Some(region) = many.iter().find_map(|&w| region(&kp, w)) {
                    return Err(Reason::WriteInControlFlow { output: o, region });
                }
                return Err(Reason::MultipleWrites {
                    output: o,
                    count: many.len(),
                });
            }
        };
        if let Some(region) = region(&kp, write) {
            return Err(Reason::WriteInControlFlow { output: o, region });
        }
        let pattern = writes_of.access(write);
        if let IndexPattern::Opaque { .. } = pattern {
            return Err(Reason::OpaqueWrite {
                output: o,
                write: pattern,
            });
        }
        if !pattern.is_one_to_one(&p.dag.workgroup_shape) {
            return Err(Reason::WriteNotOneToOne {
                output: o,
                write: pattern,
            });
        }
        let shape = written.map(|t| t.shape.clone()).unwrap_or_default();
        if !pattern.in_bounds(&p.dag.workgroup_shape, &shape) {
            return Err(Reason::WriteMayBeOutOfBounds {
                output: o,
                write: pattern,
                shape,
            });
        }
        handoffs.push(Handoff { output: o, write });
        write_patterns.push((o, pattern));
    }
    Ok((
        VerticalPlan {
            handoffs,
            slot_output,
        },
        write_patterns,
    ))
}

/// Rule 3: equal workgroups, and every read of a handed-over tensor is the write's map.
fn check_reads(work: &Work, producer: usize, consumer: usize) -> Result<VerticalPlan, NotVertical> {
    let (plan, write_patterns) =
        check_writes(work, producer, consumer).map_err(NotVertical::Refused)?;
    let (p, c) = (work.node(producer), work.node(consumer));
    let slot_output = &plan.slot_output;

    // Every read of a handed-over tensor in the consumer.
    let kc = work.kernel(consumer);
    let mut reads_of = PatternAnalysis::new(&kc, &c.dag.workgroup_shape);
    let mut reads = Vec::new();
    for i in 0..kc.exprs.len() {
        let Some(slot) = kc.input_read(i) else {
            continue;
        };
        let Some(Some(o)) = slot_output.get(slot as usize) else {
            continue;
        };
        let write = write_patterns
            .iter()
            .find(|(w, _)| w == o)
            .map(|(_, p)| p.clone())
            .unwrap_or(IndexPattern::Opaque {
                why: "unknown".into(),
            });
        let read = reads_of.access(i);
        if read.affine().is_none() {
            return Err(NotVertical::ReadsDiffer);
        }
        reads.push((write, read));
    }
    if p.dag.workgroup_shape != c.dag.workgroup_shape
        || reads
            .iter()
            .any(|(write, read)| !read.matches_over(write, &c.dag.workgroup_shape))
    {
        return Err(NotVertical::ReadsDiffer);
    }
    Ok(plan)
}

pub(crate) fn type_name(t: Option<&ir::TensorType>) -> String {
    match t {
        Some(t) => {
            let d = ovl_ir::DType::from_ir(t.dtype).map_or("?", |d| d.name());
            format!("{d}{:?}", t.shape)
        }
        None => "nothing".into(),
    }
}

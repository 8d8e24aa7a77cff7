//! Merging an elementwise consumer into a producer that writes its rows in a loop.
//!
//! An operator with a worker per row writes its result inside a loop over the row
//! (`ovl_stdlib::layernorm` and `softmax`: `for j in 0..cols { y[r, j] = ... }`), so its
//! output is not one value per worker and cannot be handed over in a register; an elementwise
//! consumer over `[rows, cols]` (`y * gamma + beta`, a mask, an activation) then reads the
//! whole result back from memory. When the consumer reads that output only at its own
//! position, it can instead run as an *epilogue* of the producer's loop: at the end of
//! iteration `j` of row `r`, the consumer's body for position `[r, j]`, with the value just
//! written in place of its read. Each consumer position still runs once, reading the same
//! value; the intermediate no longer goes through memory (its write is dropped when nothing
//! else reads it).
//!
//! Only a consumer that cannot fault, with no control flow and no local tensor, is merged
//! (its body runs between the producer's iterations: a fault would be reported in another
//! order), and only into a loop that runs `0..cols` one by one and writes the output exactly
//! once per iteration, at the worker's position and the loop's index.

use crate::graph::{Node, Src};
use crate::merge::{names_of, snapshots, Merged, Part, Splice};
use crate::report::NotEpilogue;
use ovl_ir::intervals::Intervals;
use ovl_ir::ir::{self, TensorKind};
use ovl_ir::typed::{Expr, Inst, Kernel, TensorId, ValueId};
use std::collections::HashMap;

/// What an epilogue merge needs: the producer's output the consumer reads, its only write,
/// the loop around that write and its closing END_RANGE, and the consumer's input slots.
pub(crate) struct EpiloguePlan {
    /// The producer output the consumer reads.
    pub output: u32,
    /// The producer's only write of it.
    pub write: usize,
    /// The RANGE around the write.
    pub range: usize,
    /// The END_RANGE closing it.
    pub end_range: usize,
    /// The consumer's workgroup axis the loop runs over.
    pub axis: usize,
    /// For each consumer input slot: the producer output it reads, if any.
    pub slot_output: Vec<Option<u32>>,
}

/// The plan for running consumer `c` in the loop of producer `p` (already over the consumer's
/// workgroup with `axis` of extent 1), or which rule of the module does not hold.
pub(crate) fn check(
    p: &Node,
    c: &Node,
    producer_id: usize,
    axis: usize,
) -> Result<EpiloguePlan, NotEpilogue> {
    use NotEpilogue as No;
    let (pd, cd) = (&p.dag, &c.dag);
    let no_symbols = |d: &ir::ExpressionDag| d.symbol_count == 0 && d.symbolic_workgroup.is_empty();
    if !no_symbols(pd) || !no_symbols(cd) {
        return Err(No::Symbolic);
    }
    if !cd.locals.is_empty() {
        return Err(No::ConsumerLocal);
    }
    let n = *cd.workgroup_shape.get(axis).ok_or(No::AxisOutside)?;
    let mut wanted = cd.workgroup_shape.clone();
    wanted[axis] = 1;
    if pd.workgroup_shape != wanted {
        return Err(No::Workgroup);
    }
    // The consumer reads one output of the producer.
    let slot_output: Vec<Option<u32>> = c
        .inputs
        .iter()
        .map(|s| match *s {
            Src::Op { node, output } if node == producer_id => Some(output),
            _ => None,
        })
        .collect();
    let mut outputs: Vec<u32> = slot_output.iter().flatten().copied().collect();
    outputs.sort_unstable();
    outputs.dedup();
    let [output] = outputs[..] else {
        return Err(No::SeveralOutputs);
    };
    let out_type = pd.outputs.get(output as usize).ok_or(No::NoSuchOutput)?;
    if out_type.shape != cd.workgroup_shape {
        return Err(No::OutputShape);
    }
    // Straight-line code that cannot fault, reading the output at its own position only.
    let (kp, kc) = (Kernel::from_validated(pd), Kernel::from_validated(cd));
    let opens_a_block = |x: &Expr| {
        matches!(
            x.inst,
            Inst::If { .. } | Inst::Range { .. } | Inst::WhileBegin { .. }
        )
    };
    if kc.exprs.iter().any(opens_a_block) {
        return Err(No::ConsumerControlFlow);
    }
    if let Some(why) = Intervals::of(&kc).first_possible_fault(cd) {
        return Err(No::ConsumerMayFault(why));
    }
    let is_position = |k: &Kernel, id: u32, a: usize| {
        k.exprs
            .get(id as usize)
            .is_some_and(|x| x.inst == Inst::Position { axis: a as u32 })
    };
    for x in &kc.exprs {
        let Inst::Read { tensor, indices } = &x.inst else {
            continue;
        };
        let reads_output = tensor.kind == TensorKind::Input
            && slot_output
                .get(tensor.index as usize)
                .copied()
                .flatten()
                .is_some();
        let at_own_position = indices.len() == cd.workgroup_shape.len()
            && indices
                .iter()
                .enumerate()
                .all(|(a, &id)| is_position(&kc, id, a));
        if reads_output && !at_own_position {
            return Err(No::ReadElsewhere);
        }
    }
    // The producer writes the output once, directly in a loop `0..n` at the top level, at
    // its position and the loop's index.
    let target = TensorId {
        kind: TensorKind::Output,
        index: output,
    };
    let writes: Vec<(usize, &[ValueId], ValueId)> = kp
        .exprs
        .iter()
        .enumerate()
        .filter_map(|(i, x)| match &x.inst {
            Inst::Write {
                tensor,
                indices,
                value,
            } if *tensor == target => Some((i, &indices[..], *value)),
            _ => None,
        })
        .collect();
    let [(write, indices, value)] = writes[..] else {
        return Err(No::SeveralWrites);
    };
    let in_row_loop = kp.exprs[write].block.and_then(|b| {
        let loop_ = &kp.exprs[b as usize];
        match loop_.inst {
            Inst::Range { close, .. }
                if loop_.block.is_none() && kp.counted_loop(b as usize) == Some((0, n)) =>
            {
                Some((b, close))
            }
            _ => None,
        }
    });
    let Some((range, close)) = in_row_loop else {
        return Err(No::NotInRowLoop { n });
    };
    // On an axis of extent 1 the index may be the constant 0 (rebasing a producer that had no
    // such axis writes it so: a batch of one).
    let zero_on_unit_axis = |id: u32, a: usize| {
        pd.workgroup_shape[a] == 1
            && kp.exprs.get(id as usize).is_some_and(|x| {
                x.inst == Inst::Const(ovl_ir::Literal::Int(0))
                    && x.dtype == Some(ovl_ir::DType::I64)
            })
    };
    let index_ok = indices.len() == pd.workgroup_shape.len()
        && indices.iter().enumerate().all(|(a, &id)| {
            if a == axis {
                id == range
            } else {
                is_position(&kp, id, a) || zero_on_unit_axis(id, a)
            }
        });
    // An accumulator is read after its loop, not in it.
    let value_ok = kp
        .exprs
        .get(value as usize)
        .is_some_and(|x| !matches!(x.inst, Inst::Accumulator { .. }));
    if !index_ok {
        return Err(No::WriteIndex);
    }
    if !value_ok {
        return Err(No::WritesAccumulator);
    }
    let (range, end_range) = (range as usize, close as usize);
    Ok(EpiloguePlan {
        output,
        write,
        range,
        end_range,
        axis,
        slot_output,
    })
}

/// Merges consumer `c` into the loop of producer `p` following `plan`; `keep[o]` says whether
/// producer output `o` stays an output (requested, or read by another operator).
pub(crate) fn merge(
    p: &Node,
    c: &Node,
    plan: &EpiloguePlan,
    keep: &[bool],
    originals: &[String],
) -> Merged {
    let names = names_of(p, c, originals);
    let mut s = Splice::new(c, &names);
    s.dag.workgroup_shape = p.dag.workgroup_shape.clone();

    let map_first = s.outputs_of(p, Some(keep));
    let input_map_p = s.inputs_of(p);
    // A written variable is copied at the write: later assignments in the iteration must
    // not change what the consumer sees.
    let (kp, kc) = (
        Kernel::from_validated(&p.dag),
        Kernel::from_validated(&c.dag),
    );
    let snapshot_before = snapshots(&kp, [plan.write]);
    let p_part = Part {
        dag: &p.dag,
        input_map: input_map_p,
        output_map: map_first.clone(),
        replace: Default::default(),
        snapshot_before,
        copies: Default::default(),
    };
    // The producer up to the end of its loop's body.
    let mut p_remap = Vec::with_capacity(p.dag.expressions.len());
    let p_locals = s.add_locals(&p_part);
    s.append_until(&p_part, p_locals, &mut p_remap, plan.end_range);
    let handed = p_part.handed(plan.write, &p_remap);

    // The consumer's body for position [.., j, ..]: its position on the looped axis is the
    // loop's index, its reads of the output the value just written.
    let map_second = s.outputs_of(c, None);
    let input_map_c = s.consumer_inputs(c, &plan.slot_output);
    let mut replace = HashMap::new();
    for (i, e) in kc.exprs.iter().enumerate() {
        if matches!(e.inst, Inst::Position { axis } if axis as usize == plan.axis) {
            replace.insert(i, p_remap[plan.range]);
        }
        let reads_output = kc.input_read(i).is_some_and(|t| {
            plan.slot_output.get(t as usize).copied().flatten() == Some(plan.output)
        });
        if reads_output {
            replace.insert(i, handed);
        }
    }
    let c_part = Part {
        dag: &c.dag,
        input_map: input_map_c,
        output_map: map_second.clone(),
        replace,
        snapshot_before: Default::default(),
        copies: Default::default(),
    };
    s.append(&c_part);

    // The rest of the producer, from its loop's END_RANGE.
    s.append_until(&p_part, p_locals, &mut p_remap, p.dag.expressions.len());
    s.into_merged((p, c), &names, map_first, map_second)
}

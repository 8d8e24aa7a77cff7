//! Blocked workers (C++ only): [`BLOCK`] consecutive workers of a row run in lockstep.
//!
//! A worker that reduces a *column* (`sum(x, 0)`: worker `c` reads `x[k, c]` for every row
//! `k`) walks memory with a stride of a whole row, one element per cache line and, for large
//! tensors, one page per element; the compiler vectorizes the worker loop only when its body
//! has no loop. Run in lockstep, `BLOCK` neighbouring workers read `x[k, c..c + BLOCK]`, a
//! contiguous run, at every `k`: the loop over the block's workers is innermost and
//! vectorizes. Each worker still computes exactly what it computed alone, in the same order
//! (its accumulator's lanes are indexed by the iteration, `proto/ovl.proto`, "Accumulators";
//! only the workers are interleaved), so results are unchanged.
//!
//! The blocked program is emitted in a second pass over the operator, for operators of the
//! shape `ovl_ir::lockstep` describes (the one rule, which fusion's cost model also follows:
//! straight-line code and loops at the top level, bounds known when compiling, no branch, every
//! write indexed last by the innermost position, a read in a loop whose last index is the
//! innermost position plus an offset the same for the whole block, `x[k, c]`,
//! `w[k, c + g * h]`: the reason to block) and without a fault check (the first pass proved
//! every access in bounds: faults keep their order because there are none). [`plan`] lays the
//! blocked program out. The code
//! between loops is a *segment*, run as one loop over the block's workers; a value a later
//! segment uses is kept in an array of `BLOCK` elements, as is every accumulator and variable
//! (a variable is reloaded where it is used and stored back where it is assigned: each worker
//! still sees its own assignments in order), except integer arithmetic on positions
//! (`c + g * h`), which each segment recomputes: read through an array, such an index would
//! hide from the compiler that neighbouring workers read neighbouring elements (the gate
//! products that index substitution puts into an LSTM cell ran 3x slower that way).
//!
//! Local tensors (a row buffer that row reuse added, `softmax` along axis 0 from operators)
//! are allowed when each is filled by a LOCAL_TENSOR at the top level before any access: the
//! block keeps one copy per worker, interleaved (`element * width + worker`, so neighbouring
//! workers touch neighbouring elements), and the fill, run for the whole block between two
//! segments, is the fill of every worker's copy. The copies live on the heap, allocated once
//! per run of the kernel (`cpu/frame.rs`; if the allocation fails, every worker runs alone,
//! with the same results), within `ovl_ir::lockstep::LOCALS_BYTES`: a block narrower than
//! [`BLOCK`] ([`Blocked::width`]) when the copies would exceed it, and none below
//! `ovl_ir::lockstep::MIN_WORKERS` workers.
//! A narrow block reads one cache line per row (and, for rows a power of two of 4 KiB apart,
//! lines that share a few cache sets), which costs about three times what 64 workers cost.
//! A kernel whose loops only stream memory (no loop does a transcendental function's work per
//! iteration) gets blocks of 128 or 256 workers instead, which read 512 bytes or 1 KiB per row
//! and let the hardware stream them; the width is `ovl_ir::lockstep::width`'s (the runtime cuts
//! a parallel run into chunks of whole blocks of it), the emitted loops take it as a constant.

use super::{ctype, vtype, Emitted, Emitter};
use crate::error::CodegenError;
use ovl_ir::lockstep::{self, PositionArithmetic};
use ovl_ir::ops::REDUCE_LANES;
use ovl_ir::typed::{Inst, Kernel, ValueId};
use std::collections::BTreeSet;

/// Workers per block of most kernels (`ovl_ir::lockstep::width` decides each kernel's).
pub const BLOCK: u64 = lockstep::WORKERS;

/// The blocked program's layout: which segment each expression belongs to, and the values
/// crossing segments.
pub(super) struct Blocked {
    /// The segment of each expression; `None` for CONSTs (emitted once, before the block's
    /// loops) and for RANGE / END_RANGE.
    segment: Vec<Option<usize>>,
    /// For each segment: the values of other segments it reads, reloaded at its start.
    imports: Vec<BTreeSet<usize>>,
    /// For each segment: the values it defines that later segments read, stored at its end.
    exports: Vec<BTreeSet<usize>>,
    /// Integer values computed from positions and constants only (a position, `p + H`, a
    /// cast of one): recomputed in every segment that uses them, never kept in an array, so
    /// the compiler sees that neighbouring workers read neighbouring elements through them.
    recomputed: BTreeSet<usize>,
    /// The accumulators (kept in arrays).
    accumulators: BTreeSet<usize>,
    /// The variables (kept in arrays: reloaded where used, stored where declared or assigned).
    variables: BTreeSet<usize>,
    /// The segment whose loop over the block's workers is open.
    open: Option<usize>,
    /// CONSTs and array declarations, emitted before the block's loops.
    pub(super) prelude: String,
    /// Workers per block: [`BLOCK`], or fewer when the operator has local tensors, or more
    /// when its loops stream memory (`ovl_ir::lockstep::width`).
    pub(super) width: u64,
    /// The reduction loops (their RANGE) run lane by lane (`ovl_ir::lockstep::lane_by_lane`).
    lane_by_lane: BTreeSet<usize>,
}

/// The layout of `kernel`'s blocked program, or `None` when it does not have the shape
/// `ovl_ir::lockstep` describes (or would not gain from it).
pub(super) fn plan(kernel: &Kernel) -> Option<Blocked> {
    let width = lockstep::width(kernel)?;
    let inner_axis = kernel.workgroup.len().checked_sub(1)? as u32;
    let positions = PositionArithmetic::of(kernel, inner_axis);
    // Segments: the code between two loops, or around a local's fill (run for the whole block).
    let mut segment = vec![None; kernel.exprs.len()];
    let mut current = 0usize;
    let mut accumulators = BTreeSet::new();
    let mut variables = BTreeSet::new();
    for (i, x) in kernel.exprs.iter().enumerate() {
        match &x.inst {
            Inst::Const(_) => continue,
            Inst::Range { .. } | Inst::EndRange { .. } | Inst::LocalTensor { .. } => {
                current += 1;
                continue;
            }
            Inst::Accumulator { .. } => {
                accumulators.insert(i);
            }
            Inst::Variable { .. } => {
                variables.insert(i);
            }
            _ => {}
        }
        segment[i] = Some(current);
    }
    let recomputed = positions.values;
    let segments = current + 1;
    let mut imports = vec![BTreeSet::new(); segments];
    let mut exports = vec![BTreeSet::new(); segments];
    for (i, x) in kernel.exprs.iter().enumerate() {
        let Some(s) = segment[i] else { continue };
        // A variable is stored back by every segment that declares or assigns it.
        match x.inst {
            Inst::Variable { .. } => {
                exports[s].insert(i);
            }
            Inst::Assign { variable, .. } => {
                exports[s].insert(variable as usize);
            }
            _ => {}
        }
        // The accumulator of an ACCUMULATE (its operand 0) is its lanes, not a value it reads.
        let accumulate = matches!(x.inst, Inst::Accumulate { .. });
        for o in kernel.operands(i).skip(usize::from(accumulate)) {
            let o = o as usize;
            let Some(so) = segment[o] else { continue };
            if so == s {
                continue;
            }
            if recomputed.contains(&o) {
                // Recomputed where it is used, from the positions (and the position
                // arithmetic) it is made of: an array would hide from the compiler that
                // neighbouring workers read neighbouring elements.
                let mut stack = vec![o];
                while let Some(v) = stack.pop() {
                    if segment[v].is_some() && imports[s].insert(v) {
                        stack.extend(kernel.operands(v).map(|w| w as usize));
                    }
                }
            } else {
                imports[s].insert(o);
                if !accumulators.contains(&o) {
                    exports[so].insert(o);
                }
            }
        }
    }
    Some(Blocked {
        segment,
        imports,
        exports,
        recomputed,
        accumulators,
        variables,
        open: None,
        prelude: String::new(),
        width,
        lane_by_lane: lockstep::lane_by_lane(kernel, width),
    })
}

impl<'a> Emitter<'a> {
    /// Emits expression `k` of the blocked program (see the module).
    pub(super) fn blocked_expression(&mut self, k: usize) -> Emitted {
        match self.kernel.exprs[k].inst {
            Inst::Const(lit) => {
                // Once, before the block's loops, visible to all of them.
                let body = std::mem::take(&mut self.body);
                let indent = std::mem::replace(&mut self.indent, 0);
                let r = self.constant(k, lit);
                self.indent = indent;
                let text = std::mem::replace(&mut self.body, body);
                self.blocked_state().prelude.push_str(&text);
                r
            }
            Inst::Range {
                start, end, step, ..
            } => {
                self.close_segment();
                self.blocked_range(k, (start, end, step))
            }
            Inst::LocalTensor { tensor, fill } => {
                // Every worker's copy at once, between segments (`local_tensor` leaves out
                // the fill where the loop that follows writes every element first).
                self.close_segment();
                self.local_tensor(k, tensor, fill)
            }
            Inst::EndRange { .. } => {
                self.close_segment();
                self.blocked_end_range()
            }
            Inst::Accumulator { init, .. } => {
                self.open_expression_segment(k)?;
                let r = self.accumulator(k, init)?;
                self.line(&format!("ovl_s{k}[ovl_j] = v{k};"));
                Ok(r)
            }
            Inst::Accumulate {
                accumulator, value, ..
            } => {
                self.open_expression_segment(k)?;
                self.blocked_accumulate(k, accumulator, value)
            }
            _ => {
                self.open_expression_segment(k)?;
                self.scalar_expression(k)
            }
        }
    }

    /// Opens the segment of expression `k`.
    fn open_expression_segment(&mut self, k: usize) -> Result<(), CodegenError> {
        let segment = self.blocked_state().segment[k].unwrap_or(0);
        self.open_segment(segment)
    }

    fn blocked_state(&mut self) -> &mut Blocked {
        self.blocked.as_mut().expect("in a blocked pass")
    }

    /// Opens the loop over the block's workers for `segment`, reloading what it imports.
    fn open_segment(&mut self, segment: usize) -> Result<(), CodegenError> {
        if self.blocked_state().open == Some(segment) {
            return Ok(());
        }
        self.close_segment();
        self.blocked_state().open = Some(segment);
        let width = self.blocked_state().width;
        self.line(&format!(
            "for (int64_t ovl_j = 0; ovl_j < {width}; ++ovl_j) {{"
        ));
        self.indent += 1;
        let imports: Vec<usize> = self.blocked_state().imports[segment]
            .iter()
            .copied()
            .collect();
        let inner = self.workgroup.len() - 1;
        for v in imports {
            if let Inst::Position { axis } = self.kernel.exprs[v].inst {
                let axis = axis as usize;
                let lane = if axis == inner { " + ovl_j" } else { "" };
                self.line(&format!("const int64_t v{v} = ovl_p{axis}{lane};"));
                continue;
            }
            if self.blocked_state().recomputed.contains(&v) {
                // Its operands are positions, constants or recomputed values imported before
                // it (operands come first in the IR).
                self.scalar_expression(v)?;
                continue;
            }
            let ty = vtype(self.dtype(v));
            let constness = if self.blocked_state().variables.contains(&v) {
                ""
            } else {
                "const "
            };
            self.line(&format!("{constness}{ty} v{v} = ovl_s{v}[ovl_j];"));
        }
        Ok(())
    }

    /// Closes the open segment's loop, storing what it exports.
    pub(super) fn close_segment(&mut self) {
        let Some(segment) = self.blocked_state().open.take() else {
            return;
        };
        let exports: Vec<usize> = self.blocked_state().exports[segment]
            .iter()
            .copied()
            .collect();
        for v in exports {
            self.line(&format!("ovl_s{v}[ovl_j] = v{v};"));
        }
        self.indent -= 1;
        self.line("}");
    }

    /// A loop over the whole block: each accumulator's lanes per worker (a reduction loop),
    /// iteration `i` combining into lane `i % REDUCE_LANES`, as a worker alone does; in
    /// iteration order, or lane by lane where `ovl_ir::lockstep::lane_by_lane` allows (each
    /// lane still sees its iterations in order).
    fn blocked_range(&mut self, k: usize, (s, en, st): (ValueId, ValueId, ValueId)) -> Emitted {
        self.line("{");
        self.indent += 1;
        let width = self.blocked_state().width;
        for acc in self.reductions.get(&k).cloned().unwrap_or_default() {
            let (combiner, d) = self.accumulator_kind(acc)?;
            let id = self.identity(combiner, d);
            self.line(&format!(
                "{} ovl_lanes{acc}[{REDUCE_LANES}][{width}];",
                vtype(d)
            ));
            self.line(&format!(
                "for (int ovl_t = 0; ovl_t < {REDUCE_LANES}; ++ovl_t) for (int64_t ovl_j = 0; ovl_j < {width}; ++ovl_j) ovl_lanes{acc}[ovl_t][ovl_j] = {id};"
            ));
        }
        self.line(&format!(
            "const int64_t ovl_start{k} = v{s}, ovl_end{k} = v{en}, ovl_step{k} = v{st};"
        ));
        self.line(&format!("if (ovl_start{k} < ovl_end{k}) {{"));
        self.indent += 1;
        self.line(&format!(
            "const uint64_t ovl_n{k} = ((uint64_t)ovl_end{k} - (uint64_t)ovl_start{k} - 1) / (uint64_t)ovl_step{k} + 1;"
        ));
        let lane_by_lane = self.blocked_state().lane_by_lane.contains(&k);
        if lane_by_lane {
            // Lane t's iterations t, t + REDUCE_LANES, ... in order, one lane after another.
            self.line(&format!(
                "for (uint64_t ovl_t{k} = 0; ovl_t{k} < {REDUCE_LANES}; ++ovl_t{k})"
            ));
            self.line(&format!(
                "for (uint64_t ovl_i{k} = ovl_t{k}; ovl_i{k} < ovl_n{k}; ovl_i{k} += {REDUCE_LANES}) {{"
            ));
        } else {
            self.line(&format!(
                "for (uint64_t ovl_i{k} = 0; ovl_i{k} < ovl_n{k}; ++ovl_i{k}) {{"
            ));
        }
        self.indent += 1;
        self.line(&format!(
            "const int64_t v{k} = (int64_t)((uint64_t)ovl_start{k} + ovl_i{k} * (uint64_t)ovl_step{k});"
        ));
        if !lane_by_lane {
            self.line(&format!(
                "const uint64_t ovl_t{k} = ovl_i{k} % {REDUCE_LANES};"
            ));
        }
        self.blocked_range_open = Some(k);
        Ok(Some(ovl_ir::DType::I64))
    }

    /// Closes a blocked reduction loop and folds each worker's lanes into its accumulator.
    fn blocked_end_range(&mut self) -> Emitted {
        let range = self
            .blocked_range_open
            .take()
            .ok_or_else(|| self.err(None, "`end_range` without an open `range`"))?;
        self.indent -= 1;
        self.line("}");
        let width = self.blocked_state().width;
        for acc in self.reductions.get(&range).cloned().unwrap_or_default() {
            let (combiner, d) = self.accumulator_kind(acc)?;
            let lanes =
                self.pairwise_fold(combiner, d, |l| format!("ovl_lanes{acc}[{l}][ovl_j]"))?;
            let folded = self.combine(combiner, d, &format!("ovl_s{acc}[ovl_j]"), &lanes)?;
            self.line(&format!(
                "for (int64_t ovl_j = 0; ovl_j < {width}; ++ovl_j) ovl_s{acc}[ovl_j] = {folded};"
            ));
        }
        self.indent -= 1;
        self.line("}");
        self.indent -= 1;
        self.line("}");
        Ok(None)
    }

    /// An ACCUMULATE in a blocked loop: into this worker's lane of the iteration.
    fn blocked_accumulate(&mut self, k: usize, acc: ValueId, value: ValueId) -> Emitted {
        let acc = acc as usize;
        let range = self
            .blocked_range_open
            .ok_or_else(|| self.err(Some(k), "an accumulate outside a reduction loop"))?;
        let (combiner, d) = self.accumulator_kind(acc)?;
        let lane = format!("ovl_lanes{acc}[ovl_t{range}][ovl_j]");
        let combined = self.lane_update(combiner, d, &lane, &format!("v{value}"))?;
        self.line(&format!("{lane} = {combined};"));
        Ok(None)
    }

    /// Declarations of the arrays that carry values and accumulators across segments, and of
    /// the block's copies of the locals (on the heap: [`Emitter::blocked_heap`]), shadowing
    /// the worker program's.
    pub(super) fn blocked_arrays(&self) -> String {
        let Some(b) = &self.blocked else {
            return String::new();
        };
        let width = b.width;
        let mut s = String::new();
        for (ty, name, _) in self.blocked_heap() {
            s.push_str(&format!(
                "{ty}* const __restrict__ {name} = ovl_b{name};  // one copy per worker\n"
            ));
        }
        let carried: BTreeSet<usize> = b
            .exports
            .iter()
            .flatten()
            .chain(&b.accumulators)
            .copied()
            .collect();
        for v in carried {
            let ty = vtype(self.dtype(v));
            s.push_str(&format!("{ty} ovl_s{v}[{width}];\n"));
        }
        s
    }

    /// The block's copies of the locals, allocated on the heap by the frame for a run of the
    /// kernel: (C++ element type, the local's name, elements for the whole block).
    pub(crate) fn blocked_heap(&self) -> Vec<(&'static str, String, u64)> {
        let Some(b) = &self.blocked else {
            return Vec::new();
        };
        self.locals
            .iter()
            .map(|t| {
                let n = t.elements.unwrap_or(0).max(1);
                (ctype(t.dtype), t.name.clone(), n.saturating_mul(b.width))
            })
            .collect()
    }
}

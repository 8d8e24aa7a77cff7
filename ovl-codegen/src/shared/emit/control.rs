//! Structured control flow: `if`/`else`, counted RANGE loops (with the full-block copy of a
//! reduction's lanes) and `while` loops.

use super::{Dialect, Emitted, Emitter, Frame, STOP};
use ovl_ir::ops::REDUCE_LANES;
use ovl_ir::typed::ValueId;
use ovl_ir::DType;

impl Emitter<'_> {
    /// IF: opens a block.
    pub(super) fn if_(&mut self, condition: ValueId) -> Emitted {
        self.line(&format!("if (v{condition}) {{"));
        self.indent += 1;
        Ok(None)
    }

    /// ELSE.
    pub(super) fn else_(&mut self) -> Emitted {
        self.indent -= 1;
        self.line("} else {");
        self.indent += 1;
        Ok(None)
    }

    /// END_IF.
    pub(super) fn end_if(&mut self) -> Emitted {
        self.indent -= 1;
        self.line("}");
        Ok(None)
    }

    /// RANGE `start..end` by `step` (all i64, as validation proved).
    pub(super) fn range(
        &mut self,
        k: usize,
        (start, end, step): (ValueId, ValueId, ValueId),
    ) -> Emitted {
        let (s, e, st) = (start as usize, end as usize, step as usize);
        let step = self.const_int(st);
        if self.is_split(k) {
            return self.split_range(k, (s, e, st), step);
        }
        let reduced = self.reductions.get(&k).cloned();
        let braces = if let Some(accs) = reduced {
            self.reduction_range(k, (s, e, st), step, &accs)?
        } else if step == Some(1) {
            self.line("{");
            self.indent += 1;
            self.line(&format!("const int64_t ovl_end{k} = v{e};"));
            self.line(&format!(
                "for (int64_t v{k} = v{s}; v{k} < ovl_end{k}; ++v{k}) {{"
            ));
            self.indent += 1;
            2
        } else {
            self.counted_range_head(k, (s, e, st), step, &[]);
            self.line(&format!(
                "for (uint64_t ovl_i{k} = 0; ovl_i{k} < ovl_n{k}; ++ovl_i{k}) {{"
            ));
            self.indent += 1;
            self.line(&format!(
                "const int64_t v{k} = (int64_t)((uint64_t)ovl_start{k} + ovl_i{k} * (uint64_t)ovl_step{k});"
            ));
            3
        };
        let (inner, block) = match self.block_mark.take() {
            Some(mark) => (2, Some(mark)),
            None => (braces, None),
        };
        self.frames.push(Frame::Range {
            braces,
            opener: k,
            inner,
            block,
        });
        Ok(Some(DType::I64))
    }

    /// END_RANGE: closes the loop's braces.
    pub(super) fn end_range(&mut self, k: usize) -> Emitted {
        let Some(&Frame::Range {
            braces,
            opener,
            inner,
            block,
        }) = self.frames.last()
        else {
            return Err(self.err(Some(k), "`end_range` without an open `range`"));
        };
        self.frames.pop();
        for b in 0..braces {
            if b == inner {
                self.fold_lanes(opener)?;
            }
            self.indent -= 1;
            self.line("}");
            if let (0, Some(mark)) = (b, block) {
                self.full_block_copy(opener, mark);
            }
        }
        if self.split_open == Some(opener) {
            self.split_open = None;
        }
        Ok(None)
    }

    /// WHILE_BEGIN: `while (true) {`, after the loop's iteration count `ovl_it{k}` (a `while`
    /// may not end on its data; counted `range` loops need no count: their trip count is fixed
    /// when they start).
    pub(super) fn while_begin(&mut self, k: usize) -> Emitted {
        self.line(&format!("uint64_t ovl_it{k} = 0;"));
        self.line("while (true) {");
        self.indent += 1;
        Ok(None)
    }

    /// WHILE_COND of the loop `begin` opened: `if (!c) break;`.
    pub(super) fn while_cond(&mut self, condition: ValueId, begin: ValueId) -> Emitted {
        self.line(&format!("if (!v{condition}) break;"));
        // One increment and compare per iteration; past the bound, a fault ends the worker.
        let w = self.worker_expr();
        self.stops.set(true);
        self.line(&format!(
            "if (OVL_UNLIKELY(++ovl_it{begin} > OVL_WHILE_LIMIT && OVL_WHILE_LIMIT != 0)) {{ ovl::while_limit(ovl_st, {begin}, {w}); {STOP} }}"
        ));
        Ok(None)
    }

    /// WHILE_END.
    pub(super) fn while_end(&mut self) -> Emitted {
        self.indent -= 1;
        self.line("}");
        Ok(None)
    }

    /// The head of a RANGE loop counted in iterations: opens `{`, names its bounds and step,
    /// emits `declarations`, checks the step (a fault when it is not positive and not known to
    /// be), opens `if (start < end) {` and computes the trip count `ovl_n{k}`. Two braces open.
    pub(super) fn counted_range_head(
        &mut self,
        k: usize,
        (s, e, st): (usize, usize, usize),
        step: Option<i128>,
        declarations: &[String],
    ) {
        self.line("{");
        self.indent += 1;
        self.line(&format!(
            "const int64_t ovl_start{k} = v{s}, ovl_end{k} = v{e}, ovl_step{k} = v{st};"
        ));
        for d in declarations {
            self.line(d);
        }
        if step.is_none_or(|c| c <= 0) {
            let w = self.worker_expr();
            self.stops.set(true);
            self.line(&format!(
                "if (OVL_UNLIKELY(ovl_step{k} <= 0)) {{ ovl::bad_step(ovl_st, {k}, ovl_step{k}, {w}); {STOP} }}"
            ));
            self.line(&format!("else if (ovl_start{k} < ovl_end{k}) {{"));
        } else {
            self.line(&format!("if (ovl_start{k} < ovl_end{k}) {{"));
        }
        self.indent += 1;
        self.line(&format!(
            "const uint64_t ovl_n{k} = ((uint64_t)ovl_end{k} - (uint64_t)ovl_start{k} - 1) / \
             (uint64_t)ovl_step{k} + 1;"
        ));
    }

    /// Splits a reduction loop's block loop (the text from `mark`: `for (ovl_l < ovl_m) { .. }`)
    /// into the full blocks and the last, partial one: the loop over full blocks gets a copy
    /// whose constant trip count of `REDUCE_LANES` lets the compiler keep the lanes in one
    /// vector register, then the partial block (if any) runs the original:
    /// `for (; ovl_b < ovl_f; ..) { <copy> } if (ovl_b < ovl_n) { ovl_m = ..; <loop> }`. The
    /// partial block is outside the loop so that the full blocks never index the lanes with a
    /// variable, which would keep them in memory (a store-to-load round trip per block, the
    /// bound of a reduction over data in cache). Both copies run the same iterations in the
    /// same order, so the result is unchanged.
    pub(super) fn full_block_copy(&mut self, range: usize, mark: usize) {
        let block = self.body.split_off(mark);
        let mut full = block.replacen(
            &format!("ovl_l{range} < ovl_m{range};"),
            &format!("ovl_l{range} < {REDUCE_LANES};"),
            1,
        );
        if self.dialect == Dialect::Cpp {
            // Not unrolled, GCC vectorizes this loop as one vector iteration over the lanes
            // whatever the combiner; unrolled first, it vectorizes only a `+` (a max, with its
            // NaN rule, stays scalar).
            let indent: String = full.chars().take_while(|c| *c == ' ').collect();
            full.insert_str(0, &format!("{indent}#pragma GCC unroll 1\n"));
        }
        self.body.push_str(&full);
        // Closes the loop over full blocks; the caller's next brace closes the partial block.
        self.indent -= 1;
        self.line("}");
        self.line(&format!("if (ovl_b{range} < ovl_n{range}) {{"));
        self.indent += 1;
        self.line(&format!(
            "const uint64_t ovl_m{range} = ovl_n{range} - ovl_b{range};"
        ));
        self.body.push_str(&block);
    }
}

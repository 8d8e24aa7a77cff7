//! Scalar values: constants, positions, symbols, casts, selects, fused multiply-adds and the
//! unary and binary operations of the op table.

use super::{Emitted, Emitter};
use crate::shared::literal::{ctype, narrow, vtype, widen};
use ovl_ir::ir::Op;
use ovl_ir::ops::{self, ResultRule};
use ovl_ir::typed::{Inst, ValueId};
use ovl_ir::{DType, Literal};
use std::sync::Arc;

impl Emitter<'_> {
    /// Emits expression `k` as one worker runs it, by its typed instruction.
    pub(super) fn scalar_expression(&mut self, k: usize) -> Emitted {
        let kernel = Arc::clone(&self.kernel);
        match &kernel.exprs[k].inst {
            &Inst::Const(lit) => self.constant(k, lit),
            &Inst::Position { axis } => self.position(k, axis),
            &Inst::Symbol { symbol } => self.symbol(k, symbol),
            Inst::Read { tensor, indices } => self.read(k, *tensor, indices),
            Inst::Write {
                tensor,
                indices,
                value,
            } => self.write(k, *tensor, indices, *value),
            &Inst::LocalTensor { tensor, fill } => self.local_tensor(k, tensor, fill),
            &Inst::Variable { init } => self.variable(k, init),
            &Inst::Assign { variable, value } => self.assign(variable, value),
            &Inst::Cast { value } => self.cast(k, value),
            &Inst::Select {
                condition,
                if_true,
                if_false,
            } => self.select(k, condition, if_true, if_false),
            &Inst::Fma { a, b, c } => self.fma(k, [a, b, c]),
            &Inst::Unary { op, a } => self.elementwise(k, op, &[a]),
            &Inst::Binary { op, a, b } | &Inst::Compare { op, a, b } => {
                self.elementwise(k, op, &[a, b])
            }
            &Inst::If { condition, .. } => self.if_(condition),
            Inst::Else { .. } => self.else_(),
            Inst::EndIf { .. } => self.end_if(),
            &Inst::Range {
                start, end, step, ..
            } => self.range(k, (start, end, step)),
            Inst::EndRange { .. } => self.end_range(k),
            Inst::WhileBegin { .. } => self.while_begin(k),
            &Inst::WhileCond {
                condition, begin, ..
            } => self.while_cond(condition, begin),
            Inst::WhileEnd { .. } => self.while_end(),
            &Inst::Accumulator { init, .. } => self.accumulator(k, init),
            &Inst::Accumulate {
                accumulator,
                value,
                range,
            } => self.accumulate(k, accumulator, value, range),
        }
    }

    /// The literal of a CONST.
    pub(super) fn constant(&mut self, k: usize, lit: Literal) -> Emitted {
        let d = self.dtype(k);
        let text = self.typed_literal(d, lit);
        self.line(&format!("const {} v{k} = {text};", vtype(d)));
        Ok(Some(d))
    }

    /// A component of the worker position.
    pub(super) fn position(&mut self, k: usize, axis: u32) -> Emitted {
        let axis = axis as usize;
        if self.blocked.is_some() && axis + 1 == self.workgroup.len() {
            // The worker of this lane of the block.
            self.line(&format!("const int64_t v{k} = ovl_p{axis} + ovl_j;"));
        } else {
            self.line(&format!("const int64_t v{k} = ovl_p{axis};"));
        }
        Ok(Some(DType::I64))
    }

    /// SYMBOL: the value of a symbol the operator runs with (a kernel parameter).
    pub(super) fn symbol(&mut self, k: usize, symbol: u32) -> Emitted {
        self.line(&format!("const int64_t v{k} = ovl_S{symbol};"));
        Ok(Some(DType::I64))
    }

    /// A CAST (saturating float-to-integer, `!= 0` to bool); from a half type: from its f32
    /// value; to a half type: to f32, rounded once.
    pub(super) fn cast(&mut self, k: usize, value: ValueId) -> Emitted {
        let (a, from) = self.value(value);
        let to = self.dtype(k);
        let ct = ctype(to);
        let x = widen(from, &format!("v{a}"));
        let from = from.compute();
        let expr = if to.is_half() {
            let f = if from == DType::F32 {
                x
            } else {
                format!("(float){x}")
            };
            narrow(to, &f)
        } else if to == DType::Bool {
            if from == DType::Bool {
                x
            } else {
                format!("({x} != 0)")
            }
        } else if from.is_float() && to.is_int() {
            format!("ovl::f2i<{ct}>({x})")
        } else {
            format!("({ct}){x}")
        };
        self.line(&format!("const {} v{k} = {expr};", vtype(to)));
        Ok(Some(to))
    }

    /// SELECT: `c ? a : b` (`ovl::pick(c, a, b)` for floats).
    pub(super) fn select(
        &mut self,
        k: usize,
        condition: ValueId,
        if_true: ValueId,
        if_false: ValueId,
    ) -> Emitted {
        let (c, (a, d), b) = (condition, self.value(if_true), if_false);
        // Floats (half values are floats too) through `ovl::pick`, which GCC if-converts
        // (docs/codegen.md).
        let value = if d.is_float() {
            format!("ovl::pick(v{c}, v{a}, v{b})")
        } else {
            format!("v{c} ? v{a} : v{b}")
        };
        self.line(&format!("const {} v{k} = {value};", vtype(d)));
        Ok(Some(d))
    }

    /// FMA `a * b + c`, spelled as the op table says.
    pub(super) fn fma(&mut self, k: usize, operands: [ValueId; 3]) -> Emitted {
        self.elementwise(k, Op::Fma, &operands)
    }

    /// A unary, binary or comparison op or an FMA, spelled as the op table says for the
    /// operands' dtype; the result is that dtype or bool, as the table's row says.
    pub(super) fn elementwise(&mut self, k: usize, op: Op, operands: &[ValueId]) -> Emitted {
        let Some(row) = ops::info(op) else {
            return Err(self.err(Some(k), "unspecified opcode"));
        };
        let d = self.dtype(operands[0] as usize);
        // A half type computes in f32 and rounds the result once (`proto/ovl.proto`).
        let args: Vec<String> = operands
            .iter()
            .map(|v| widen(d, &format!("v{v}")))
            .collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let Some(expr) = row.spelling.for_dtype(d.compute()).apply(&args) else {
            return Err(self.err(Some(k), format!("{} does not take {d} operands", row.name)));
        };
        let (rd, expr) = if row.result == ResultRule::Bool {
            (DType::Bool, expr)
        } else {
            (d, narrow(d, &expr))
        };
        self.line(&format!("const {} v{k} = {expr};", vtype(rd)));
        Ok(Some(rd))
    }
}

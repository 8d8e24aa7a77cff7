//! Scalar values: constants, positions, symbols, casts, selects, fused multiply-adds and the
//! unary and binary operations of the op table.

use super::{Emitted, Emitter};
use crate::shared::literal::ctype;
use ovl_ir::ir::Op;
use ovl_ir::ops::{self, Category, OpInfo, ResultRule};
use ovl_ir::DType;

impl Emitter<'_> {
    /// Emits expression `k`, of opcode `op`, as one worker runs it.
    pub(super) fn scalar_expression(&mut self, k: usize, op: Op) -> Emitted {
        let Some(row) = ops::info(op) else {
            return Err(self.err(Some(k), "unspecified opcode"));
        };
        match row.category {
            Category::Unary => return self.unary(k, row),
            Category::Binary | Category::Compare => return self.binary(k, row),
            _ => {}
        }
        match op {
            Op::Const => self.constant(k),
            Op::Position => self.position(k),
            Op::Symbol => self.symbol(k),
            Op::Read => self.read(k),
            Op::Write => self.write(k),
            Op::Variable => self.variable(k),
            Op::Assign => self.assign(k),
            Op::LocalTensor => self.local_tensor(k),
            Op::Cast => self.cast(k),
            Op::Select => self.select(k),
            Op::Fma => self.fma(k, row),
            Op::If => self.if_(k),
            Op::Else => self.else_(k),
            Op::EndIf => self.end_if(k),
            Op::Range => self.range(k),
            Op::EndRange => self.end_range(k),
            Op::WhileBegin => self.while_begin(k),
            Op::WhileCond => self.while_cond(k),
            Op::WhileEnd => self.while_end(k),
            Op::Accumulator => self.accumulator(k),
            Op::Accumulate => self.accumulate(k),
            _ => Err(self.err(Some(k), format!("{} is not emitted here", row.name))),
        }
    }

    /// The literal of a CONST.
    pub(super) fn constant(&mut self, k: usize) -> Emitted {
        let dag = self.dag;
        let e = &dag.expressions[k];
        let d = self.declared(k)?;
        let lit = self.literal(d, e.float_value, e.int_value, e.uint_value);
        self.line(&format!("const {} v{k} = {lit};", ctype(d)));
        let value = d.int_literal(e.int_value, e.uint_value);
        self.consts[k] = value;
        Ok(Some(d))
    }

    /// A component of the worker position.
    pub(super) fn position(&mut self, k: usize) -> Emitted {
        let dag = self.dag;
        let e = &dag.expressions[k];
        let axis = e.axis as usize;
        if axis >= self.sizes.len() {
            return Err(self.err(Some(k), format!("axis {axis} is outside the workgroup")));
        }
        if self.blocked.is_some() && axis + 1 == self.workgroup.len() {
            // The worker of this lane of the block.
            self.line(&format!("const int64_t v{k} = ovl_p{axis} + ovl_j;"));
        } else {
            self.line(&format!("const int64_t v{k} = ovl_p{axis};"));
        }
        Ok(Some(DType::I64))
    }

    /// SYMBOL: the value of symbol `axis` the operator runs with (a kernel parameter).
    pub(super) fn symbol(&mut self, k: usize) -> Emitted {
        let symbol = self.dag.expressions[k].axis;
        if symbol >= self.symbol_count {
            return Err(self.err(
                Some(k),
                format!(
                    "reads symbol {symbol} but the operator takes {} symbol value(s)",
                    self.symbol_count
                ),
            ));
        }
        self.line(&format!("const int64_t v{k} = ovl_S{symbol};"));
        Ok(Some(DType::I64))
    }

    /// A CAST (saturating float-to-integer, `!= 0` to bool).
    pub(super) fn cast(&mut self, k: usize) -> Emitted {
        let (a, from) = self.operand(k, 0)?;
        let to = self.declared(k)?;
        let ct = ctype(to);
        let x = format!("v{a}");
        let expr = if to == DType::Bool {
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
        self.line(&format!("const {ct} v{k} = {expr};"));
        Ok(Some(to))
    }

    /// SELECT: `c ? a : b` (`ovl::pick(c, a, b)` for floats).
    pub(super) fn select(&mut self, k: usize) -> Emitted {
        let (c, _) = self.operand(k, 0)?;
        let (a, d) = self.operand(k, 1)?;
        let (b, _) = self.operand(k, 2)?;
        // Floats through `ovl::pick`, which GCC if-converts (ARCHITECTURE.md, ovl-codegen).
        let value = if d.is_float() {
            format!("ovl::pick(v{c}, v{a}, v{b})")
        } else {
            format!("v{c} ? v{a} : v{b}")
        };
        self.line(&format!("const {} v{k} = {value};", ctype(d)));
        Ok(Some(d))
    }

    /// FMA, spelled as the op table says.
    pub(super) fn fma(&mut self, k: usize, row: &OpInfo) -> Emitted {
        let (a, d) = self.operand(k, 0)?;
        let (b, _) = self.operand(k, 1)?;
        let (c, _) = self.operand(k, 2)?;
        let args = [format!("v{a}"), format!("v{b}"), format!("v{c}")];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let Some(expr) = row.spelling.for_dtype(d).apply(&args) else {
            return Err(self.err(Some(k), format!("fma does not take {d} operands")));
        };
        self.line(&format!("const {} v{k} = {expr};", ctype(d)));
        Ok(Some(d))
    }

    /// A unary op, spelled as the op table says for the operand's dtype.
    pub(super) fn unary(&mut self, k: usize, row: &OpInfo) -> Emitted {
        let (a, d) = self.operand(k, 0)?;
        let x = format!("v{a}");
        let Some(expr) = row.spelling.for_dtype(d).apply(&[&x]) else {
            return Err(self.err(Some(k), format!("{} does not take a {d} operand", row.name)));
        };
        let rd = if row.result == ResultRule::Bool {
            DType::Bool
        } else {
            d
        };
        self.line(&format!("const {} v{k} = {expr};", ctype(rd)));
        Ok(Some(rd))
    }

    /// A binary or comparison op, spelled as the op table says for the operands' dtype.
    pub(super) fn binary(&mut self, k: usize, row: &OpInfo) -> Emitted {
        let (a, d) = self.operand(k, 0)?;
        let (b, _) = self.operand(k, 1)?;
        let (x, y) = (format!("v{a}"), format!("v{b}"));
        let Some(expr) = row.spelling.for_dtype(d).apply(&[&x, &y]) else {
            return Err(self.err(Some(k), format!("{} does not take {d} operands", row.name)));
        };
        let rd = if row.result == ResultRule::Bool {
            DType::Bool
        } else {
            d
        };
        self.line(&format!("const {} v{k} = {expr};", ctype(rd)));
        Ok(Some(rd))
    }
}

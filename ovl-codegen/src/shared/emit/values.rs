//! Scalar values: constants, positions, symbols, casts, selects, fused multiply-adds and the
//! unary and binary operations of the op table.

use super::{Emitted, Emitter};
use crate::shared::bounds::{Interval, SymBound};
use crate::shared::literal::{ctype, int_literal_value};
use crate::shared::sizes::Size;
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
        self.operand_count(k, 0)?;
        let d = self.declared(k)?;
        let lit = self.literal(d, e.float_value, e.int_value, e.uint_value);
        self.line(&format!("const {} v{k} = {lit};", ctype(d)));
        let value = int_literal_value(d, e.int_value, e.uint_value);
        self.consts[k] = value;
        Ok((Some(d), value.map(Interval::point)))
    }

    /// A component of the worker position.
    pub(super) fn position(&mut self, k: usize) -> Emitted {
        let dag = self.dag;
        let e = &dag.expressions[k];
        self.operand_count(k, 0)?;
        self.check_result(k, DType::I64)?;
        let axis = e.axis as usize;
        let Some(&size) = self.sizes.get(axis) else {
            return Err(self.err(Some(k), format!("axis {axis} is outside the workgroup")));
        };
        if self.blocked.is_some() && axis + 1 == self.workgroup.len() {
            // The worker of this lane of the block.
            self.line(&format!("const int64_t v{k} = ovl_p{axis} + ovl_j;"));
        } else {
            self.line(&format!("const int64_t v{k} = ovl_p{axis};"));
        }
        let hi = match size {
            Size::Known(n) => n as i128 - 1,
            Size::Symbolic {
                symbol,
                scale,
                offset,
            } => {
                self.sym_bounds[k] = Some(SymBound::new(symbol, scale, offset as i128 - 1));
                // A workgroup has at most i64::MAX workers.
                i64::MAX as i128 - 1
            }
        };
        Ok((Some(DType::I64), Some(Interval::new(0, hi))))
    }

    /// SYMBOL: the value of symbol `axis` the operator runs with (a kernel parameter).
    pub(super) fn symbol(&mut self, k: usize) -> Emitted {
        self.operand_count(k, 0)?;
        self.check_result(k, DType::I64)?;
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
        self.sym_bounds[k] = Some(SymBound::new(symbol, 1, 0));
        Ok((Some(DType::I64), Some(Interval::new(0, i64::MAX as i128))))
    }

    /// A CAST (saturating float-to-integer, `!= 0` to bool).
    pub(super) fn cast(&mut self, k: usize) -> Emitted {
        self.operand_count(k, 1)?;
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
        let iv = if to.is_float() {
            None
        } else if from.is_float() {
            Interval::of_dtype(to)
        } else {
            let before = self.interval(a);
            let after = before.and_then(|iv| iv.fit(to));
            if to != DType::Bool && after.is_some() && after == before {
                // The value is unchanged: so is its bound.
                self.sym_bounds[k] = self.sym_bounds[a];
            }
            after
        };
        Ok((Some(to), iv))
    }

    /// SELECT: `c ? a : b` (`ovl::pick(c, a, b)` for floats).
    pub(super) fn select(&mut self, k: usize) -> Emitted {
        self.operand_count(k, 3)?;
        let (c, cd) = self.operand(k, 0)?;
        let (a, d) = self.operand(k, 1)?;
        let (b, bd) = self.operand(k, 2)?;
        if cd != DType::Bool || d != bd {
            return Err(self.err(
                Some(k),
                "select needs a bool condition and two values of one dtype",
            ));
        }
        self.check_result(k, d)?;
        // Floats through `ovl::pick`, which GCC if-converts (ARCHITECTURE.md, ovl-codegen).
        let value = if d.is_float() {
            format!("ovl::pick(v{c}, v{a}, v{b})")
        } else {
            format!("v{c} ? v{a} : v{b}")
        };
        self.line(&format!("const {} v{k} = {value};", ctype(d)));
        let iv = match (self.interval(a), self.interval(b)) {
            (Some(x), Some(y)) => Some(x.union(y)),
            _ => None,
        };
        Ok((Some(d), iv))
    }

    /// FMA, spelled as the op table says.
    pub(super) fn fma(&mut self, k: usize, row: &OpInfo) -> Emitted {
        self.operand_count(k, 3)?;
        let (a, d) = self.operand(k, 0)?;
        let (b, bd) = self.operand(k, 1)?;
        let (c, cd) = self.operand(k, 2)?;
        if !d.is_float() || bd != d || cd != d {
            return Err(self.err(Some(k), "fma needs three float operands of one dtype"));
        }
        self.check_result(k, d)?;
        let args = [format!("v{a}"), format!("v{b}"), format!("v{c}")];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let expr = row
            .spelling
            .for_dtype(d)
            .apply(&args)
            .expect("fma takes floats");
        self.line(&format!("const {} v{k} = {expr};", ctype(d)));
        Ok((Some(d), None))
    }

    /// A unary op, spelled as the op table says for the operand's dtype.
    pub(super) fn unary(&mut self, k: usize, row: &OpInfo) -> Emitted {
        self.operand_count(k, 1)?;
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
        self.check_result(k, rd)?;
        self.line(&format!("const {} v{k} = {expr};", ctype(rd)));
        let iv = match row.op {
            Op::Neg if d.is_int() => self
                .interval(a)
                .and_then(|iv| Interval::point(0).sub(iv))
                .and_then(|iv| iv.fit(d)),
            _ => None,
        };
        Ok((Some(rd), iv))
    }

    /// A binary or comparison op, spelled as the op table says for the operands' dtype.
    pub(super) fn binary(&mut self, k: usize, row: &OpInfo) -> Emitted {
        self.operand_count(k, 2)?;
        let (a, d) = self.operand(k, 0)?;
        let (b, bd) = self.operand(k, 1)?;
        if d != bd {
            return Err(self.err(
                Some(k),
                format!("operands of different dtypes ({d} and {bd})"),
            ));
        }
        let (x, y) = (format!("v{a}"), format!("v{b}"));
        let i = d.is_int();
        let Some(expr) = row.spelling.for_dtype(d).apply(&[&x, &y]) else {
            return Err(self.err(Some(k), format!("{} does not take {d} operands", row.name)));
        };
        let rd = if row.result == ResultRule::Bool {
            DType::Bool
        } else {
            d
        };
        self.check_result(k, rd)?;
        self.line(&format!("const {} v{k} = {expr};", ctype(rd)));
        let iv = if i {
            match (self.interval(a), self.interval(b)) {
                (Some(p), Some(q)) => {
                    let raw = match row.op {
                        Op::Add => p.add(q),
                        Op::Sub => p.sub(q),
                        Op::Mul => p.mul(q),
                        Op::Div => p.div(q),
                        Op::Mod => p.rem(q),
                        Op::Min => Some(p.min(q)),
                        Op::Max => Some(p.max(q)),
                        _ => None,
                    };
                    let fitted = raw.and_then(|iv| iv.fit(d));
                    if fitted.is_some() && fitted == raw {
                        // No wrap-around: a symbolic bound carries over.
                        self.sym_bounds[k] = self.binary_bound(row.op, (a, p), (b, q));
                    }
                    fitted
                }
                _ => None,
            }
        } else {
            None
        };
        Ok((Some(rd), iv))
    }

    /// The symbolic bound of `a op b` (operands with intervals `p`, `q`), computed without
    /// wrap-around.
    pub(super) fn binary_bound(
        &self,
        op: Op,
        (a, p): (usize, Interval),
        (b, q): (usize, Interval),
    ) -> Option<SymBound> {
        let (ba, bb) = (self.sym_bounds[a], self.sym_bounds[b]);
        let constant = |iv: Interval| (iv.lo == iv.hi).then_some(iv.lo);
        match op {
            Op::Add => ba
                .and_then(|x| x.shift(q.hi))
                .or_else(|| bb.and_then(|x| x.shift(p.hi))),
            Op::Sub => ba.and_then(|x| x.shift(-q.lo)),
            Op::Mul => ba
                .zip(constant(q))
                .and_then(|(x, m)| x.times(m))
                .or_else(|| bb.zip(constant(p)).and_then(|(x, m)| x.times(m))),
            Op::Min => ba.or(bb),
            _ => None,
        }
    }
}

//! The checks of each kind of expression, as the op table classifies them: leaves, tensor
//! accesses, variables, accumulators, elementwise and ternary operations, control flow.

use super::checker::{check_literal, Check, Checker, FrameKind};
use crate::dtype::DType;
use crate::ir::{self, Op, TensorKind};
use crate::names::{dtype_name, op_name, tensor_ref_name};
use crate::ops::{Combiner, OpInfo, ResultRule};

impl Checker<'_> {
    /// CONST, POSITION.
    pub(super) fn leaf(&mut self, i: usize, row: &OpInfo) -> Check<Option<DType>> {
        let e = &self.dag.expressions[i];
        self.expect_arity(i, row)?;
        let d = self.declared_dtype(i)?;
        if row.op == Op::Const {
            check_literal(e, d).map_err(|m| self.expr_error(i, m))?;
            return Ok(Some(d));
        }
        if row.op == Op::Symbol {
            self.expect_result(i, d, DType::I64, "a symbol's value")?;
            if e.axis >= self.dag.symbol_count {
                return Err(self.expr_error(
                    i,
                    format!(
                        "symbol {} is out of range: the operator takes {} symbol value(s) \
                         (symbol_count)",
                        e.axis, self.dag.symbol_count
                    ),
                ));
            }
            return Ok(Some(d));
        }
        self.expect_result(i, d, DType::I64, "a position component")?;
        let rank = self.dag.workgroup_shape.len();
        if e.axis as usize >= rank {
            return Err(self.expr_error(
                i,
                format!(
                    "axis {} is out of range: the workgroup {:?} has rank {rank}",
                    e.axis, self.dag.workgroup_shape
                ),
            ));
        }
        Ok(Some(d))
    }

    /// READ, WRITE, LOCAL_TENSOR.
    pub(super) fn tensor_access(&mut self, i: usize, row: &OpInfo) -> Check<Option<DType>> {
        let e = &self.dag.expressions[i];
        let n = e.operands.len();
        match row.op {
            Op::Read => {
                let (kind, index, t) = self.tensor(i)?;
                if kind == TensorKind::Output {
                    return Err(self.expr_error(
                        i,
                        format!(
                            "it reads output {index}, but outputs are write-only; read an input \
                             or a local tensor"
                        ),
                    ));
                }
                let rank = t.shape.len();
                if n != rank {
                    return Err(self.expr_error(
                        i,
                        format!(
                            "{} has rank {rank} (shape {:?}) but is read with {n} index operand(s)",
                            tensor_ref_name(e.tensor.as_ref().expect("checked")),
                            t.shape
                        ),
                    ));
                }
                self.indices(i, rank)?;
                self.local_initialized(i, kind, index)?;
                let d = self.declared_dtype(i)?;
                let td = DType::from_ir(t.dtype).expect("tensor types checked first");
                self.expect_result(i, d, td, "the dtype of the tensor it reads")?;
                Ok(Some(d))
            }
            Op::Write => {
                self.expect_statement(i)?;
                let (kind, index, t) = self.tensor(i)?;
                if kind == TensorKind::Input {
                    return Err(self.expr_error(
                        i,
                        format!(
                            "it writes input {index}, but inputs are read-only; write an output \
                             or a local tensor"
                        ),
                    ));
                }
                let rank = t.shape.len();
                if n != rank + 1 {
                    return Err(self.expr_error(
                        i,
                        format!(
                            "{} has rank {rank} (shape {:?}), so a write takes {rank} index \
                             operand(s) and the value, found {n} operand(s)",
                            tensor_ref_name(e.tensor.as_ref().expect("checked")),
                            t.shape
                        ),
                    ));
                }
                self.indices(i, rank)?;
                self.local_initialized(i, kind, index)?;
                let v = self.operand(i, rank)?;
                let td = DType::from_ir(t.dtype).expect("tensor types checked first");
                if v != td {
                    return Err(self.expr_error(
                        i,
                        format!(
                            "the value written has dtype {v} but {} holds {td}; cast it first",
                            tensor_ref_name(e.tensor.as_ref().expect("checked"))
                        ),
                    ));
                }
                Ok(None)
            }
            _ => {
                // LOCAL_TENSOR
                self.expect_arity(i, row)?;
                let (kind, index, t) = self.tensor(i)?;
                if kind != TensorKind::Local {
                    return Err(self.expr_error(
                        i,
                        format!(
                            "it initializes {}, but only local tensors can be initialized",
                            tensor_ref_name(e.tensor.as_ref().expect("checked"))
                        ),
                    ));
                }
                let td = DType::from_ir(t.dtype).expect("tensor types checked first");
                if e.dtype != ir::Dtype::Unspecified as i32 && e.dtype != t.dtype {
                    return Err(self.expr_error(
                        i,
                        format!(
                            "its dtype {} differs from the dtype {td} of local {index}; use \
                             DTYPE_UNSPECIFIED or the local's dtype",
                            dtype_name(e.dtype)
                        ),
                    ));
                }
                check_literal(e, td).map_err(|m| self.expr_error(i, m))?;
                self.local_initialized[index] = true;
                Ok(None)
            }
        }
    }

    /// VARIABLE, ASSIGN.
    pub(super) fn variable(&mut self, i: usize, row: &OpInfo) -> Check<Option<DType>> {
        match row.op {
            Op::Accumulator => return self.accumulator(i, row),
            Op::Accumulate => return self.accumulate(i, row),
            _ => {}
        }
        if row.op == Op::Variable {
            self.expect_arity(i, row)?;
            let init = self.operand(i, 0)?;
            let d = self.declared_dtype(i)?;
            self.expect_result(i, d, init, "the dtype of its initial value")?;
            return Ok(Some(d));
        }
        self.expect_statement(i)?;
        self.expect_arity(i, row)?;
        let var = self.operand(i, 0)?;
        let target = self.dag.expressions[i].operands[0] as usize;
        if self.dag.expressions[target].code != Op::Variable as i32 {
            return Err(self.expr_error(
                i,
                format!(
                    "operand 0 must be a variable expression, but %{target} is {}; only \
                     variables can be assigned",
                    op_name(self.dag.expressions[target].code)
                ),
            ));
        }
        let v = self.operand(i, 1)?;
        if v != var {
            return Err(self.expr_error(
                i,
                format!(
                    "the value has dtype {v} but the variable %{target} has dtype {var}; cast \
                     the value first"
                ),
            ));
        }
        Ok(None)
    }

    /// ACCUMULATOR: a numeric initial value and a combiner.
    pub(super) fn accumulator(&mut self, i: usize, row: &OpInfo) -> Check<Option<DType>> {
        self.expect_arity(i, row)?;
        let init = self.operand(i, 0)?;
        if !row.operands.accepts(init) {
            return Err(self.expr_error(
                i,
                format!(
                    "an accumulator takes {}, found {init}",
                    row.operands.describe()
                ),
            ));
        }
        let d = self.declared_dtype(i)?;
        self.expect_result(i, d, init, "the dtype of its initial value")?;
        let code = self.dag.expressions[i].int_value;
        if Combiner::from_code(code).is_none() {
            return Err(self.expr_error(
                i,
                format!("int_value {code} is not a combiner (1 sum, 2 product, 3 min, 4 max)"),
            ));
        }
        Ok(Some(d))
    }

    /// ACCUMULATE: into an accumulator, inside a RANGE opened after it, a value of its dtype.
    pub(super) fn accumulate(&mut self, i: usize, row: &OpInfo) -> Check<Option<DType>> {
        self.expect_statement(i)?;
        self.expect_arity(i, row)?;
        let acc_dtype = self.visible_operand(i, 0)?;
        let acc = self.dag.expressions[i].operands[0] as usize;
        if self.dag.expressions[acc].code != Op::Accumulator as i32 {
            return Err(self.expr_error(
                i,
                format!(
                    "operand 0 must be an accumulator expression, but %{acc} is {}",
                    op_name(self.dag.expressions[acc].code)
                ),
            ));
        }
        match self.loops[i] {
            Some(r) if self.dag.expressions[r].code == Op::Range as i32 && r > acc => {}
            _ => {
                return Err(self.expr_error(
                    i,
                    format!(
                        "an accumulate must be inside a `for` loop (a range) that starts after its \
                         accumulator %{acc} and is its innermost loop; outside such a loop (or in a \
                         `while` loop) update a variable instead"
                    ),
                ))
            }
        }
        let v = self.operand(i, 1)?;
        if v != acc_dtype {
            return Err(self.expr_error(
                i,
                format!(
                    "the value has dtype {v} but the accumulator %{acc} has dtype {acc_dtype}; \
                     cast the value first"
                ),
            ));
        }
        Ok(None)
    }

    /// Unary, binary and comparison ops: operands of one dtype in the row's class; the result
    /// is that dtype or bool, as the row says.
    pub(super) fn elementwise(&mut self, i: usize, row: &OpInfo) -> Check<Option<DType>> {
        self.expect_arity(i, row)?;
        let a = self.operand(i, 0)?;
        if row.arity == Some(2) {
            let b = self.operand(i, 1)?;
            if a != b {
                return Err(self.expr_error(
                    i,
                    format!(
                        "operands have different dtypes ({a} and {b}); binary operations need \
                         equal dtypes, cast one operand explicitly"
                    ),
                ));
            }
        }
        if !row.operands.accepts(a) {
            return Err(self.expr_error(i, format!("takes {}, found {a}", row.operands.describe())));
        }
        let d = self.declared_dtype(i)?;
        let expected = if row.result == ResultRule::Bool {
            DType::Bool
        } else {
            a
        };
        self.expect_result(i, d, expected, "its result dtype")?;
        Ok(Some(d))
    }

    /// SELECT, FMA.
    pub(super) fn ternary(&mut self, i: usize, row: &OpInfo) -> Check<Option<DType>> {
        self.expect_arity(i, row)?;
        let why = if row.op == Op::Select {
            let c = self.operand(i, 0)?;
            if c != DType::Bool {
                return Err(self.expr_error(
                    i,
                    format!("the condition (operand 0) must be bool, found {c}"),
                ));
            }
            let a = self.operand(i, 1)?;
            let b = self.operand(i, 2)?;
            if a != b {
                return Err(self.expr_error(
                    i,
                    format!(
                        "the two alternatives have different dtypes ({a} and {b}); cast one of \
                         them"
                    ),
                ));
            }
            (a, "the dtype of its alternatives")
        } else {
            let a = self.operand(i, 0)?;
            let b = self.operand(i, 1)?;
            let c = self.operand(i, 2)?;
            if a != b || a != c {
                return Err(self.expr_error(
                    i,
                    format!("operands have different dtypes ({a}, {b}, {c}); cast them"),
                ));
            }
            if !row.operands.accepts(a) {
                return Err(
                    self.expr_error(i, format!("takes {}, found {a}", row.operands.describe()))
                );
            }
            (a, "the dtype of its operands")
        };
        let d = self.declared_dtype(i)?;
        self.expect_result(i, d, why.0, why.1)?;
        Ok(Some(d))
    }

    /// IF ... WHILE_END: statements (but RANGE, whose value is the loop index) that open,
    /// split and close blocks.
    pub(super) fn control(&mut self, i: usize, row: &OpInfo) -> Check<Option<DType>> {
        if row.op == Op::Range {
            self.expect_arity(i, row)?;
            for k in 0..3 {
                let d = self.operand(i, k)?;
                if !row.operands.accepts(d) {
                    return Err(self.expr_error(
                        i,
                        format!(
                            "operand {k} ({}) has dtype {d}; range bounds must be i64",
                            ["start", "end", "step"][k]
                        ),
                    ));
                }
            }
            let d = self.declared_dtype(i)?;
            self.expect_result(i, d, DType::I64, "a loop index")?;
            self.push_frame(FrameKind::Range, i);
            return Ok(Some(d));
        }
        self.expect_statement(i)?;
        self.expect_arity(i, row)?;
        if row.arity == Some(1) {
            // IF and WHILE_COND: a bool condition.
            let c = self.operand(i, 0)?;
            if c != DType::Bool {
                let what = if row.op == Op::If {
                    "the condition"
                } else {
                    "the loop condition"
                };
                return Err(self.expr_error(i, format!("{what} must be bool, found {c}")));
            }
        }
        match row.op {
            Op::If => {
                self.push_frame(FrameKind::IfThen, i);
            }
            Op::Else => {
                let f = self.pop_frame(i, &[FrameKind::IfThen], "else")?;
                self.push_frame(FrameKind::IfElse, f.opener);
            }
            Op::EndIf => {
                self.pop_frame(i, &[FrameKind::IfThen, FrameKind::IfElse], "end_if")?;
            }
            Op::EndRange => {
                self.pop_frame(i, &[FrameKind::Range], "end_range")?;
            }
            Op::WhileBegin => {
                self.push_frame(FrameKind::WhileCond, i);
            }
            Op::WhileCond => match self.stack.last_mut() {
                Some(f) if f.kind == FrameKind::WhileCond => {
                    // The condition's values stay visible in the body: same region.
                    f.kind = FrameKind::WhileBody;
                }
                _ => {
                    let inner = self
                        .stack
                        .last()
                        .map(|f| format!("{} opened by %{}", f.kind.describe(), f.opener))
                        .unwrap_or_else(|| "no open block".into());
                    return Err(self.expr_error(
                        i,
                        format!(
                            "while_cond must directly follow the condition of a while_begin, but \
                             the innermost block is {inner}"
                        ),
                    ));
                }
            },
            _ => {
                // WHILE_END
                self.pop_frame(i, &[FrameKind::WhileBody], "while_end")?;
            }
        }
        Ok(None)
    }
}

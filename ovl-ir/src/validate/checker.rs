//! One operator's validation: the checker's state (open blocks, visible values, initialized
//! locals), the checks every expression shares and [`validate`].

use super::ValidationError;
use crate::dtype::DType;
use crate::ir::{self, Op, TensorKind};
use crate::names::{defined_at, dtype_name, kind_word, op_name, tensor_ref_name};
use crate::ops::{self, Category, OpInfo};
use crate::shape::element_count;

/// Checks that a literal held in `e` fits `dtype` (integers in range, bool 0 or 1).
pub(super) fn check_literal(e: &ir::Expression, dtype: DType) -> Result<(), String> {
    let fits = match dtype {
        DType::F32 | DType::F64 => return Ok(()),
        DType::F16 | DType::BF16 => {
            return crate::half_float::check_literal(dtype, e.float_value)
                .map_err(|err| err.to_string())
        }
        DType::I8 => i8::try_from(e.int_value).is_ok(),
        DType::I16 => i16::try_from(e.int_value).is_ok(),
        DType::I32 => i32::try_from(e.int_value).is_ok(),
        DType::I64 => true,
        DType::U8 => u8::try_from(e.uint_value).is_ok(),
        DType::U16 => u16::try_from(e.uint_value).is_ok(),
        DType::U32 => u32::try_from(e.uint_value).is_ok(),
        DType::U64 => true,
        DType::Bool => e.int_value == 0 || e.int_value == 1,
    };
    if fits {
        return Ok(());
    }
    Err(match dtype {
        DType::Bool => format!(
            "a bool literal is held in int_value as 0 or 1, found {}",
            e.int_value
        ),
        d if d.is_unsigned_int() => format!(
            "the literal {} (uint_value) does not fit in {d}",
            e.uint_value
        ),
        d => format!(
            "the literal {} (int_value) does not fit in {d}",
            e.int_value
        ),
    })
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum FrameKind {
    IfThen,
    IfElse,
    Range,
    /// Between WHILE_BEGIN and WHILE_COND.
    WhileCond,
    /// Between WHILE_COND and WHILE_END.
    WhileBody,
}

impl FrameKind {
    pub(super) fn describe(self) -> &'static str {
        match self {
            FrameKind::IfThen => "an `if` block (closed by end_if)",
            FrameKind::IfElse => "an `else` block (closed by end_if)",
            FrameKind::Range => "a `range` loop (closed by end_range)",
            FrameKind::WhileCond => "the condition of a `while` loop (closed by while_cond)",
            FrameKind::WhileBody => "the body of a `while` loop (closed by while_end)",
        }
    }
}

pub(super) struct Frame {
    pub(super) kind: FrameKind,
    /// The region of the expressions inside the block.
    pub(super) region: usize,
    /// The expression that opened it.
    pub(super) opener: usize,
}

/// The context of one operator's validation: builds the errors.
pub(super) struct Checker<'a> {
    pub(super) dag: &'a ir::ExpressionDag,
    pub(super) defined_at: String,
    /// The value dtype of each checked expression (None: a statement).
    pub(super) value: Vec<Option<DType>>,
    /// The region each checked expression is defined in.
    pub(super) region_of: Vec<usize>,
    /// Whether each region is still open.
    pub(super) open: Vec<bool>,
    pub(super) stack: Vec<Frame>,
    pub(super) local_initialized: Vec<bool>,
    /// The innermost loop around each expression (`analysis::innermost_loops`).
    pub(super) loops: Vec<Option<usize>>,
    /// Each reduction loop's accumulators (`analysis::reduction_loops`).
    pub(super) reductions: std::collections::BTreeMap<usize, Vec<usize>>,
}

pub(super) type Check<T> = Result<T, ValidationError>;

impl<'a> Checker<'a> {
    pub(super) fn operator_error(&self, message: impl Into<String>) -> ValidationError {
        ValidationError::Operator {
            operator: self.dag.name.clone(),
            defined_at: self.defined_at.clone(),
            message: message.into(),
        }
    }

    pub(super) fn expr_error(&self, index: usize, message: impl Into<String>) -> ValidationError {
        ValidationError::Expression {
            operator: self.dag.name.clone(),
            defined_at: self.defined_at.clone(),
            index,
            op: op_name(self.dag.expressions[index].code),
            message: message.into(),
        }
    }

    pub(super) fn current_region(&self) -> usize {
        self.stack.last().map_or(0, |f| f.region)
    }

    pub(super) fn push_frame(&mut self, kind: FrameKind, opener: usize) -> usize {
        let region = self.open.len();
        self.open.push(true);
        self.stack.push(Frame {
            kind,
            region,
            opener,
        });
        region
    }

    /// Closes the innermost block, which must be of one of `kinds`.
    pub(super) fn pop_frame(
        &mut self,
        i: usize,
        kinds: &[FrameKind],
        closer: &str,
    ) -> Check<Frame> {
        match self.stack.last() {
            Some(f) if kinds.contains(&f.kind) => {
                let f = self.stack.pop().expect("checked non-empty");
                self.open[f.region] = false;
                Ok(f)
            }
            Some(f) => Err(self.expr_error(
                i,
                format!(
                    "{closer} does not match the innermost open block, which is {} opened by \
                     expression %{}; blocks must be properly nested",
                    f.kind.describe(),
                    f.opener
                ),
            )),
            None => Err(self.expr_error(
                i,
                format!("{closer} appears outside any block: there is nothing to close"),
            )),
        }
    }

    pub(super) fn expect_operand_count(&self, i: usize, n: usize, what: &str) -> Check<()> {
        let got = self.dag.expressions[i].operands.len();
        if got != n {
            return Err(self.expr_error(i, format!("expects {n} operand(s) ({what}), found {got}")));
        }
        Ok(())
    }

    /// Checks operand `k` of expression `i` and returns its dtype.
    pub(super) fn operand(&self, i: usize, k: usize) -> Check<DType> {
        let d = self.visible_operand(i, k)?;
        let id = self.dag.expressions[i].operands[k] as usize;
        if let Some(r) = self.reducing_loop(id) {
            return Err(self.expr_error(
                i,
                format!(
                    "operand {k} is %{id}, an accumulator that the loop %{r} reduces, inside that \
                     loop; an accumulator's value is defined after its loop: read it there"
                ),
            ));
        }
        Ok(d)
    }

    /// The open RANGE (if any) that reduces accumulator `id`.
    pub(super) fn reducing_loop(&self, id: usize) -> Option<usize> {
        if self.dag.expressions[id].code != Op::Accumulator as i32 {
            return None;
        }
        self.stack
            .iter()
            .filter(|f| f.kind == FrameKind::Range)
            .map(|f| f.opener)
            .find(|r| {
                self.reductions
                    .get(r)
                    .is_some_and(|accs| accs.contains(&id))
            })
    }

    /// Operand `k` of expression `i`: an earlier, visible, value-producing expression.
    pub(super) fn visible_operand(&self, i: usize, k: usize) -> Check<DType> {
        let e = &self.dag.expressions[i];
        let Some(&id) = e.operands.get(k) else {
            return Err(self.expr_error(i, format!("operand {k} is missing")));
        };
        let id = id as usize;
        if id >= i {
            return Err(self.expr_error(
                i,
                format!(
                    "operand {k} is %{id}, which is not an earlier expression; operands must refer \
                     to expressions before %{i} in program order"
                ),
            ));
        }
        let Some(dtype) = self.value[id] else {
            return Err(self.expr_error(
                i,
                format!(
                    "operand {k} is %{id} ({}), a statement that produces no value",
                    op_name(self.dag.expressions[id].code)
                ),
            ));
        };
        if !self.open[self.region_of[id]] {
            return Err(self.expr_error(
                i,
                format!(
                    "operand {k} is %{id}, which is defined inside an `if`, `for` or `while` block \
                     that has ended (or in the other branch of an `if`); a value computed inside a \
                     block is only usable inside it: declare a variable before the block and \
                     assign it inside"
                ),
            ));
        }
        Ok(dtype)
    }

    /// The expression's declared value dtype, which must be a supported one.
    pub(super) fn declared_dtype(&self, i: usize) -> Check<DType> {
        let e = &self.dag.expressions[i];
        DType::from_ir(e.dtype).ok_or_else(|| {
            self.expr_error(
                i,
                format!(
                    "its dtype {} is not a supported value dtype (f32 f64 i8 i16 i32 i64 u8 u16 \
                     u32 u64 bool)",
                    dtype_name(e.dtype)
                ),
            )
        })
    }

    pub(super) fn expect_result(
        &self,
        i: usize,
        declared: DType,
        expected: DType,
        why: &str,
    ) -> Check<()> {
        if declared != expected {
            return Err(self.expr_error(
                i,
                format!("its dtype is {declared} but {why} is {expected}"),
            ));
        }
        Ok(())
    }

    pub(super) fn expect_statement(&self, i: usize) -> Check<()> {
        let e = &self.dag.expressions[i];
        if e.dtype != ir::Dtype::Unspecified as i32 {
            return Err(self.expr_error(
                i,
                format!(
                    "a statement produces no value: its dtype must be DTYPE_UNSPECIFIED, found {}",
                    dtype_name(e.dtype)
                ),
            ));
        }
        Ok(())
    }

    /// Checks the tensor reference of expression `i` and returns its kind, index and type.
    pub(super) fn tensor(&self, i: usize) -> Check<(TensorKind, usize, &'a ir::TensorType)> {
        let e = &self.dag.expressions[i];
        let Some(r) = &e.tensor else {
            return Err(self.expr_error(i, "its tensor reference is missing"));
        };
        let kind = TensorKind::try_from(r.kind).unwrap_or(TensorKind::Unspecified);
        let list = match kind {
            TensorKind::Input => &self.dag.inputs,
            TensorKind::Output => &self.dag.outputs,
            TensorKind::Local => &self.dag.locals,
            TensorKind::Unspecified => {
                return Err(self.expr_error(
                    i,
                    format!(
                        "its tensor reference has kind {}, which is not input, output or local",
                        r.kind
                    ),
                ))
            }
        };
        let index = r.index as usize;
        match list.get(index) {
            Some(t) => Ok((kind, index, t)),
            None => Err(self.expr_error(
                i,
                format!(
                    "it refers to {}, but the operator has {} {}(s)",
                    tensor_ref_name(r),
                    list.len(),
                    kind_word(kind)
                ),
            )),
        }
    }

    /// Checks the index operands `0..rank` of a READ or WRITE.
    pub(super) fn indices(&self, i: usize, rank: usize) -> Check<()> {
        for k in 0..rank {
            let d = self.operand(i, k)?;
            if !d.is_int() {
                return Err(self.expr_error(
                    i,
                    format!("index operand {k} has dtype {d}; tensor indices must be integers"),
                ));
            }
        }
        Ok(())
    }

    pub(super) fn local_initialized(&self, i: usize, kind: TensorKind, index: usize) -> Check<()> {
        if kind == TensorKind::Local && !self.local_initialized[index] {
            return Err(self.expr_error(
                i,
                format!(
                    "local {index} is used before its local_tensor expression initializes it; \
                     the local_tensor expression must come first in program order"
                ),
            ));
        }
        Ok(())
    }

    /// Checks expression `i` and returns its value dtype (None for statements). The op table
    /// gives the operand count, classes and result rule; each category has its own checker.
    pub(super) fn expression(&mut self, i: usize) -> Check<Option<DType>> {
        let code = self.dag.expressions[i].code;
        let Some(row) = ops::info_of_code(code) else {
            return Err(self.expr_error(i, format!("opcode {code} is not a known operation")));
        };
        match row.category {
            Category::Leaf => self.leaf(i, row),
            Category::Tensor => self.tensor_access(i, row),
            Category::Variable => self.variable(i, row),
            Category::Cast => {
                self.expect_arity(i, row)?;
                self.operand(i, 0)?;
                Ok(Some(self.declared_dtype(i)?))
            }
            Category::Unary | Category::Binary | Category::Compare => self.elementwise(i, row),
            Category::Ternary => self.ternary(i, row),
            Category::Control => self.control(i, row),
        }
    }

    /// The operand count the table gives for `row`.
    pub(super) fn expect_arity(&self, i: usize, row: &OpInfo) -> Check<()> {
        match row.arity {
            Some(n) => self.expect_operand_count(i, n, row.operand_names),
            None => Ok(()),
        }
    }

    pub(super) fn tensor_types(&self, what: &str, list: &[ir::TensorType]) -> Check<()> {
        for (k, t) in list.iter().enumerate() {
            if DType::from_ir(t.dtype).is_none() {
                return Err(self.operator_error(format!(
                    "{what} {k} has dtype {}, which is not supported",
                    dtype_name(t.dtype)
                )));
            }
            if element_count(&t.shape).is_none() {
                return Err(self.operator_error(format!(
                    "{what} {k} has shape {:?}, whose element count does not fit in memory \
                     addresses",
                    t.shape
                )));
            }
        }
        Ok(())
    }
}

/// Checks one operator against every invariant of `proto/ovl.proto`.
///
/// On success every backend may rely on: the version is [`crate::IR_VERSION`]; the workgroup has
/// rank >= 1 (a zero dimension means no worker at all: `ovl` then runs nothing and launches no
/// kernel); every tensor type has a supported dtype and an
/// addressable element count; every opcode is known and its operands refer to earlier, visible
/// (not inside an ended block), value-producing expressions of the dtypes the opcode requires;
/// the declared result dtypes are right; reads go to inputs or locals and writes to outputs or
/// locals, with one integer index per dimension; a local tensor is initialized by its
/// `local_tensor` expression before (in program order) any read or write of it; `position` axes
/// are within the workgroup's rank; `assign` targets a `variable` of the value's dtype; control
/// flow is properly nested (`if [else] end_if`, `range end_range`,
/// `while_begin .. while_cond .. while_end`). A library call has no expressions, and its
/// tensors' shapes fit the call (`crate::library::gemm_dims`).
pub fn validate(dag: &ir::ExpressionDag) -> Result<(), ValidationError> {
    let mut c = Checker {
        dag,
        defined_at: defined_at(dag),
        value: Vec::with_capacity(dag.expressions.len()),
        region_of: Vec::with_capacity(dag.expressions.len()),
        open: vec![true],
        stack: Vec::new(),
        local_initialized: vec![false; dag.locals.len()],
        loops: crate::analysis::innermost_loops(dag),
        reductions: crate::analysis::reduction_loops(dag),
    };
    if dag.version != crate::IR_VERSION {
        return Err(ValidationError::Version {
            operator: dag.name.clone(),
            defined_at: c.defined_at.clone(),
            found: dag.version,
            expected: crate::IR_VERSION,
        });
    }
    if dag.workgroup_shape.is_empty() {
        return Err(c.operator_error(
            "the workgroup shape is empty; an operator needs a workgroup of rank >= 1 \
             (`position_in([n])`)",
        ));
    }
    if element_count(&dag.workgroup_shape).is_none() {
        return Err(c.operator_error(format!(
            "the workgroup {:?} has more workers than fit in memory addresses",
            dag.workgroup_shape
        )));
    }
    c.tensor_types("input", &dag.inputs)?;
    crate::symbolic::check_operator(dag).map_err(|m| c.operator_error(m))?;
    c.tensor_types("output", &dag.outputs)?;
    c.tensor_types("local", &dag.locals)?;
    if crate::library::is_library_call(dag) {
        // No worker program: the call's shapes are what there is to check.
        crate::library::gemm_dims(dag).map_err(|e| c.operator_error(e.to_string()))?;
        return Ok(());
    }
    for i in 0..dag.expressions.len() {
        let v = c.expression(i)?;
        c.value.push(v);
        c.region_of.push(c.current_region());
    }
    if let Some(f) = c.stack.last() {
        return Err(c.operator_error(format!(
            "{} opened by expression %{} is never closed",
            f.kind.describe(),
            f.opener
        )));
    }
    Ok(())
}

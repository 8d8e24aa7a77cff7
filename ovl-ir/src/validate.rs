//! Validation of the IR against the invariants written in `proto/ovl.proto`.
//!
//! [`validate`] checks one operator (an [`ir::ExpressionDag`]), [`validate_operator_dag`] a graph
//! of operators. Every backend and the reference interpreter may assume that a DAG that passed
//! validation is well formed: operands refer to earlier, visible, value-producing expressions,
//! dtypes agree, tensor references are in range, control flow is properly nested.

use crate::dtype::DType;
use crate::ir::{self, value_ref::Source, Op, TensorKind};
use crate::names::{
    at, defined_at, dtype_name, kind_word, op_name, tensor_ref_name, tensor_type_name,
};
use crate::ops::{self, Category, Combiner, OpInfo, ResultRule};
use thiserror::Error;

/// Why an operator or an operator DAG is not valid IR.
///
/// The messages name the operator (and where it is defined, when the IR records it), the
/// expression (`%index`, as printed by [`crate::text::to_text`]) and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ValidationError {
    /// The IR was produced for another version of the schema or its semantics.
    #[error(
        "operator `{operator}`{}: IR version {found} is not supported: this build of ovl reads IR \
         version {expected}; trace the operator again with this version of ovl",
        at(.defined_at)
    )]
    Version {
        /// The operator's name.
        operator: String,
        /// `file:line` of the operator's function, or empty when unknown.
        defined_at: String,
        /// The version found in the IR.
        found: u32,
        /// [`crate::IR_VERSION`].
        expected: u32,
    },
    /// Something wrong with the operator as a whole (workgroup, tensor types, nesting).
    #[error("operator `{operator}`{}: {message}", at(.defined_at))]
    Operator {
        /// The operator's name.
        operator: String,
        /// `file:line` of the operator's function, or empty when unknown.
        defined_at: String,
        /// What is wrong.
        message: String,
    },
    /// Something wrong with one expression.
    #[error("operator `{operator}`{}: expression %{index} ({op}): {message}", at(.defined_at))]
    Expression {
        /// The operator's name.
        operator: String,
        /// `file:line` of the operator's function, or empty when unknown.
        defined_at: String,
        /// Index of the expression in `ExpressionDAG.expressions`.
        index: usize,
        /// The expression's opcode in lower case (`add`, `read`, ...).
        op: String,
        /// What is wrong.
        message: String,
    },
    /// Something wrong with the wiring of an operator DAG.
    #[error("operator DAG: {message}")]
    Graph {
        /// What is wrong.
        message: String,
    },
    /// An operator of an operator DAG is not valid.
    #[error("operator DAG: operator {index}: {error}")]
    GraphOperator {
        /// Index of the operator in `OperatorDAG.operators`.
        index: usize,
        /// What is wrong with it.
        error: Box<ValidationError>,
    },
}

/// Whether an expression with this opcode produces a value (can be an operand).
pub fn produces_value(op: Op) -> bool {
    ops::info(op).is_some_and(|row| row.produces_value())
}

/// Checks that a literal held in `e` fits `dtype` (integers in range, bool 0 or 1).
fn check_literal(e: &ir::Expression, dtype: DType) -> Result<(), String> {
    let fits = match dtype {
        DType::F32 | DType::F64 => return Ok(()),
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
enum FrameKind {
    IfThen,
    IfElse,
    Range,
    /// Between WHILE_BEGIN and WHILE_COND.
    WhileCond,
    /// Between WHILE_COND and WHILE_END.
    WhileBody,
}

impl FrameKind {
    fn describe(self) -> &'static str {
        match self {
            FrameKind::IfThen => "an `if` block (closed by end_if)",
            FrameKind::IfElse => "an `else` block (closed by end_if)",
            FrameKind::Range => "a `range` loop (closed by end_range)",
            FrameKind::WhileCond => "the condition of a `while` loop (closed by while_cond)",
            FrameKind::WhileBody => "the body of a `while` loop (closed by while_end)",
        }
    }
}

struct Frame {
    kind: FrameKind,
    /// The region of the expressions inside the block.
    region: usize,
    /// The expression that opened it.
    opener: usize,
}

/// The context of one operator's validation: builds the errors.
struct Checker<'a> {
    dag: &'a ir::ExpressionDag,
    defined_at: String,
    /// The value dtype of each checked expression (None: a statement).
    value: Vec<Option<DType>>,
    /// The region each checked expression is defined in.
    region_of: Vec<usize>,
    /// Whether each region is still open.
    open: Vec<bool>,
    stack: Vec<Frame>,
    local_initialized: Vec<bool>,
    /// The innermost loop around each expression (`analysis::innermost_loops`).
    loops: Vec<Option<usize>>,
    /// Each reduction loop's accumulators (`analysis::reduction_loops`).
    reductions: std::collections::BTreeMap<usize, Vec<usize>>,
}

type Check<T> = Result<T, ValidationError>;

impl<'a> Checker<'a> {
    fn operator_error(&self, message: impl Into<String>) -> ValidationError {
        ValidationError::Operator {
            operator: self.dag.name.clone(),
            defined_at: self.defined_at.clone(),
            message: message.into(),
        }
    }

    fn expr_error(&self, index: usize, message: impl Into<String>) -> ValidationError {
        ValidationError::Expression {
            operator: self.dag.name.clone(),
            defined_at: self.defined_at.clone(),
            index,
            op: op_name(self.dag.expressions[index].code),
            message: message.into(),
        }
    }

    fn current_region(&self) -> usize {
        self.stack.last().map_or(0, |f| f.region)
    }

    fn push_frame(&mut self, kind: FrameKind, opener: usize) -> usize {
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
    fn pop_frame(&mut self, i: usize, kinds: &[FrameKind], closer: &str) -> Check<Frame> {
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

    fn expect_operand_count(&self, i: usize, n: usize, what: &str) -> Check<()> {
        let got = self.dag.expressions[i].operands.len();
        if got != n {
            return Err(self.expr_error(i, format!("expects {n} operand(s) ({what}), found {got}")));
        }
        Ok(())
    }

    /// Checks operand `k` of expression `i` and returns its dtype.
    fn operand(&self, i: usize, k: usize) -> Check<DType> {
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
    fn reducing_loop(&self, id: usize) -> Option<usize> {
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
    fn visible_operand(&self, i: usize, k: usize) -> Check<DType> {
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
    fn declared_dtype(&self, i: usize) -> Check<DType> {
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

    fn expect_result(&self, i: usize, declared: DType, expected: DType, why: &str) -> Check<()> {
        if declared != expected {
            return Err(self.expr_error(
                i,
                format!("its dtype is {declared} but {why} is {expected}"),
            ));
        }
        Ok(())
    }

    fn expect_statement(&self, i: usize) -> Check<()> {
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
    fn tensor(&self, i: usize) -> Check<(TensorKind, usize, &'a ir::TensorType)> {
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
    fn indices(&self, i: usize, rank: usize) -> Check<()> {
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

    fn local_initialized(&self, i: usize, kind: TensorKind, index: usize) -> Check<()> {
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
    fn expression(&mut self, i: usize) -> Check<Option<DType>> {
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
    fn expect_arity(&self, i: usize, row: &OpInfo) -> Check<()> {
        match row.arity {
            Some(n) => self.expect_operand_count(i, n, row.operand_names),
            None => Ok(()),
        }
    }

    /// CONST, POSITION.
    fn leaf(&mut self, i: usize, row: &OpInfo) -> Check<Option<DType>> {
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
    fn tensor_access(&mut self, i: usize, row: &OpInfo) -> Check<Option<DType>> {
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
    fn variable(&mut self, i: usize, row: &OpInfo) -> Check<Option<DType>> {
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
    fn accumulator(&mut self, i: usize, row: &OpInfo) -> Check<Option<DType>> {
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
    fn accumulate(&mut self, i: usize, row: &OpInfo) -> Check<Option<DType>> {
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
    fn elementwise(&mut self, i: usize, row: &OpInfo) -> Check<Option<DType>> {
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
    fn ternary(&mut self, i: usize, row: &OpInfo) -> Check<Option<DType>> {
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
    fn control(&mut self, i: usize, row: &OpInfo) -> Check<Option<DType>> {
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

    fn tensor_types(&self, what: &str, list: &[ir::TensorType]) -> Check<()> {
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

/// The number of elements of a shape, if it fits in `usize`.
pub fn element_count(shape: &[u64]) -> Option<usize> {
    shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(usize::try_from(d).ok()?))
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
/// `while_begin .. while_cond .. while_end`).
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

fn describe_value_ref(dag: &ir::OperatorDag, v: &ir::ValueRef) -> String {
    match &v.source {
        Some(Source::GraphInput(k)) => format!("graph input {k}"),
        Some(Source::OpOutput(o)) => {
            let name = dag
                .operators
                .get(o.operator as usize)
                .map(|op| format!(" (`{}`)", op.name))
                .unwrap_or_default();
            format!("operator {}{name} output {}", o.operator, o.output)
        }
        None => "nothing".into(),
    }
}

/// Resolves a value reference of the graph, visible to a consumer at operator index `before`
/// (graph outputs pass `operators.len()`), to its tensor type.
/// The type of the value `v` names in `dag` (a graph input or an operator output), or why it
/// names none.
pub fn value_type<'a>(
    dag: &'a ir::OperatorDag,
    v: &ir::ValueRef,
) -> Result<&'a ir::TensorType, String> {
    resolve(dag, v, dag.operators.len())
}

fn resolve<'a>(
    dag: &'a ir::OperatorDag,
    v: &ir::ValueRef,
    before: usize,
) -> Result<&'a ir::TensorType, String> {
    match &v.source {
        None => Err("the reference is empty (neither a graph input nor an operator output)".into()),
        Some(Source::GraphInput(k)) => dag.inputs.get(*k as usize).ok_or_else(|| {
            format!(
                "it refers to graph input {k}, but the graph has {} input(s)",
                dag.inputs.len()
            )
        }),
        Some(Source::OpOutput(o)) => {
            let p = o.operator as usize;
            if p >= before {
                return Err(if p < dag.operators.len() {
                    format!(
                        "it refers to operator {p}, which does not come before it; operators \
                         must be listed in a topological order"
                    )
                } else {
                    format!(
                        "it refers to operator {p}, but the graph has {} operator(s)",
                        dag.operators.len()
                    )
                });
            }
            let producer = &dag.operators[p];
            producer.outputs.get(o.output as usize).ok_or_else(|| {
                format!(
                    "it refers to output {} of operator {p} (`{}`), which has {} output(s)",
                    o.output,
                    producer.name,
                    producer.outputs.len()
                )
            })
        }
    }
}

/// Checks an operator DAG: its version, every operator (with [`validate`]), that
/// `operator_inputs` is parallel to `operators` with one reference per operator input, that each
/// reference names an existing graph input or an output of an *earlier* operator (the list is in
/// topological order) whose tensor type equals the consuming operator's declared input type, and
/// that the graph outputs are valid references.
pub fn validate_operator_dag(dag: &ir::OperatorDag) -> Result<(), ValidationError> {
    let graph = |message: String| ValidationError::Graph { message };
    if dag.version != crate::IR_VERSION {
        return Err(graph(format!(
            "IR version {} is not supported: this build of ovl reads IR version {}; build the \
             graph again with this version of ovl",
            dag.version,
            crate::IR_VERSION
        )));
    }
    for (k, t) in dag.inputs.iter().enumerate() {
        if DType::from_ir(t.dtype).is_none() {
            return Err(graph(format!(
                "graph input {k} has dtype {}, which is not supported",
                dtype_name(t.dtype)
            )));
        }
    }
    crate::symbolic::check_graph(dag).map_err(graph)?;
    if dag.operator_inputs.len() != dag.operators.len() {
        return Err(graph(format!(
            "operator_inputs has {} entries but there are {} operators; it must be parallel to \
             `operators`",
            dag.operator_inputs.len(),
            dag.operators.len()
        )));
    }
    for (i, op) in dag.operators.iter().enumerate() {
        validate(op).map_err(|e| ValidationError::GraphOperator {
            index: i,
            error: Box::new(e),
        })?;
        let refs = &dag.operator_inputs[i].inputs;
        if refs.len() != op.inputs.len() {
            return Err(graph(format!(
                "operator {i} (`{}`) declares {} input(s) but is wired to {}",
                op.name,
                op.inputs.len(),
                refs.len()
            )));
        }
        for (k, (v, declared)) in refs.iter().zip(&op.inputs).enumerate() {
            let t = resolve(dag, v, i)
                .map_err(|m| graph(format!("input {k} of operator {i} (`{}`): {m}", op.name)))?;
            if t != declared {
                return Err(graph(format!(
                    "input {k} of operator {i} (`{}`) is declared as {} but is fed {} of type {}",
                    op.name,
                    tensor_type_name(declared),
                    describe_value_ref(dag, v),
                    tensor_type_name(t)
                )));
            }
        }
    }
    for (k, v) in dag.outputs.iter().enumerate() {
        resolve(dag, v, dag.operators.len())
            .map_err(|m| graph(format!("graph output {k}: {m}")))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;

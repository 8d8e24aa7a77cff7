//! The typed form of an operator: what passes read once an [`ir::ExpressionDag`] has passed
//! [`crate::validate::validate`].
//!
//! Protobuf stays the exchange and cache format; passes work on a [`Kernel`], decoded once:
//! opcodes are an enum of instructions with named, typed operands ([`Inst`]), literals are
//! [`Literal`]s of the expression's dtype, tensors are [`TensorId`]s, sizes are [`Dim`]s, and
//! the block structure is explicit: every block opener knows its closer (and its `else` or
//! `while_cond`), every closer its opener, and every expression the innermost block around it
//! ([`Expr::block`]). So a pass matches on an instruction instead of testing `e.code == Op::X as
//! i32` and re-checking operand counts that validation proved.
//!
//! Expressions keep their numbers: expression `%k` of the IR is `kernel.exprs[k]`, and operands
//! are those numbers ([`ValueId`]).
//!
//! ```
//! use ovl_ir::builder::{Builder, OUT};
//! use ovl_ir::ir::Op;
//! use ovl_ir::typed::{Inst, Kernel};
//! use ovl_ir::DType;
//!
//! // out[i] = 0 + 1 + ... + 3, one worker per element.
//! let mut b = Builder::new("sum", &[2]);
//! b.output(DType::I64, &[2]);
//! let i = b.position(0);
//! let (zero, one, four) = (b.i64(0), b.i64(1), b.i64(4));
//! let total = b.var(zero);
//! let k = b.range(zero, four, one);
//! let next = b.op(Op::Add, &[total, k]);
//! b.assign(total, next);
//! b.end_range();
//! b.write(OUT, 0, &[i], total);
//! let kernel = Kernel::decode(&b.build()).unwrap();
//! let Inst::Range { close, .. } = kernel.exprs[k as usize].inst else { unreachable!() };
//! assert_eq!(kernel.exprs[close as usize].inst, Inst::EndRange { range: k });
//! assert_eq!(kernel.exprs[next as usize].block, Some(k));
//! ```

use crate::dtype::{DType, Literal};
use crate::ir::{self, Op, TensorKind};
use crate::ops::{self, Category, Combiner};
use crate::symbolic::symbolic_dim;
use crate::validate::{validate, ValidationError};

mod encode;

/// The number of an expression (its index in the IR), used as an operand.
pub type ValueId = u32;

/// A tensor of an operator: an input, an output or a local, by its index in that list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TensorId {
    /// Input, output or local.
    pub kind: TensorKind,
    /// Its index among the operator's tensors of that kind.
    pub index: u32,
}

/// One dimension of a workgroup or tensor: known, or `scale * S[symbol] + offset` for the
/// symbol values a run gives (`proto/ovl.proto`, "Symbolic sizes").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dim {
    /// Known when compiled.
    Known(u64),
    /// Known when the operator runs.
    Symbolic {
        /// The symbol.
        symbol: u32,
        /// Its coefficient.
        scale: i64,
        /// The constant term.
        offset: i64,
    },
}

impl Dim {
    /// The dims of a shape with its symbolic dimensions.
    pub fn of_shape(shape: &[u64], symbolic: &[ir::SymbolicDim]) -> Vec<Dim> {
        shape
            .iter()
            .enumerate()
            .map(|(k, &n)| match symbolic_dim(symbolic, k) {
                Some(d) => Dim::Symbolic {
                    symbol: d.symbol,
                    scale: d.scale,
                    offset: d.offset,
                },
                None => Dim::Known(n),
            })
            .collect()
    }

    /// The size, if known when compiled.
    pub fn known(self) -> Option<u64> {
        match self {
            Dim::Known(n) => Some(n),
            Dim::Symbolic { .. } => None,
        }
    }
}

/// A tensor's element type and shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorDecl {
    /// Its element type.
    pub dtype: DType,
    /// Its shape.
    pub shape: Vec<Dim>,
}

/// What an expression does, with its operands by name.
#[derive(Clone, Debug, PartialEq)]
pub enum Inst {
    /// A literal of the expression's dtype.
    Const(Literal),
    /// Component `axis` of the worker's position.
    Position {
        /// The workgroup axis.
        axis: u32,
    },
    /// The value of a symbol the operator runs with.
    Symbol {
        /// The symbol.
        symbol: u32,
    },
    /// `tensor[indices]`.
    Read {
        /// An input or a local.
        tensor: TensorId,
        /// One integer per dimension.
        indices: Vec<ValueId>,
    },
    /// `tensor[indices] = value`.
    Write {
        /// An output or a local.
        tensor: TensorId,
        /// One integer per dimension.
        indices: Vec<ValueId>,
        /// What is written.
        value: ValueId,
    },
    /// A local tensor comes to life, every element `fill`.
    LocalTensor {
        /// The local.
        tensor: TensorId,
        /// The value of every element.
        fill: Literal,
    },
    /// A worker-local mutable scalar.
    Variable {
        /// Its initial value.
        init: ValueId,
    },
    /// `variable = value`.
    Assign {
        /// The VARIABLE.
        variable: ValueId,
        /// The new value.
        value: ValueId,
    },
    /// `value as` the expression's dtype.
    Cast {
        /// The value.
        value: ValueId,
    },
    /// An op of the table's unary category (`neg`, `exp`, `isnan`, ...).
    Unary {
        /// The opcode.
        op: Op,
        /// The operand.
        a: ValueId,
    },
    /// An op of the table's binary category (`add`, `pow`, ...).
    Binary {
        /// The opcode.
        op: Op,
        /// The left operand.
        a: ValueId,
        /// The right operand.
        b: ValueId,
    },
    /// A comparison or a logical `and`/`or`: a bool.
    Compare {
        /// The opcode.
        op: Op,
        /// The left operand.
        a: ValueId,
        /// The right operand.
        b: ValueId,
    },
    /// `condition ? if_true : if_false`.
    Select {
        /// A bool.
        condition: ValueId,
        /// The value when it holds.
        if_true: ValueId,
        /// The value when it does not.
        if_false: ValueId,
    },
    /// `a * b + c`, rounded once.
    Fma {
        /// The first factor.
        a: ValueId,
        /// The second factor.
        b: ValueId,
        /// The addend.
        c: ValueId,
    },
    /// Opens a branch taken when `condition` holds.
    If {
        /// A bool.
        condition: ValueId,
        /// Its ELSE, if it has one.
        else_: Option<ValueId>,
        /// Its END_IF.
        end: ValueId,
    },
    /// Starts the branch taken when the IF's condition does not hold.
    Else {
        /// Its IF.
        if_: ValueId,
        /// Its END_IF.
        end: ValueId,
    },
    /// Closes an IF.
    EndIf {
        /// Its IF.
        if_: ValueId,
    },
    /// A counted loop `start..end` by `step`; its value is the loop index.
    Range {
        /// The first index.
        start: ValueId,
        /// The bound the index stays below.
        end: ValueId,
        /// The step (a loop whose step is not positive faults).
        step: ValueId,
        /// Its END_RANGE.
        close: ValueId,
    },
    /// Closes a RANGE.
    EndRange {
        /// Its RANGE.
        range: ValueId,
    },
    /// Opens a `while` loop: the condition's expressions follow, up to the WHILE_COND.
    WhileBegin {
        /// Its WHILE_COND.
        cond: ValueId,
        /// Its WHILE_END.
        end: ValueId,
    },
    /// Ends the condition of a `while` loop: the body runs while `condition` holds.
    WhileCond {
        /// A bool.
        condition: ValueId,
        /// Its WHILE_BEGIN.
        begin: ValueId,
        /// Its WHILE_END.
        end: ValueId,
    },
    /// Closes a `while` loop.
    WhileEnd {
        /// Its WHILE_BEGIN.
        begin: ValueId,
    },
    /// A reduction's accumulator (`proto/ovl.proto`, "Accumulators").
    Accumulator {
        /// Its initial value.
        init: ValueId,
        /// How values combine.
        combiner: Combiner,
    },
    /// Combines `value` into `accumulator` at the current iteration of `range`.
    Accumulate {
        /// The ACCUMULATOR.
        accumulator: ValueId,
        /// The value.
        value: ValueId,
        /// The loop it reduces over (the innermost around it).
        range: ValueId,
    },
}

impl Inst {
    /// The opcode of the instruction.
    pub fn op(&self) -> Op {
        match self {
            Inst::Const(_) => Op::Const,
            Inst::Position { .. } => Op::Position,
            Inst::Symbol { .. } => Op::Symbol,
            Inst::Read { .. } => Op::Read,
            Inst::Write { .. } => Op::Write,
            Inst::LocalTensor { .. } => Op::LocalTensor,
            Inst::Variable { .. } => Op::Variable,
            Inst::Assign { .. } => Op::Assign,
            Inst::Cast { .. } => Op::Cast,
            Inst::Unary { op, .. } | Inst::Binary { op, .. } | Inst::Compare { op, .. } => *op,
            Inst::Select { .. } => Op::Select,
            Inst::Fma { .. } => Op::Fma,
            Inst::If { .. } => Op::If,
            Inst::Else { .. } => Op::Else,
            Inst::EndIf { .. } => Op::EndIf,
            Inst::Range { .. } => Op::Range,
            Inst::EndRange { .. } => Op::EndRange,
            Inst::WhileBegin { .. } => Op::WhileBegin,
            Inst::WhileCond { .. } => Op::WhileCond,
            Inst::WhileEnd { .. } => Op::WhileEnd,
            Inst::Accumulator { .. } => Op::Accumulator,
            Inst::Accumulate { .. } => Op::Accumulate,
        }
    }
}

/// One expression.
#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    /// What it does.
    pub inst: Inst,
    /// The dtype of its value (a CAST: the target); `None` for a statement.
    pub dtype: Option<DType>,
    /// The opener (IF, RANGE, WHILE_BEGIN) of the innermost block around it; `None` at the
    /// top level. A block's opener and closer are outside it; its ELSE and WHILE_COND inside.
    pub block: Option<ValueId>,
}

/// A validated operator, decoded (see the module's documentation).
#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    /// The operator's name.
    pub name: String,
    /// The workgroup: one worker per position.
    pub workgroup: Vec<Dim>,
    /// The symbol values a run takes.
    pub symbol_count: u32,
    /// The tensors it reads.
    pub inputs: Vec<TensorDecl>,
    /// The tensors it writes.
    pub outputs: Vec<TensorDecl>,
    /// Its worker-local tensors.
    pub locals: Vec<TensorDecl>,
    /// Its expressions, in program order, numbered as in the IR.
    pub exprs: Vec<Expr>,
}

impl Kernel {
    /// The bounds `(start, end)` of expression `i` when it is a RANGE that runs every iteration
    /// of `start..end` one by one: integer constants `0 <= start < end` and step 1
    /// ([`crate::analysis::counted_range`] on the protobuf form).
    pub fn counted_loop(&self, i: usize) -> Option<(u64, u64)> {
        let constant = |id: ValueId| match self.exprs[id as usize] {
            Expr {
                inst: Inst::Const(Literal::Int(v)),
                dtype: Some(DType::I64),
                ..
            } => Some(v),
            _ => None,
        };
        let Inst::Range {
            start, end, step, ..
        } = self.exprs.get(i)?.inst
        else {
            return None;
        };
        let (start, end) = (constant(start)?, constant(end)?);
        (constant(step)? == 1 && 0 <= start && start < end).then_some((start as u64, end as u64))
    }

    /// Validates `dag` and decodes it.
    pub fn decode(dag: &ir::ExpressionDag) -> Result<Kernel, ValidationError> {
        validate(dag)?;
        Ok(decode_valid(dag))
    }

    /// Decodes a `dag` that already passed [`validate`] (a pass over IR it validated before,
    /// e.g. an operator of a validated graph). On IR that did not, the result is meaningless
    /// but nothing panics.
    pub fn from_validated(dag: &ir::ExpressionDag) -> Kernel {
        decode_valid(dag)
    }

    /// The declaration of a tensor.
    pub fn tensor(&self, id: TensorId) -> &TensorDecl {
        let list = match id.kind {
            TensorKind::Input => &self.inputs,
            TensorKind::Output => &self.outputs,
            _ => &self.locals,
        };
        &list[id.index as usize]
    }

    /// The operands of expression `k`, in the IR's order (no allocation).
    pub fn operands(&self, k: usize) -> impl Iterator<Item = ValueId> + '_ {
        self.exprs[k].inst.operands()
    }

    /// The input expression `k` reads, if it is a READ of an input.
    pub fn input_read(&self, k: usize) -> Option<u32> {
        match self.exprs[k].inst {
            Inst::Read {
                tensor:
                    TensorId {
                        kind: TensorKind::Input,
                        index,
                    },
                ..
            } => Some(index),
            _ => None,
        }
    }

    /// Whether expression `k` is a VARIABLE or an ACCUMULATOR: a value that later
    /// expressions (ASSIGN, ACCUMULATE) change.
    pub fn is_mutable(&self, k: usize) -> bool {
        matches!(
            self.exprs[k].inst,
            Inst::Variable { .. } | Inst::Accumulator { .. }
        )
    }

    /// The loops (RANGE or WHILE_BEGIN) around expression `k`, innermost first.
    pub fn enclosing_loops(&self, k: usize) -> impl Iterator<Item = ValueId> + '_ {
        std::iter::successors(self.exprs[k].block, move |&b| self.exprs[b as usize].block).filter(
            move |&b| {
                matches!(
                    self.exprs[b as usize].inst,
                    Inst::Range { .. } | Inst::WhileBegin { .. }
                )
            },
        )
    }
}

/// The literal an expression of dtype `d` holds.
fn literal(d: DType, e: &ir::Expression) -> Literal {
    if d.is_float() {
        Literal::Float(e.float_value)
    } else if d == DType::Bool {
        Literal::Bool(e.int_value != 0)
    } else if d.is_unsigned_int() {
        Literal::UInt(e.uint_value)
    } else {
        Literal::Int(e.int_value)
    }
}

/// Decodes a dag that passed [`validate`]: every lookup below is in range and every block is
/// closed, as validation proved.
fn decode_valid(dag: &ir::ExpressionDag) -> Kernel {
    let decls = |list: &[ir::TensorType]| -> Vec<TensorDecl> {
        list.iter()
            .map(|t| TensorDecl {
                dtype: DType::from_ir(t.dtype).unwrap_or(DType::F32),
                shape: Dim::of_shape(&t.shape, &t.symbolic),
            })
            .collect()
    };
    let mut exprs: Vec<Expr> = Vec::with_capacity(dag.expressions.len());
    // Open blocks: their openers.
    let mut open: Vec<usize> = Vec::new();
    for (k, e) in dag.expressions.iter().enumerate() {
        let op = Op::try_from(e.code).unwrap_or(Op::Unspecified);
        let dtype = DType::from_ir(e.dtype);
        let operand = |j: usize| e.operands.get(j).copied().unwrap_or(0);
        let tensor = || {
            let r = e.tensor.unwrap_or_default();
            TensorId {
                kind: TensorKind::try_from(r.kind).unwrap_or(TensorKind::Unspecified),
                index: r.index,
            }
        };
        let rank = |t: TensorId| {
            match t.kind {
                TensorKind::Input => dag.inputs.get(t.index as usize),
                TensorKind::Output => dag.outputs.get(t.index as usize),
                _ => dag.locals.get(t.index as usize),
            }
            .map_or(0, |t| t.shape.len())
        };
        let k32 = k as ValueId;
        // Closers are outside their block; ELSE and WHILE_COND inside.
        let closes = matches!(op, Op::EndIf | Op::EndRange | Op::WhileEnd);
        let opener = if closes { open.pop() } else { None };
        let block = open.last().map(|&b| b as ValueId);
        let inst = match op {
            Op::Const => Inst::Const(literal(dtype.unwrap_or(DType::F32), e)),
            Op::Position => Inst::Position { axis: e.axis },
            Op::Symbol => Inst::Symbol { symbol: e.axis },
            Op::Read => {
                let t = tensor();
                Inst::Read {
                    tensor: t,
                    indices: e.operands[..rank(t).min(e.operands.len())].to_vec(),
                }
            }
            Op::Write => {
                let t = tensor();
                let r = rank(t).min(e.operands.len());
                Inst::Write {
                    tensor: t,
                    indices: e.operands[..r].to_vec(),
                    value: operand(r),
                }
            }
            Op::LocalTensor => {
                let t = tensor();
                let d = dag
                    .locals
                    .get(t.index as usize)
                    .and_then(|l| DType::from_ir(l.dtype))
                    .unwrap_or(DType::F32);
                Inst::LocalTensor {
                    tensor: t,
                    fill: literal(d, e),
                }
            }
            Op::Variable => Inst::Variable { init: operand(0) },
            Op::Assign => Inst::Assign {
                variable: operand(0),
                value: operand(1),
            },
            Op::Cast => Inst::Cast { value: operand(0) },
            Op::Select => Inst::Select {
                condition: operand(0),
                if_true: operand(1),
                if_false: operand(2),
            },
            Op::Fma => Inst::Fma {
                a: operand(0),
                b: operand(1),
                c: operand(2),
            },
            Op::If => {
                open.push(k);
                Inst::If {
                    condition: operand(0),
                    else_: None,
                    end: 0,
                }
            }
            Op::Else => {
                let if_ = block.unwrap_or(0);
                if let Some(Inst::If { else_, .. }) =
                    exprs.get_mut(if_ as usize).map(|x| &mut x.inst)
                {
                    *else_ = Some(k32);
                }
                Inst::Else { if_, end: 0 }
            }
            Op::EndIf => {
                let if_ = opener.unwrap_or(0);
                let mut else_at = None;
                if let Some(Inst::If { else_, end, .. }) = exprs.get_mut(if_).map(|x| &mut x.inst) {
                    *end = k32;
                    else_at = *else_;
                }
                if let Some(Inst::Else { end, .. }) = else_at
                    .and_then(|x| exprs.get_mut(x as usize))
                    .map(|x| &mut x.inst)
                {
                    *end = k32;
                }
                Inst::EndIf {
                    if_: if_ as ValueId,
                }
            }
            Op::Range => {
                open.push(k);
                Inst::Range {
                    start: operand(0),
                    end: operand(1),
                    step: operand(2),
                    close: 0,
                }
            }
            Op::EndRange => {
                let range = opener.unwrap_or(0);
                if let Some(Inst::Range { close, .. }) = exprs.get_mut(range).map(|x| &mut x.inst) {
                    *close = k32;
                }
                Inst::EndRange {
                    range: range as ValueId,
                }
            }
            Op::WhileBegin => {
                open.push(k);
                Inst::WhileBegin { cond: 0, end: 0 }
            }
            Op::WhileCond => {
                let begin = block.unwrap_or(0);
                if let Some(Inst::WhileBegin { cond, .. }) =
                    exprs.get_mut(begin as usize).map(|x| &mut x.inst)
                {
                    *cond = k32;
                }
                Inst::WhileCond {
                    condition: operand(0),
                    begin,
                    end: 0,
                }
            }
            Op::WhileEnd => {
                let begin = opener.unwrap_or(0);
                let mut cond_at = 0;
                if let Some(Inst::WhileBegin { cond, end }) =
                    exprs.get_mut(begin).map(|x| &mut x.inst)
                {
                    *end = k32;
                    cond_at = *cond;
                }
                if let Some(Inst::WhileCond { end, .. }) =
                    exprs.get_mut(cond_at as usize).map(|x| &mut x.inst)
                {
                    *end = k32;
                }
                Inst::WhileEnd {
                    begin: begin as ValueId,
                }
            }
            Op::Accumulator => Inst::Accumulator {
                init: operand(0),
                combiner: Combiner::from_code(e.int_value).unwrap_or(Combiner::Sum),
            },
            Op::Accumulate => Inst::Accumulate {
                accumulator: operand(0),
                value: operand(1),
                // The innermost loop around it (validation: a RANGE).
                range: open
                    .iter()
                    .rev()
                    .find(|&&b| dag.expressions[b].code == Op::Range as i32)
                    .map_or(0, |&b| b as ValueId),
            },
            other => match ops::info(other).map(|row| row.category) {
                Some(Category::Binary) => Inst::Binary {
                    op: other,
                    a: operand(0),
                    b: operand(1),
                },
                Some(Category::Compare) => Inst::Compare {
                    op: other,
                    a: operand(0),
                    b: operand(1),
                },
                // Unary (validation admits no other opcode here).
                _ => Inst::Unary {
                    op: other,
                    a: operand(0),
                },
            },
        };
        let dtype = ops::info(op).filter(|row| row.produces_value()).and(dtype);
        exprs.push(Expr { inst, dtype, block });
    }
    Kernel {
        name: dag.name.clone(),
        workgroup: Dim::of_shape(&dag.workgroup_shape, &dag.symbolic_workgroup),
        symbol_count: dag.symbol_count,
        inputs: decls(&dag.inputs),
        outputs: decls(&dag.outputs),
        locals: decls(&dag.locals),
        exprs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    /// Every fixture decodes; operands come back in the IR's order; every block's links agree.
    #[test]
    fn every_fixture_decodes_with_consistent_links() {
        let mut dags: Vec<ir::ExpressionDag> = fixtures::all().into_iter().map(|f| f.dag).collect();
        dags.extend(fixtures::symbolic().into_iter().map(|f| f.dag));
        for dag in dags {
            let kernel = Kernel::decode(&dag).unwrap();
            assert_eq!(kernel.exprs.len(), dag.expressions.len());
            for (k, e) in dag.expressions.iter().enumerate() {
                let x = &kernel.exprs[k];
                assert_eq!(x.inst.op() as i32, e.code, "{} %{k}", dag.name);
                assert_eq!(
                    kernel.operands(k).collect::<Vec<_>>(),
                    e.operands,
                    "{} %{k}",
                    dag.name
                );
                match x.inst {
                    Inst::If { else_, end, .. } => {
                        assert!(
                            matches!(kernel.exprs[end as usize].inst, Inst::EndIf { if_ } if if_ as usize == k)
                        );
                        if let Some(el) = else_ {
                            assert!(
                                matches!(kernel.exprs[el as usize].inst, Inst::Else { if_, end: e2 } if if_ as usize == k && e2 == end)
                            );
                        }
                    }
                    Inst::Range { close, .. } => {
                        assert!(
                            matches!(kernel.exprs[close as usize].inst, Inst::EndRange { range } if range as usize == k)
                        );
                        assert_eq!(kernel.exprs[close as usize].block, x.block);
                    }
                    Inst::WhileBegin { cond, end } => {
                        assert!(
                            matches!(kernel.exprs[cond as usize].inst, Inst::WhileCond { begin, end: e2, .. } if begin as usize == k && e2 == end)
                        );
                        assert!(
                            matches!(kernel.exprs[end as usize].inst, Inst::WhileEnd { begin } if begin as usize == k)
                        );
                    }
                    Inst::Accumulate { range, .. } => {
                        assert_eq!(kernel.enclosing_loops(k).next(), Some(range));
                    }
                    _ => {}
                }
                assert_eq!(
                    x.dtype.is_some(),
                    crate::validate::produces_value(Op::try_from(e.code).unwrap()),
                    "{} %{k}",
                    dag.name
                );
            }
        }
    }

    /// Encoding every decoded expression gives the IR back (block links and an ACCUMULATE's
    /// loop are the order of the expressions).
    #[test]
    fn every_fixture_encodes_back_to_its_ir() {
        let mut dags: Vec<ir::ExpressionDag> = fixtures::all().into_iter().map(|f| f.dag).collect();
        dags.extend(fixtures::symbolic().into_iter().map(|f| f.dag));
        for dag in dags {
            let kernel = Kernel::decode(&dag).unwrap();
            for (k, (e, x)) in dag.expressions.iter().zip(&kernel.exprs).enumerate() {
                let mut want = e.clone();
                if x.dtype.is_none() {
                    // A statement's dtype means nothing.
                    want.dtype = ir::Dtype::Unspecified as i32;
                }
                let mut got = x.inst.encode(x.dtype);
                // Bit for bit, NaN included.
                let bits = (got.float_value.to_bits(), want.float_value.to_bits());
                assert_eq!(bits.0, bits.1, "{} %{k}", dag.name);
                (got.float_value, want.float_value) = (0.0, 0.0);
                assert_eq!(got, want, "{} %{k}", dag.name);
            }
        }
    }

    #[test]
    fn invalid_ir_is_refused() {
        let mut dag = fixtures::add_2d(2, 2);
        dag.expressions[0].operands.push(7);
        assert!(Kernel::decode(&dag).is_err());
    }
}

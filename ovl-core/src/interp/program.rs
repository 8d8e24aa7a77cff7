//! The interpreter's compact form of a validated operator: one instruction per expression with
//! decoded opcodes, literal values, tensor geometry and pre-computed control-flow targets.

use super::value::Value;
use crate::dtype::DType;
use crate::ir::{self, Op, TensorKind};
use ovl_ir::ops::{Category, Combiner};

/// The decoded opcode of an instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Code {
    Const,
    Position,
    Read,
    Write,
    Variable,
    Assign,
    /// `aux`: the accumulator's ordinal.
    Accumulator,
    /// `aux`: the accumulator's ordinal; `jump`: the ordinal of its reduction loop.
    Accumulate,
    LocalTensor,
    Cast,
    /// An opcode of the table's `Unary` category.
    Unary(Op),
    /// An opcode of the table's `Binary` category.
    Binary(Op),
    /// An opcode of the table's `Compare` category.
    Compare(Op),
    Select,
    Fma,
    If,
    Else,
    EndIf,
    Range,
    EndRange,
    WhileBegin,
    WhileCond,
    WhileEnd,
}

/// One expression, decoded.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Instr {
    pub code: Code,
    /// The result dtype (value-producing instructions) or the cast target; `Bool` otherwise.
    pub dtype: DType,
    /// First operands (unused ones are 0). For WRITE, `a` is the value.
    pub a: u32,
    pub b: u32,
    pub c: u32,
    /// READ/WRITE: where the index operands start in `Program::pool`.
    pub indices: u32,
    /// READ/WRITE/LOCAL_TENSOR: the tensor, an index into `Program::tensors`.
    pub tensor: u32,
    /// IF: where to go when the condition is false (after ELSE, or after END_IF). ELSE: after
    /// END_IF. RANGE: after END_RANGE (zero iterations). END_RANGE: the RANGE. WHILE_COND: after
    /// WHILE_END. WHILE_END: after WHILE_BEGIN. POSITION: the axis. RANGE also uses `aux`.
    pub jump: u32,
    /// RANGE: the loop's ordinal (index of its end/step state).
    pub aux: u32,
    /// CONST: the value. LOCAL_TENSOR: the fill value.
    pub literal: Value,
}

/// Geometry of a tensor the program reads or writes.
#[derive(Clone, Debug)]
pub(crate) struct TensorInfo {
    pub kind: TensorKind,
    pub index: usize,
    pub dtype: DType,
    pub dims: Vec<u64>,
    pub strides: Vec<u64>,
}

impl TensorInfo {
    /// `input 0`, `output 1`, `local 2`.
    pub(crate) fn name(&self) -> String {
        format!("{} {}", ovl_ir::names::kind_word(self.kind), self.index)
    }
}

/// A decoded operator.
#[derive(Debug)]
pub(crate) struct Program {
    pub instrs: Vec<Instr>,
    /// Index operands of READ/WRITE.
    pub pool: Vec<u32>,
    /// Inputs, then outputs, then locals.
    pub tensors: Vec<TensorInfo>,
    pub n_inputs: usize,
    pub n_outputs: usize,
    /// Number of RANGE loops.
    pub n_ranges: usize,
    /// Per RANGE loop (by ordinal): the accumulators it reduces, as (expression, ordinal,
    /// combiner).
    pub reductions: Vec<Vec<(usize, usize, Combiner)>>,
    /// Number of accumulators.
    pub n_accumulators: usize,
    /// Per accumulator (by ordinal): its combiner.
    pub combiners: Vec<Combiner>,
    pub workgroup: Vec<u64>,
}

fn tensor_info(kind: TensorKind, index: usize, t: &ir::TensorType) -> Result<TensorInfo, String> {
    let dtype = DType::from_ir(t.dtype).ok_or("unsupported tensor dtype")?;
    let mut strides = vec![1u64; t.shape.len()];
    for axis in (0..t.shape.len().saturating_sub(1)).rev() {
        strides[axis] = strides[axis + 1]
            .checked_mul(t.shape[axis + 1])
            .ok_or("tensor too large")?;
    }
    Ok(TensorInfo {
        kind,
        index,
        dtype,
        dims: t.shape.clone(),
        strides,
    })
}

impl Program {
    /// Decodes a dag that passed [`crate::validate::validate`]. Errors describe internal
    /// inconsistencies (they cannot happen for validated IR).
    pub(crate) fn new(dag: &ir::ExpressionDag) -> Result<Program, String> {
        let mut tensors = Vec::new();
        for (kind, list) in [
            (TensorKind::Input, &dag.inputs),
            (TensorKind::Output, &dag.outputs),
            (TensorKind::Local, &dag.locals),
        ] {
            for (k, t) in list.iter().enumerate() {
                tensors.push(tensor_info(kind, k, t)?);
            }
        }
        let tensor_id = |r: Option<&ir::TensorRef>| -> Result<u32, String> {
            let r = r.ok_or("missing tensor reference")?;
            let base = match TensorKind::try_from(r.kind) {
                Ok(TensorKind::Input) => 0,
                Ok(TensorKind::Output) => dag.inputs.len(),
                Ok(TensorKind::Local) => dag.inputs.len() + dag.outputs.len(),
                _ => return Err("bad tensor kind".into()),
            };
            let id = base + r.index as usize;
            if id >= tensors.len() {
                return Err("tensor index out of range".into());
            }
            Ok(id as u32)
        };

        // Accumulators get ordinals (their lanes); each reduction loop lists its accumulators.
        let loops = ovl_ir::analysis::innermost_loops(dag);
        let mut acc_ordinal: Vec<Option<usize>> = vec![None; dag.expressions.len()];
        let mut combiners = Vec::new();
        for (i, e) in dag.expressions.iter().enumerate() {
            if e.code == Op::Accumulator as i32 {
                acc_ordinal[i] = Some(combiners.len());
                combiners.push(Combiner::from_code(e.int_value).ok_or("an unknown combiner")?);
            }
        }
        let n_accumulators = combiners.len();
        let reduced = ovl_ir::analysis::reduction_loops(dag);
        let mut instrs = Vec::with_capacity(dag.expressions.len());
        let mut pool = Vec::new();
        let mut n_ranges = 0u32;
        // Open blocks: (opener pc, else pc if any).
        let mut open: Vec<(usize, Option<usize>)> = Vec::new();
        for (pc, e) in dag.expressions.iter().enumerate() {
            let op = Op::try_from(e.code).map_err(|_| format!("unknown opcode at %{pc}"))?;
            let operand = |k: usize| -> u32 { e.operands.get(k).copied().unwrap_or(0) };
            let mut ins = Instr {
                code: Code::Const,
                dtype: DType::from_ir(e.dtype).unwrap_or(DType::Bool),
                a: operand(0),
                b: operand(1),
                c: operand(2),
                indices: 0,
                tensor: 0,
                jump: 0,
                aux: 0,
                literal: Value::Bool(false),
            };
            ins.code = match op {
                Op::Unspecified => return Err(format!("unspecified opcode at %{pc}")),
                Op::Const => {
                    ins.literal =
                        Value::literal(ins.dtype, e.float_value, e.int_value, e.uint_value);
                    Code::Const
                }
                Op::Position => {
                    ins.jump = e.axis;
                    Code::Position
                }
                Op::Read | Op::Write => {
                    ins.tensor = tensor_id(e.tensor.as_ref())?;
                    let rank = tensors[ins.tensor as usize].dims.len();
                    ins.indices = pool.len() as u32;
                    pool.extend(e.operands.iter().take(rank));
                    if op == Op::Write {
                        ins.a = operand(rank);
                        Code::Write
                    } else {
                        Code::Read
                    }
                }
                Op::Variable => Code::Variable,
                Op::Accumulator => {
                    ins.aux = acc_ordinal[pc].ok_or("an accumulator without an ordinal")? as u32;
                    Code::Accumulator
                }
                Op::Accumulate => {
                    let acc = operand(0) as usize;
                    ins.aux = acc_ordinal
                        .get(acc)
                        .copied()
                        .flatten()
                        .ok_or("an accumulate into a non-accumulator")?
                        as u32;
                    let range = loops[pc].ok_or("an accumulate outside a loop")?;
                    ins.jump = instrs
                        .get(range)
                        .map(|r: &Instr| r.aux)
                        .ok_or("an accumulate before its loop")?;
                    Code::Accumulate
                }
                Op::Assign => Code::Assign,
                Op::LocalTensor => {
                    ins.tensor = tensor_id(e.tensor.as_ref())?;
                    let d = tensors[ins.tensor as usize].dtype;
                    ins.literal = Value::literal(d, e.float_value, e.int_value, e.uint_value);
                    Code::LocalTensor
                }
                Op::Cast => Code::Cast,
                Op::Select => Code::Select,
                Op::Fma => Code::Fma,
                Op::If => {
                    open.push((pc, None));
                    Code::If
                }
                Op::Else => {
                    let top = open.last_mut().ok_or("unmatched else")?;
                    top.1 = Some(pc);
                    Code::Else
                }
                Op::EndIf => {
                    let (opener, els) = open.pop().ok_or("unmatched end_if")?;
                    let opener_ins: &mut Instr = instrs.get_mut(opener).ok_or("bad if")?;
                    match els {
                        Some(els) => {
                            opener_ins.jump = els as u32 + 1;
                            instrs[els].jump = pc as u32 + 1;
                        }
                        None => opener_ins.jump = pc as u32 + 1,
                    }
                    Code::EndIf
                }
                Op::Range => {
                    open.push((pc, None));
                    ins.aux = n_ranges;
                    n_ranges += 1;
                    Code::Range
                }
                Op::EndRange => {
                    let (opener, _) = open.pop().ok_or("unmatched end_range")?;
                    let opener_ins: &mut Instr = instrs.get_mut(opener).ok_or("bad range")?;
                    opener_ins.jump = pc as u32 + 1;
                    ins.jump = opener as u32;
                    Code::EndRange
                }
                Op::WhileBegin => {
                    open.push((pc, None));
                    Code::WhileBegin
                }
                Op::WhileCond => {
                    let top = open.last_mut().ok_or("unmatched while_cond")?;
                    top.1 = Some(pc);
                    Code::WhileCond
                }
                Op::WhileEnd => {
                    let (opener, cond) = open.pop().ok_or("unmatched while_end")?;
                    let cond = cond.ok_or("while without while_cond")?;
                    instrs[cond].jump = pc as u32 + 1;
                    ins.jump = opener as u32 + 1;
                    Code::WhileEnd
                }
                other => match ovl_ir::ops::info(other).map(|row| row.category) {
                    Some(Category::Unary) => Code::Unary(other),
                    Some(Category::Binary) => Code::Binary(other),
                    Some(Category::Compare) => Code::Compare(other),
                    _ => return Err(format!("unsupported op at %{pc}")),
                },
            };
            instrs.push(ins);
        }
        if !open.is_empty() {
            return Err("unclosed block".into());
        }
        let reductions = {
            let mut per_range = vec![Vec::new(); n_ranges as usize];
            for (range, accs) in &reduced {
                let ordinal = instrs[*range].aux as usize;
                for &acc in accs {
                    let combiner = Combiner::from_code(dag.expressions[acc].int_value)
                        .ok_or("an accumulator without a combiner")?;
                    let ord = acc_ordinal[acc].ok_or("an accumulate into a non-accumulator")?;
                    per_range[ordinal].push((acc, ord, combiner));
                }
            }
            per_range
        };
        Ok(Program {
            instrs,
            pool,
            tensors,
            n_inputs: dag.inputs.len(),
            n_outputs: dag.outputs.len(),
            reductions,
            n_accumulators,
            combiners,
            n_ranges: n_ranges as usize,
            workgroup: dag.workgroup_shape.clone(),
        })
    }
}

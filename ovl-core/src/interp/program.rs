//! The interpreter's compact form of a validated operator: one instruction per expression with
//! decoded opcodes, literal values, tensor geometry and pre-computed control-flow targets.

use super::value::Value;
use crate::dtype::DType;
use crate::ir::{self, Op, TensorKind};
use ovl_ir::ops::{Combiner, REDUCE_LANES};
use ovl_ir::typed::{Inst, Kernel, TensorId, ValueId};

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
    /// RANGE: the loop's ordinal (index of its end/step state). WHILE_COND: its WHILE_BEGIN,
    /// whose slot counts the loop's iterations.
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
    /// Per RANGE loop (by ordinal): the lanes of its reductions (`REDUCE_LANES`, or a
    /// cooperative group's width in [`ovl_ir::cooperative::ReductionOrder::Cuda`]).
    pub range_lanes: Vec<usize>,
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
    /// Decodes a dag that passed [`crate::validate::validate`], from its typed form
    /// ([`Kernel`]): the block links become jump targets. The only error is a tensor whose
    /// strides do not fit (validation rules it out).
    pub(crate) fn new(
        dag: &ir::ExpressionDag,
        order: ovl_ir::cooperative::ReductionOrder,
    ) -> Result<Program, String> {
        let lanes_at = ovl_ir::cooperative::range_lanes(dag, order);
        let mut range_lanes = Vec::new();
        let kernel = Kernel::from_validated(dag);
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
        let tensor_id = |t: TensorId| -> u32 {
            let base = match t.kind {
                TensorKind::Input => 0,
                TensorKind::Output => dag.inputs.len(),
                _ => dag.inputs.len() + dag.outputs.len(),
            };
            (base + t.index as usize) as u32
        };

        // Accumulators get ordinals (their lanes); RANGE loops too (their end/step state).
        let mut ordinal: Vec<u32> = vec![0; kernel.exprs.len()];
        let mut combiners = Vec::new();
        let mut n_ranges = 0u32;
        for (i, x) in kernel.exprs.iter().enumerate() {
            match x.inst {
                Inst::Accumulator { combiner, .. } => {
                    ordinal[i] = combiners.len() as u32;
                    combiners.push(combiner);
                }
                Inst::Range { .. } => {
                    ordinal[i] = n_ranges;
                    n_ranges += 1;
                    range_lanes.push(lanes_at.get(i).copied().unwrap_or(REDUCE_LANES).max(1));
                }
                _ => {}
            }
        }
        let mut reductions = vec![Vec::new(); n_ranges as usize];
        let mut instrs = Vec::with_capacity(kernel.exprs.len());
        let mut pool = Vec::new();
        for x in &kernel.exprs {
            let dtype = x.dtype.unwrap_or(DType::Bool);
            let mut ins = Instr {
                code: Code::Const,
                dtype,
                a: 0,
                b: 0,
                c: 0,
                indices: 0,
                tensor: 0,
                jump: 0,
                aux: 0,
                literal: Value::Bool(false),
            };
            let after = |k: ValueId| k + 1;
            ins.code = match x.inst {
                Inst::Const(lit) => {
                    ins.literal = Value::of_literal(dtype, lit);
                    Code::Const
                }
                Inst::Position { axis } => {
                    ins.jump = axis;
                    Code::Position
                }
                Inst::Symbol { .. } => return Err("a symbol in a concrete operator".into()),
                Inst::Read {
                    tensor,
                    ref indices,
                } => {
                    ins.tensor = tensor_id(tensor);
                    ins.indices = pool.len() as u32;
                    pool.extend(indices);
                    Code::Read
                }
                Inst::Write {
                    tensor,
                    ref indices,
                    value,
                } => {
                    ins.tensor = tensor_id(tensor);
                    ins.indices = pool.len() as u32;
                    pool.extend(indices);
                    ins.a = value;
                    Code::Write
                }
                Inst::Variable { init } => {
                    ins.a = init;
                    Code::Variable
                }
                Inst::Accumulator { init, .. } => {
                    ins.a = init;
                    ins.aux = ordinal[instrs.len()];
                    Code::Accumulator
                }
                Inst::Accumulate {
                    accumulator,
                    value,
                    range,
                } => {
                    (ins.a, ins.b) = (accumulator, value);
                    ins.aux = ordinal[accumulator as usize];
                    ins.jump = ordinal[range as usize];
                    let combiner = combiners[ins.aux as usize];
                    let reduced: &mut Vec<(usize, usize, Combiner)> =
                        &mut reductions[ins.jump as usize];
                    if !reduced.iter().any(|r| r.0 == accumulator as usize) {
                        reduced.push((accumulator as usize, ins.aux as usize, combiner));
                    }
                    Code::Accumulate
                }
                Inst::Assign { variable, value } => {
                    (ins.a, ins.b) = (variable, value);
                    Code::Assign
                }
                Inst::LocalTensor { tensor, fill } => {
                    ins.tensor = tensor_id(tensor);
                    ins.literal = Value::of_literal(tensors[ins.tensor as usize].dtype, fill);
                    Code::LocalTensor
                }
                Inst::Cast { value } => {
                    ins.a = value;
                    Code::Cast
                }
                Inst::Select {
                    condition,
                    if_true,
                    if_false,
                } => {
                    (ins.a, ins.b, ins.c) = (condition, if_true, if_false);
                    Code::Select
                }
                Inst::Fma { a, b, c } => {
                    (ins.a, ins.b, ins.c) = (a, b, c);
                    Code::Fma
                }
                Inst::If {
                    condition,
                    else_,
                    end,
                } => {
                    ins.a = condition;
                    ins.jump = after(else_.unwrap_or(end));
                    Code::If
                }
                Inst::Else { end, .. } => {
                    ins.jump = after(end);
                    Code::Else
                }
                Inst::EndIf { .. } => Code::EndIf,
                Inst::Range {
                    start,
                    end,
                    step,
                    close,
                } => {
                    (ins.a, ins.b, ins.c) = (start, end, step);
                    ins.jump = after(close);
                    ins.aux = ordinal[instrs.len()];
                    Code::Range
                }
                Inst::EndRange { range } => {
                    ins.jump = range;
                    Code::EndRange
                }
                Inst::WhileBegin { .. } => Code::WhileBegin,
                Inst::WhileCond {
                    condition,
                    begin,
                    end,
                } => {
                    ins.a = condition;
                    ins.jump = after(end);
                    // The condition counts its loop's iterations in the WHILE_BEGIN's slot.
                    ins.aux = begin;
                    Code::WhileCond
                }
                Inst::WhileEnd { begin } => {
                    ins.jump = after(begin);
                    Code::WhileEnd
                }
                Inst::Unary { op, a } => {
                    ins.a = a;
                    Code::Unary(op)
                }
                Inst::Binary { op, a, b } => {
                    (ins.a, ins.b) = (a, b);
                    Code::Binary(op)
                }
                Inst::Compare { op, a, b } => {
                    (ins.a, ins.b) = (a, b);
                    Code::Compare(op)
                }
            };
            instrs.push(ins);
        }
        let n_accumulators = combiners.len();
        Ok(Program {
            instrs,
            pool,
            tensors,
            n_inputs: dag.inputs.len(),
            n_outputs: dag.outputs.len(),
            reductions,
            n_accumulators,
            combiners,
            range_lanes,
            n_ranges: n_ranges as usize,
            workgroup: dag.workgroup_shape.clone(),
        })
    }
}

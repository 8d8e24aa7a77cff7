//! The way back from the typed form: an [`Inst`] as the protobuf expression that decodes to it,
//! for passes that decide on a [`super::Kernel`] and write protobuf (fusion, batching).

use super::{Inst, TensorId, ValueId};
use crate::builder::set_literal;
use crate::dtype::{DType, Literal};
use crate::ir;

impl Inst {
    /// The operands, in the IR's order.
    pub fn operands(&self) -> impl Iterator<Item = ValueId> + '_ {
        let none: &[ValueId] = &[];
        let (head, fixed, n): (&[ValueId], [ValueId; 3], usize) = match self {
            Inst::Const(_)
            | Inst::Position { .. }
            | Inst::Symbol { .. }
            | Inst::LocalTensor { .. }
            | Inst::Else { .. }
            | Inst::EndIf { .. }
            | Inst::EndRange { .. }
            | Inst::WhileBegin { .. }
            | Inst::WhileEnd { .. } => (none, [0; 3], 0),
            Inst::Read { indices, .. } => (indices, [0; 3], 0),
            Inst::Write { indices, value, .. } => (indices, [*value, 0, 0], 1),
            Inst::Variable { init } | Inst::Accumulator { init, .. } => (none, [*init, 0, 0], 1),
            Inst::Cast { value } => (none, [*value, 0, 0], 1),
            Inst::Unary { a, .. } => (none, [*a, 0, 0], 1),
            Inst::Assign { variable, value } => (none, [*variable, *value, 0], 2),
            Inst::Accumulate {
                accumulator, value, ..
            } => (none, [*accumulator, *value, 0], 2),
            Inst::Binary { a, b, .. } | Inst::Compare { a, b, .. } => (none, [*a, *b, 0], 2),
            Inst::Select {
                condition,
                if_true,
                if_false,
            } => (none, [*condition, *if_true, *if_false], 3),
            Inst::Fma { a, b, c } => (none, [*a, *b, *c], 3),
            Inst::If { condition, .. } | Inst::WhileCond { condition, .. } => {
                (none, [*condition, 0, 0], 1)
            }
            Inst::Range {
                start, end, step, ..
            } => (none, [*start, *end, *step], 3),
        };
        head.iter().copied().chain(fixed.into_iter().take(n))
    }

    /// The protobuf expression of this instruction, its value of `dtype` (`None` for a
    /// statement). What the order of the expressions says is not encoded: a block's links (an
    /// IF's ELSE and END_IF, a RANGE's END_RANGE, ...) and the loop an ACCUMULATE reduces over.
    pub fn encode(&self, dtype: Option<DType>) -> ir::Expression {
        let mut e = ir::Expression {
            code: self.op() as i32,
            dtype: dtype.map_or(ir::Dtype::Unspecified as i32, |d| d.to_ir() as i32),
            operands: self.operands().collect(),
            ..Default::default()
        };
        let tensor = |t: &TensorId| ir::TensorRef {
            kind: t.kind as i32,
            index: t.index,
        };
        match self {
            Inst::Const(v) => set_literal(&mut e, dtype.unwrap_or(DType::F32), *v),
            Inst::Position { axis } | Inst::Symbol { symbol: axis } => e.axis = *axis,
            Inst::Read { tensor: t, .. } | Inst::Write { tensor: t, .. } => {
                e.tensor = Some(tensor(t));
            }
            Inst::LocalTensor { tensor: t, fill } => {
                e.tensor = Some(tensor(t));
                // In the field the decoder reads for the local's dtype (whose literal it is).
                match *fill {
                    Literal::Float(f) => e.float_value = f,
                    Literal::Int(i) => e.int_value = i,
                    Literal::UInt(u) => e.uint_value = u,
                    Literal::Bool(b) => e.int_value = i64::from(b),
                }
            }
            Inst::Accumulator { combiner, .. } => e.int_value = *combiner as i64,
            _ => {}
        }
        e
    }
}

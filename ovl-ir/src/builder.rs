//! A hand builder of expression DAGs: for the tests of ovl and of its backends, and for tools
//! that make IR without tracing Rust code. It checks nothing: pass what it builds to
//! [`crate::validate::validate`] when that matters. Every DAG it starts claims to be defined at
//! `src/ops.rs:12`.

use crate::dtype::{DType, Literal};
use crate::ir::{self, Op, TensorKind};

pub use TensorKind::{Input as IN, Local as LOC, Output as OUT};

/// Builds an `ExpressionDag` expression by expression.
pub struct Builder {
    pub dag: ir::ExpressionDag,
}

/// A concrete tensor type: `d[shape]`, no symbolic dimension.
pub fn tensor_type(d: DType, shape: &[u64]) -> ir::TensorType {
    ir::TensorType {
        symbolic: Vec::new(),
        dtype: d.to_ir() as i32,
        shape: shape.to_vec(),
    }
}

/// Stores a literal in the field the IR uses for `d`.
pub fn set_literal(e: &mut ir::Expression, d: DType, v: Literal) {
    match v {
        Literal::Float(f) if d.is_float() => e.float_value = f,
        Literal::Int(i) if d.is_unsigned_int() => e.uint_value = i as u64,
        Literal::Int(i) => e.int_value = i,
        Literal::UInt(u) => e.uint_value = u,
        Literal::Bool(b) => e.int_value = b as i64,
        Literal::Float(f) => e.int_value = f as i64,
    }
}

impl Builder {
    pub fn new(name: &str, workgroup: &[u64]) -> Builder {
        Builder {
            dag: ir::ExpressionDag {
                version: crate::IR_VERSION,
                name: name.into(),
                workgroup_shape: workgroup.to_vec(),
                source: Some(ir::SourceLocation {
                    file: "src/ops.rs".into(),
                    line: 12,
                    column: 1,
                }),
                ..Default::default()
            },
        }
    }

    pub fn input(&mut self, d: DType, shape: &[u64]) -> u32 {
        self.dag.inputs.push(tensor_type(d, shape));
        self.dag.inputs.len() as u32 - 1
    }

    pub fn output(&mut self, d: DType, shape: &[u64]) -> u32 {
        self.dag.outputs.push(tensor_type(d, shape));
        self.dag.outputs.len() as u32 - 1
    }

    /// Declares a local tensor (no LOCAL_TENSOR expression: see [`Builder::local_fill`]).
    pub fn declare_local(&mut self, d: DType, shape: &[u64]) -> u32 {
        self.dag.locals.push(tensor_type(d, shape));
        self.dag.locals.len() as u32 - 1
    }

    /// Emits LOCAL_TENSOR for local `index` with a fill value.
    pub fn local_fill(&mut self, index: u32, fill: Literal) -> u32 {
        let d = DType::from_ir(self.dag.locals[index as usize].dtype).expect("dtype");
        let mut e = ir::Expression {
            code: Op::LocalTensor as i32,
            tensor: Some(ir::TensorRef {
                kind: TensorKind::Local as i32,
                index,
            }),
            ..Default::default()
        };
        set_literal(&mut e, d, fill);
        self.raw(e)
    }

    /// Declares a local tensor and emits its LOCAL_TENSOR with the fill value.
    pub fn local(&mut self, d: DType, shape: &[u64], fill: Literal) -> u32 {
        let index = self.declare_local(d, shape);
        self.local_fill(index, fill);
        index
    }

    pub fn dtype(&self, id: u32) -> DType {
        DType::from_ir(self.dag.expressions[id as usize].dtype).expect("a value")
    }

    pub fn raw(&mut self, e: ir::Expression) -> u32 {
        self.dag.expressions.push(e);
        self.dag.expressions.len() as u32 - 1
    }

    pub fn push(&mut self, code: Op, dtype: Option<DType>, operands: &[u32]) -> u32 {
        self.raw(ir::Expression {
            code: code as i32,
            dtype: dtype.map_or(0, |d| d.to_ir() as i32),
            operands: operands.to_vec(),
            ..Default::default()
        })
    }

    pub fn constant(&mut self, d: DType, v: Literal) -> u32 {
        let mut e = ir::Expression {
            code: Op::Const as i32,
            dtype: d.to_ir() as i32,
            ..Default::default()
        };
        set_literal(&mut e, d, v);
        self.raw(e)
    }

    pub fn f32(&mut self, v: f32) -> u32 {
        self.constant(DType::F32, Literal::Float(v as f64))
    }

    pub fn f64(&mut self, v: f64) -> u32 {
        self.constant(DType::F64, Literal::Float(v))
    }

    pub fn i64(&mut self, v: i64) -> u32 {
        self.constant(DType::I64, Literal::Int(v))
    }

    pub fn i32(&mut self, v: i32) -> u32 {
        self.constant(DType::I32, Literal::Int(v as i64))
    }

    pub fn boolean(&mut self, v: bool) -> u32 {
        self.constant(DType::Bool, Literal::Bool(v))
    }

    pub fn position(&mut self, axis: u32) -> u32 {
        self.raw(ir::Expression {
            code: Op::Position as i32,
            dtype: DType::I64.to_ir() as i32,
            axis,
            ..Default::default()
        })
    }

    fn tensor_dtype(&self, kind: TensorKind, index: u32) -> DType {
        let list = match kind {
            TensorKind::Input => &self.dag.inputs,
            TensorKind::Output => &self.dag.outputs,
            _ => &self.dag.locals,
        };
        DType::from_ir(list[index as usize].dtype).expect("known dtype")
    }

    pub fn read(&mut self, kind: TensorKind, index: u32, indices: &[u32]) -> u32 {
        let d = self.tensor_dtype(kind, index);
        self.raw(ir::Expression {
            code: Op::Read as i32,
            dtype: d.to_ir() as i32,
            operands: indices.to_vec(),
            tensor: Some(ir::TensorRef {
                kind: kind as i32,
                index,
            }),
            ..Default::default()
        })
    }

    pub fn write(&mut self, kind: TensorKind, index: u32, indices: &[u32], value: u32) -> u32 {
        let mut operands = indices.to_vec();
        operands.push(value);
        self.raw(ir::Expression {
            code: Op::Write as i32,
            operands,
            tensor: Some(ir::TensorRef {
                kind: kind as i32,
                index,
            }),
            ..Default::default()
        })
    }

    pub fn var(&mut self, init: u32) -> u32 {
        let d = self.dtype(init);
        self.push(Op::Variable, Some(d), &[init])
    }

    /// An ACCUMULATOR with `combiner`, starting at `init`.
    pub fn accumulator(&mut self, combiner: crate::ops::Combiner, init: u32) -> u32 {
        let d = self.dtype(init);
        self.raw(ir::Expression {
            code: Op::Accumulator as i32,
            dtype: d.to_ir() as i32,
            operands: vec![init],
            int_value: combiner as i64,
            ..Default::default()
        })
    }

    /// An ACCUMULATE of `value` into `acc`.
    pub fn accumulate(&mut self, acc: u32, value: u32) -> u32 {
        self.push(Op::Accumulate, None, &[acc, value])
    }

    pub fn assign(&mut self, var: u32, value: u32) -> u32 {
        self.push(Op::Assign, None, &[var, value])
    }

    /// A unary, binary or ternary op whose dtype is derived like the validator's rules.
    pub fn op(&mut self, code: Op, operands: &[u32]) -> u32 {
        let to_bool = matches!(
            code,
            Op::Lt
                | Op::Le
                | Op::Gt
                | Op::Ge
                | Op::Eq
                | Op::Ne
                | Op::And
                | Op::Or
                | Op::Isinf
                | Op::Isfinite
                | Op::Isnan
        );
        let d = if to_bool {
            DType::Bool
        } else if code == Op::Select {
            self.dtype(operands[1])
        } else {
            self.dtype(operands[0])
        };
        self.push(code, Some(d), operands)
    }

    pub fn cast(&mut self, x: u32, to: DType) -> u32 {
        self.push(Op::Cast, Some(to), &[x])
    }

    pub fn if_(&mut self, c: u32) -> u32 {
        self.push(Op::If, None, &[c])
    }

    pub fn else_(&mut self) -> u32 {
        self.push(Op::Else, None, &[])
    }

    pub fn end_if(&mut self) -> u32 {
        self.push(Op::EndIf, None, &[])
    }

    pub fn range(&mut self, start: u32, end: u32, step: u32) -> u32 {
        self.push(Op::Range, Some(DType::I64), &[start, end, step])
    }

    pub fn end_range(&mut self) -> u32 {
        self.push(Op::EndRange, None, &[])
    }

    pub fn while_begin(&mut self) -> u32 {
        self.push(Op::WhileBegin, None, &[])
    }

    pub fn while_cond(&mut self, c: u32) -> u32 {
        self.push(Op::WhileCond, None, &[c])
    }

    pub fn while_end(&mut self) -> u32 {
        self.push(Op::WhileEnd, None, &[])
    }

    pub fn build(self) -> ir::ExpressionDag {
        self.dag
    }
}

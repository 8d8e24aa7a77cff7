//! Arithmetic on lazy handles: `&a + &b`, `a * b`, `-a`, `&a - 1.0`, `2.0 * &a` record small
//! elementwise operators (one worker per element) in the lazy graph, which the merger fuses
//! with their neighbours.
//!
//! Both tensors must have the same dtype (the types enforce it) and the same shape (an empty
//! one gives an empty result); a shape mismatch or arithmetic on `bool` is reported by `evaluate` as an error
//! naming the line of the expression, never a panic.

use crate::dtype::{DType, Literal};
use crate::error::TraceError;
use crate::host::Scalar;
use crate::ir::{self, Op, TensorKind};
use crate::lazy::{Lazy, LazyTensor, Node, OperatorNode};
use std::ops::{Add, Div, Mul, Neg, Sub};
use std::panic::Location;
use std::sync::Arc;

/// One operand of an elementwise operator.
enum Operand {
    Tensor(LazyTensor),
    Scalar(Literal),
}

fn tensor_type(dtype: DType, shape: &[usize]) -> ir::TensorType {
    ir::TensorType {
        dtype: dtype.to_ir() as i32,
        shape: shape.iter().map(|&d| d as u64).collect(),
    }
}

fn push(exprs: &mut Vec<ir::Expression>, e: ir::Expression) -> u32 {
    exprs.push(e);
    exprs.len() as u32 - 1
}

fn constant(dtype: DType, lit: Literal) -> ir::Expression {
    let mut e = ir::Expression {
        code: Op::Const as i32,
        dtype: dtype.to_ir() as i32,
        ..Default::default()
    };
    match lit {
        Literal::Float(v) => e.float_value = v,
        Literal::Int(v) => e.int_value = v,
        Literal::UInt(v) => e.uint_value = v,
        Literal::Bool(v) => e.int_value = v as i64,
    }
    e
}

/// Records `out[p] = op(operands[p]...)` over the common shape of the tensor operands.
fn elementwise<T: Scalar>(
    name: &'static str,
    op: Op,
    operands: Vec<Operand>,
    at: &'static Location<'static>,
) -> Lazy<T> {
    let dtype = T::DTYPE;
    let tensors: Vec<&LazyTensor> = operands
        .iter()
        .filter_map(|o| match o {
            Operand::Tensor(t) => Some(t),
            Operand::Scalar(_) => None,
        })
        .collect();
    let shape: Vec<usize> = tensors.first().map_or(Vec::new(), |t| t.shape.to_vec());
    let mut error = None;
    if let Some(other) = tensors.iter().find(|t| *t.shape != *shape) {
        error = Some(format!(
            "`{name}` of tensors of different shapes {:?} and {:?}: elementwise arithmetic needs \
             equal shapes (broadcasting is not done implicitly; write an operator that reads the \
             smaller tensor at the index you mean)",
            shape, other.shape
        ));
    } else if dtype == DType::Bool {
        error = Some(format!(
            "`{name}` of bool tensors: arithmetic needs numbers; cast them in an operator"
        ));
    }

    let rank = shape.len();
    let workgroup: Vec<u64> = if rank == 0 {
        vec![1]
    } else {
        shape.iter().map(|&d| d as u64).collect()
    };
    let mut exprs = Vec::new();
    let position: Vec<u32> = (0..rank)
        .map(|axis| {
            push(
                &mut exprs,
                ir::Expression {
                    code: Op::Position as i32,
                    dtype: DType::I64.to_ir() as i32,
                    axis: axis as u32,
                    ..Default::default()
                },
            )
        })
        .collect();
    let mut inputs = Vec::new();
    let mut values = Vec::new();
    for o in &operands {
        let v = match o {
            Operand::Tensor(t) => {
                inputs.push(t.clone());
                push(
                    &mut exprs,
                    ir::Expression {
                        code: Op::Read as i32,
                        dtype: dtype.to_ir() as i32,
                        operands: position.clone(),
                        tensor: Some(ir::TensorRef {
                            kind: TensorKind::Input as i32,
                            index: inputs.len() as u32 - 1,
                        }),
                        ..Default::default()
                    },
                )
            }
            Operand::Scalar(lit) => push(&mut exprs, constant(dtype, *lit)),
        };
        values.push(v);
    }
    let result = push(
        &mut exprs,
        ir::Expression {
            code: op as i32,
            dtype: dtype.to_ir() as i32,
            operands: values,
            ..Default::default()
        },
    );
    let mut write_operands = position;
    write_operands.push(result);
    exprs.push(ir::Expression {
        code: Op::Write as i32,
        operands: write_operands,
        tensor: Some(ir::TensorRef {
            kind: TensorKind::Output as i32,
            index: 0,
        }),
        ..Default::default()
    });
    let dag = ir::ExpressionDag {
        version: crate::IR_VERSION,
        name: name.to_string(),
        expressions: exprs,
        workgroup_shape: workgroup,
        inputs: inputs
            .iter()
            .map(|t| tensor_type(t.dtype, &t.shape))
            .collect(),
        outputs: vec![tensor_type(dtype, &shape)],
        locals: Vec::new(),
        source: Some(ir::SourceLocation {
            file: at.file().to_string(),
            line: at.line(),
            column: at.column(),
        }),
        gradient: None,
    };
    if error.is_none() {
        if let Err(e) = crate::validate::validate(&dag) {
            error = Some(format!(
                "the elementwise operator is not valid IR ({e}); this is a bug in ovl"
            ));
        }
    }
    // An operand's own trace error is reported first by the graph walk.
    let node = Arc::new(Node::Operator(OperatorNode {
        dag: Arc::new(dag),
        inputs,
        error: error.map(|message| {
            Arc::new(TraceError {
                operator: name.to_string(),
                operator_file: at.file().to_string(),
                operator_line: at.line(),
                file: at.file().to_string(),
                line: at.line(),
                column: at.column(),
                message,
            })
        }),
        gradient: Default::default(),
    }));
    Lazy::from_untyped(LazyTensor {
        node,
        output: 0,
        dtype,
        shape: shape.into(),
    })
}

macro_rules! binary {
    ($trait:ident, $method:ident, $name:literal, $op:expr) => {
        impl<T: Scalar> $trait<&Lazy<T>> for &Lazy<T> {
            type Output = Lazy<T>;
            #[track_caller]
            fn $method(self, rhs: &Lazy<T>) -> Lazy<T> {
                elementwise(
                    $name,
                    $op,
                    vec![
                        Operand::Tensor(self.inner.clone()),
                        Operand::Tensor(rhs.inner.clone()),
                    ],
                    Location::caller(),
                )
            }
        }
        impl<T: Scalar> $trait<Lazy<T>> for Lazy<T> {
            type Output = Lazy<T>;
            #[track_caller]
            fn $method(self, rhs: Lazy<T>) -> Lazy<T> {
                (&self).$method(&rhs)
            }
        }
        impl<T: Scalar> $trait<&Lazy<T>> for Lazy<T> {
            type Output = Lazy<T>;
            #[track_caller]
            fn $method(self, rhs: &Lazy<T>) -> Lazy<T> {
                (&self).$method(rhs)
            }
        }
        impl<T: Scalar> $trait<Lazy<T>> for &Lazy<T> {
            type Output = Lazy<T>;
            #[track_caller]
            fn $method(self, rhs: Lazy<T>) -> Lazy<T> {
                self.$method(&rhs)
            }
        }
        impl<T: Scalar> $trait<T> for &Lazy<T> {
            type Output = Lazy<T>;
            #[track_caller]
            fn $method(self, rhs: T) -> Lazy<T> {
                elementwise(
                    $name,
                    $op,
                    vec![
                        Operand::Tensor(self.inner.clone()),
                        Operand::Scalar(rhs.to_literal()),
                    ],
                    Location::caller(),
                )
            }
        }
        impl<T: Scalar> $trait<T> for Lazy<T> {
            type Output = Lazy<T>;
            #[track_caller]
            fn $method(self, rhs: T) -> Lazy<T> {
                (&self).$method(rhs)
            }
        }
        scalar_left!($trait, $method, $name, $op; f32 f64 i8 i16 i32 i64 u8 u16 u32 u64);
    };
}

macro_rules! scalar_left {
    ($trait:ident, $method:ident, $name:literal, $op:expr; $($t:ty)*) => {$(
        impl $trait<&Lazy<$t>> for $t {
            type Output = Lazy<$t>;
            #[track_caller]
            fn $method(self, rhs: &Lazy<$t>) -> Lazy<$t> {
                elementwise(
                    $name,
                    $op,
                    vec![
                        Operand::Scalar(self.to_literal()),
                        Operand::Tensor(rhs.inner.clone()),
                    ],
                    Location::caller(),
                )
            }
        }
        impl $trait<Lazy<$t>> for $t {
            type Output = Lazy<$t>;
            #[track_caller]
            fn $method(self, rhs: Lazy<$t>) -> Lazy<$t> {
                self.$method(&rhs)
            }
        }
    )*};
}

binary!(Add, add, "add", Op::Add);
binary!(Sub, sub, "sub", Op::Sub);
binary!(Mul, mul, "mul", Op::Mul);
binary!(Div, div, "div", Op::Div);

impl<T: crate::trace::Signed> Neg for &Lazy<T> {
    type Output = Lazy<T>;
    #[track_caller]
    fn neg(self) -> Lazy<T> {
        elementwise(
            "neg",
            Op::Neg,
            vec![Operand::Tensor(self.inner.clone())],
            Location::caller(),
        )
    }
}

impl<T: crate::trace::Signed> Neg for Lazy<T> {
    type Output = Lazy<T>;
    #[track_caller]
    fn neg(self) -> Lazy<T> {
        -&self
    }
}

//! Arithmetic on lazy handles: `&a + &b`, `a * b`, `-a`, `&a - 1.0`, `2.0 * &a` record small
//! elementwise operators (one worker per element) in the lazy graph, which the merger fuses
//! with their neighbours.
//!
//! Both tensors must have the same dtype (the types enforce it); their shapes broadcast as in
//! numpy ([`crate::broadcast`], the rule `ovl_stdlib` uses too), and an empty shape gives an
//! empty result. `%` and the comparison methods ([`Lazy::less`], ...) work the same way. Shapes
//! that do not broadcast or arithmetic on `bool` are reported by `evaluate` as an error
//! naming the line of the expression, never a panic.

use crate::dtype::{DType, Literal};
use crate::error::TraceError;
use crate::host::Scalar;
use crate::ir::{self, Op, TensorKind};
use crate::lazy::{Lazy, LazyTensor, Node, OperatorNode};
use std::ops::{Add, Div, Mul, Neg, Rem, Sub};
use std::panic::Location;
use std::sync::Arc;

/// One operand of an elementwise operator.
#[doc(hidden)]
pub enum Operand {
    Tensor(LazyTensor),
    Scalar(Literal),
}

fn tensor_type(dtype: DType, shape: &[usize]) -> ir::TensorType {
    ir::TensorType {
        symbolic: Vec::new(),
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

pub(crate) mod gemm;
pub(crate) mod gradients;

pub use gemm::gemm;

/// Records `out[p] = op(operands[p]...)` over the broadcast shape of the tensor operands
/// ([`crate::broadcast`]: the rule `ovl_stdlib` uses too), with its gradient when `op` is
/// arithmetic (`gradients`). The operands have `T`'s dtype; the result has `R`'s (`bool` for
/// comparisons).
fn elementwise<T: Scalar, R: Scalar>(
    name: &'static str,
    op: Op,
    operands: Vec<Operand>,
    at: &'static Location<'static>,
) -> Lazy<R> {
    let pattern: Vec<Option<Literal>> = operands
        .iter()
        .map(|o| match o {
            Operand::Tensor(_) => None,
            Operand::Scalar(lit) => Some(*lit),
        })
        .collect();
    let y = record::<T, R>(name, op, operands, at);
    if R::DTYPE == T::DTYPE && T::DTYPE != DType::Bool {
        gradients::attach::<R>(&y, op, pattern, at);
    }
    y
}

/// Records the operator of [`elementwise`], without a gradient.
fn record<T: Scalar, R: Scalar>(
    name: &'static str,
    op: Op,
    operands: Vec<Operand>,
    at: &'static Location<'static>,
) -> Lazy<R> {
    let dtype = T::DTYPE;
    let tensors: Vec<&LazyTensor> = operands
        .iter()
        .filter_map(|o| match o {
            Operand::Tensor(t) => Some(t),
            Operand::Scalar(_) => None,
        })
        .collect();
    let mut error = None;
    let mut shape: Vec<usize> = tensors.first().map_or(Vec::new(), |t| t.shape.to_vec());
    for t in tensors.iter().skip(1) {
        match crate::broadcast::broadcast_shapes(&shape, &t.shape) {
            Some(s) => shape = s,
            None => {
                error.get_or_insert(crate::broadcast::mismatch(name, &shape, &t.shape));
            }
        }
    }
    if dtype == DType::Bool {
        error = Some(format!(
            "`{name}` of bool tensors: arithmetic needs numbers; cast them in an operator"
        ));
    }

    // A call seen before (same operator, dtype, operand shapes and literals, same line) reuses
    // its IR and key (see `trace::memo`).
    let memo_key = if error.is_none() {
        let described: Vec<crate::trace::memo::OperandKey> = operands
            .iter()
            .map(|o| match o {
                Operand::Tensor(t) => crate::trace::memo::OperandKey::Shape(&t.shape),
                Operand::Scalar(lit) => crate::trace::memo::OperandKey::Literal(*lit),
            })
            .collect();
        crate::trace::memo::elementwise_key(name, op as i32, dtype, &described, at)
    } else {
        None
    };
    if let Some(m) = memo_key.as_deref().and_then(crate::trace::memo::lookup) {
        let inputs: Vec<LazyTensor> = tensors.iter().map(|t| (*t).clone()).collect();
        let node = Arc::new(Node::Operator(OperatorNode::with_key(
            m.dag.clone(),
            m.key,
            inputs,
            None,
        )));
        return Lazy::from_untyped(LazyTensor {
            node,
            output: 0,
            dtype,
            shape: shape.into(),
        });
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
    // The index 0 of a repeated size-1 dimension, pushed when first needed.
    let mut zero = None;
    let mut inputs = Vec::new();
    let mut values = Vec::new();
    for o in &operands {
        let v = match o {
            Operand::Tensor(t) => {
                inputs.push(t.clone());
                let index: Vec<u32> = if error.is_some() {
                    position.clone()
                } else {
                    crate::broadcast::broadcast_axes(&t.shape, &shape)
                        .into_iter()
                        .map(|axis| match axis {
                            Some(a) => position[a],
                            None => *zero.get_or_insert_with(|| {
                                push(&mut exprs, constant(DType::I64, Literal::Int(0)))
                            }),
                        })
                        .collect()
                };
                push(
                    &mut exprs,
                    ir::Expression {
                        code: Op::Read as i32,
                        dtype: dtype.to_ir() as i32,
                        operands: index,
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
            dtype: R::DTYPE.to_ir() as i32,
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
        symbolic_workgroup: Vec::new(),
        symbol_count: 0,
        version: crate::IR_VERSION,
        name: name.to_string(),
        expressions: exprs,
        workgroup_shape: workgroup,
        inputs: inputs
            .iter()
            .map(|t| tensor_type(t.dtype, &t.shape))
            .collect(),
        outputs: vec![tensor_type(R::DTYPE, &shape)],
        locals: Vec::new(),
        source: Some(ir::SourceLocation {
            file: at.file().to_string(),
            line: at.line(),
            column: at.column(),
        }),
        gradient: None,
        library_call: None,
    };
    if error.is_none() {
        if let Err(e) = crate::validate::validate(&dag) {
            error = Some(format!(
                "the elementwise operator is not valid IR ({e}); this is a bug in ovl"
            ));
        }
    }
    let dag = Arc::new(dag);
    let key = crate::lazy::operator_key(&dag);
    if let (Some(k), None) = (memo_key, &error) {
        crate::trace::memo::remember(
            k,
            crate::trace::memo::Memoized {
                dag: dag.clone(),
                key,
                returned: Vec::new(),
            },
        );
    }
    // An operand's own trace error is reported first by the graph walk.
    let node = Arc::new(Node::Operator(OperatorNode::with_key(
        dag,
        key,
        inputs,
        error.map(|message| {
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
    )));
    Lazy::from_untyped(LazyTensor {
        node,
        output: 0,
        dtype: R::DTYPE,
        shape: shape.into(),
    })
}

macro_rules! binary {
    ($trait:ident, $method:ident, $name:literal, $op:expr) => {
        impl<T: Scalar> $trait<&Lazy<T>> for &Lazy<T> {
            type Output = Lazy<T>;
            #[track_caller]
            fn $method(self, rhs: &Lazy<T>) -> Lazy<T> {
                elementwise::<T, T>(
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
                elementwise::<T, T>(
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
                elementwise::<$t, $t>(
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
binary!(Rem, rem, "rem", Op::Mod);

/// The right operand of a comparison of lazy handles: another handle or a plain value.
pub trait CompareOperand<T> {
    /// As an operand of the elementwise operator.
    #[doc(hidden)]
    fn operand(self) -> Operand;
}

impl<T: Scalar> CompareOperand<T> for &Lazy<T> {
    fn operand(self) -> Operand {
        Operand::Tensor(self.inner.clone())
    }
}

impl<T: Scalar> CompareOperand<T> for Lazy<T> {
    fn operand(self) -> Operand {
        Operand::Tensor(self.inner)
    }
}

impl<T: Scalar> CompareOperand<T> for T {
    fn operand(self) -> Operand {
        Operand::Scalar(self.to_literal())
    }
}

macro_rules! comparisons {
    ($($(#[$doc:meta])* $method:ident $name:literal $op:expr;)*) => {
        /// Elementwise comparisons, broadcasting like the arithmetic operators (and like
        /// `ovl_stdlib`'s `less`, `equal`, ..., which share the rule). NaN compares unequal to
        /// everything.
        impl<T: Scalar> Lazy<T> {
            $(
                $(#[$doc])*
                #[track_caller]
                pub fn $method(&self, other: impl CompareOperand<T>) -> Lazy<bool> {
                    elementwise::<T, bool>(
                        $name,
                        $op,
                        vec![Operand::Tensor(self.inner.clone()), other.operand()],
                        Location::caller(),
                    )
                }
            )*
        }
    };
}

comparisons! {
    /// `self == other`, elementwise.
    equal "equal" Op::Eq;
    /// `self != other`, elementwise.
    not_equal "not_equal" Op::Ne;
    /// `self < other`, elementwise.
    less "less" Op::Lt;
    /// `self <= other`, elementwise.
    less_equal "less_equal" Op::Le;
    /// `self > other`, elementwise.
    greater "greater" Op::Gt;
    /// `self >= other`, elementwise.
    greater_equal "greater_equal" Op::Ge;
}

impl<T: Scalar> Lazy<T> {
    /// `-self`, elementwise, for any numeric type: unsigned integers wrap (as
    /// `u32::wrapping_neg`). Unary `-` is the same for signed types.
    #[track_caller]
    pub fn wrapping_neg(&self) -> Lazy<T> {
        elementwise::<T, T>(
            "neg",
            Op::Neg,
            vec![Operand::Tensor(self.inner.clone())],
            Location::caller(),
        )
    }
}

impl<T: crate::trace::Signed> Neg for &Lazy<T> {
    type Output = Lazy<T>;
    #[track_caller]
    fn neg(self) -> Lazy<T> {
        self.wrapping_neg()
    }
}

impl<T: crate::trace::Signed> Neg for Lazy<T> {
    type Output = Lazy<T>;
    #[track_caller]
    fn neg(self) -> Lazy<T> {
        -&self
    }
}

//! Staged scalar values: [`Expr`] (an immutable value computed by the worker) and [`Var`] (a
//! worker-local mutable variable), and the conversions that let literals and trace-time numbers
//! mix with them.

use super::state;
use crate::dtype::{DType, Literal};
use crate::host::Scalar;
use crate::ir;
use std::fmt;
use std::marker::PhantomData;
use std::panic::Location;

/// A staged scalar of type `T`: a node of the operator's expression DAG.
///
/// Arithmetic (`+ - * / %`, unary `-`, `!`), comparisons and math functions on it build the IR.
/// Plain numbers mixed with it are converted to `T` (a literal that does not fit is an error).
pub struct Expr<T> {
    pub(crate) id: u32,
    pub(crate) trace: u32,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for Expr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Expr<T> {}

impl<T: Scalar> fmt::Debug for Expr<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Expr<{}>(%{})", T::DTYPE, self.id)
    }
}

impl<T> Expr<T> {
    pub(crate) fn from_id(trace: u32, id: u32) -> Self {
        Expr {
            id,
            trace,
            _t: PhantomData,
        }
    }
}

/// A worker-local mutable scalar, made with `variable`.
///
/// Assign it with `v = expr` (inside `#[operator]`) or `v.set(expr)`, update it with `+=` and
/// friends, and read it by using it in an expression: each use reads its value at that point.
pub struct Var<T> {
    pub(crate) expr: Expr<T>,
}

impl<T> Clone for Var<T> {
    fn clone(&self) -> Self {
        *self
    }
}
/// Copying a `Var` copies the handle: both name the same variable.
impl<T> Copy for Var<T> {}

impl<T: Scalar> fmt::Debug for Var<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Var<{}>(%{})", T::DTYPE, self.expr.id)
    }
}

impl<T: Scalar> Var<T> {
    /// The variable's current value (a snapshot: later assignments do not change it).
    #[track_caller]
    pub fn get(&self) -> Expr<T> {
        let loc = Location::caller();
        let e = self.expr;
        state::with(|s| {
            let v = s.operand(loc, e.trace, e.id);
            Expr::from_id(s.id, s.push_op(ir::Op::Cast, Some(T::DTYPE), vec![v]))
        })
    }

    /// Assigns a new value.
    #[track_caller]
    pub fn set(&mut self, value: impl IntoExpr<T>) {
        let loc = Location::caller();
        let value = value.into_expr();
        let var = self.expr;
        state::with(|s| {
            let var = s.operand(loc, var.trace, var.id);
            let value = s.operand(loc, value.trace, value.id);
            s.push_op(ir::Op::Assign, None, vec![var, value]);
        });
    }
}

/// Element types with arithmetic (every dtype but `bool`). Generic code gets `T::ONE` /
/// `T::ZERO`, and plain integers coerce to a staged `T` (`x == 0`, `select(c, 1, 0)`).
pub trait Num: Scalar + IntoExpr<Self> + One + Zero {
    /// The type values of this type are accumulated and computed in where rounding once
    /// matters (sums, products, row statistics): f32 for the half types, the type itself
    /// otherwise. Move between them with [`Expr::as_dtype`].
    type Wide: Num;
}
/// Signed element types (`i8` .. `i64`, `f32`, `f64`, `f16`, `bf16`): the ones unary `-` applies to, as in
/// Rust. Negating an unsigned value would wrap (`-2u8` is 254), so it is a compile error; bound
/// a generic operator that negates by `T: Signed` (or `T: Float`).
#[diagnostic::on_unimplemented(
    message = "cannot negate a `{Self}` value: unary `-` needs a signed element type (on an unsigned one it would wrap: 2 becomes 254)",
    note = "as in Rust, `-x` is for signed types: cast first (`-(x as i32)`), write `wrapping_neg(x)` if the wrap is meant, or bound a generic element type by `Signed`"
)]
pub trait Signed: Num {}

/// Floating-point element types (`f32`, `f64`, `half::f16`, `half::bf16`).
pub trait Float: Signed {
    /// The float type values of this type are computed in where rounding once matters (row
    /// statistics, softmax): f32 for the half types, the type itself otherwise (the same type
    /// as [`Num::Wide`], with the float functions).
    type Compute: Float;
}
/// Integer element types.
pub trait Int: Num {}

impl Num for f32 {
    type Wide = f32;
}
impl Num for f64 {
    type Wide = f64;
}
impl Signed for f32 {}
impl Signed for f64 {}
impl Float for f32 {
    type Compute = f32;
}
impl Float for f64 {
    type Compute = f64;
}
impl Num for half::f16 {
    type Wide = f32;
}
impl Num for half::bf16 {
    type Wide = f32;
}
impl Signed for half::f16 {}
impl Signed for half::bf16 {}
impl Float for half::f16 {
    type Compute = f32;
}
impl Float for half::bf16 {
    type Compute = f32;
}
macro_rules! ints { ($($t:ty)*) => {$( impl Num for $t { type Wide = $t; } impl Int for $t {} )*} }
ints!(i8 i16 i32 i64 u8 u16 u32 u64);
macro_rules! signed { ($($t:ty)*) => {$( impl Signed for $t {} )*} }
signed!(i8 i16 i32 i64);

/// Anything usable where a staged `T` is expected: `Expr<T>`, `Var<T>`, and plain numbers
/// (converted to `T`; trace-time integers and floats coerce to float `T`, integers to integer `T`).
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be used as a staged `{T}`",
    label = "expected a `{T}` value here",
    note = "ovl never converts between dtypes implicitly: cast with `as` or `.cast::<T>()`; a float literal cannot become an integer"
)]
pub trait IntoExpr<T> {
    /// Converts to an expression of the active trace.
    #[track_caller]
    fn into_expr(self) -> Expr<T>;
}

impl<T> IntoExpr<T> for Expr<T> {
    fn into_expr(self) -> Expr<T> {
        self
    }
}

impl<T: Scalar> IntoExpr<T> for Var<T> {
    #[track_caller]
    fn into_expr(self) -> Expr<T> {
        self.get()
    }
}

impl<T: Scalar> IntoExpr<T> for &Var<T> {
    #[track_caller]
    fn into_expr(self) -> Expr<T> {
        self.get()
    }
}

impl<T: Scalar> IntoExpr<T> for &mut Var<T> {
    #[track_caller]
    fn into_expr(self) -> Expr<T> {
        self.get()
    }
}

/// A value whose staged type is fixed by its own type: used where the dtype must be inferred
/// from an argument (`variable(0.0f32)` is a `Var<f32>`).
pub trait Typed {
    type Elem: Scalar;
    #[track_caller]
    fn to_expr(self) -> Expr<Self::Elem>;
}

impl<T: Scalar> Typed for Expr<T> {
    type Elem = T;
    fn to_expr(self) -> Expr<T> {
        self
    }
}

impl<T: Scalar> Typed for Var<T> {
    type Elem = T;
    #[track_caller]
    fn to_expr(self) -> Expr<T> {
        self.get()
    }
}

impl<T: Scalar> Typed for &Var<T> {
    type Elem = T;
    #[track_caller]
    fn to_expr(self) -> Expr<T> {
        self.get()
    }
}

/// A staged constant.
#[track_caller]
pub fn constant<T: Scalar>(value: T) -> Expr<T> {
    state::with(|s| Expr::from_id(s.id, s.push_const(T::DTYPE, value.to_literal())))
}

/// Emits `value` as a constant of `dtype`, recording an error if it does not fit.
#[track_caller]
fn coerced<T: Scalar>(value: Literal, from: &str) -> Expr<T> {
    let loc = Location::caller();
    let fits = match (T::DTYPE, value) {
        (DType::F32, Literal::Float(f)) => !f.is_finite() || f.abs() <= f32::MAX as f64,
        (d @ (DType::F16 | DType::BF16), Literal::Float(f)) => {
            ovl_ir::half_float::check_literal(d, f).is_ok()
        }
        (d, _) if d.is_float() => true,
        (d, Literal::Int(i)) => int_fits(d, i as i128),
        (d, Literal::UInt(u)) => int_fits(d, u as i128),
        (DType::Bool, Literal::Bool(_)) => true,
        _ => false,
    };
    state::with(|s| {
        if !fits {
            s.error(
                loc,
                format!(
                    "the {from} value {} does not fit in {}; cast it explicitly",
                    show(value),
                    T::DTYPE
                ),
            );
        }
        Expr::from_id(s.id, s.push_const(T::DTYPE, value))
    })
}

fn show(v: Literal) -> String {
    match v {
        Literal::Float(f) => format!("{f}"),
        Literal::Int(i) => format!("{i}"),
        Literal::UInt(u) => format!("{u}"),
        Literal::Bool(b) => format!("{b}"),
    }
}

/// Whether the integer `v` is a value of the integer dtype `d`.
pub(crate) fn int_fits(d: DType, v: i128) -> bool {
    d.is_int() && d.int_range().is_some_and(|(lo, hi)| (lo..=hi).contains(&v))
}

/// `bool` is a staged value of its own type (numbers: below).
impl IntoExpr<bool> for bool {
    #[track_caller]
    fn into_expr(self) -> Expr<bool> {
        constant(self)
    }
}

/// A plain integer is a literal of any numeric staged type, generic ones included (`x == 0`,
/// `select(c, 1, 0)` for `T: Num`); a value that does not fit the type is a trace error.
macro_rules! int_into {
    ($($src:ty => $lit:ident),*) => {$(
        impl<T: Num> IntoExpr<T> for $src {
            #[track_caller]
            #[allow(clippy::unnecessary_cast)]
            fn into_expr(self) -> Expr<T> {
                coerced::<T>(literal_into!(@lit $lit self), stringify!($src))
            }
        }
    )*};
}

/// A plain float is a literal of any float staged type (never of an integer one).
macro_rules! float_into {
    ($($src:ty),*) => {$(
        impl<T: Float> IntoExpr<T> for $src {
            #[track_caller]
            #[allow(clippy::unnecessary_cast)]
            fn into_expr(self) -> Expr<T> {
                coerced::<T>(Literal::Float(self as f64), stringify!($src))
            }
        }
    )*};
}

macro_rules! literal_into {
    (@lit I $v:ident) => {
        Literal::Int($v as i64)
    };
    (@lit U $v:ident) => {
        Literal::UInt($v as u64)
    };
}

int_into!(i8 => I, i16 => I, i32 => I, i64 => I, isize => I, u8 => U, u16 => U, u32 => U,
          u64 => U, usize => U);
float_into!(f32, f64);

macro_rules! typed_plain {
    ($($t:ty),*) => {$(
        impl Typed for $t {
            type Elem = $t;
            #[track_caller]
            fn to_expr(self) -> Expr<$t> {
                constant(self)
            }
        }
    )*};
}
typed_plain!(
    f32,
    f64,
    i8,
    i16,
    i32,
    i64,
    u8,
    u16,
    u32,
    u64,
    bool,
    half::f16,
    half::bf16
);

/// A half value is a literal of its own staged type.
macro_rules! half_into {
    ($($t:ty),*) => {$(
        impl IntoExpr<$t> for $t {
            #[track_caller]
            fn into_expr(self) -> Expr<$t> {
                constant(self)
            }
        }
    )*};
}
half_into!(half::f16, half::bf16);

/// Element types with a one (every element type; `true` for `bool`).
pub trait One {
    /// One.
    const ONE: Self;
}

/// Element types with a zero (every element type; `false` for `bool`).
pub trait Zero {
    /// Zero.
    const ZERO: Self;
}
macro_rules! zero { ($($t:ty = $v:expr),*) => {$( impl Zero for $t { const ZERO: Self = $v; } )*} }
zero!(
    f32 = 0.0,
    f64 = 0.0,
    i8 = 0,
    i16 = 0,
    i32 = 0,
    i64 = 0,
    u8 = 0,
    u16 = 0,
    u32 = 0,
    u64 = 0,
    bool = false,
    half::f16 = half::f16::ZERO,
    half::bf16 = half::bf16::ZERO
);
macro_rules! one { ($($t:ty = $v:expr),*) => {$( impl One for $t { const ONE: Self = $v; } )*} }
one!(
    f32 = 1.0,
    f64 = 1.0,
    i8 = 1,
    i16 = 1,
    i32 = 1,
    i64 = 1,
    u8 = 1,
    u16 = 1,
    u32 = 1,
    u64 = 1,
    bool = true,
    half::f16 = half::f16::ONE,
    half::bf16 = half::bf16::ONE
);

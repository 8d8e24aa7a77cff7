//! Math functions on staged values, as free functions (`sin(x)`) and methods (`x.sin()`).

use super::expr::{constant, Expr, Float, IntoExpr, Num, Typed};
use super::ops::{apply, binary, unary};
use crate::dtype::DType;
use crate::host::Scalar;
use crate::ir;

macro_rules! float_unary {
    ($($(#[$doc:meta])* $name:ident => $code:ident),* $(,)?) => {
        $(
            $(#[$doc])*
            #[track_caller]
            pub fn $name<X: Typed>(x: X) -> Expr<X::Elem> where X::Elem: Float {
                unary(ir::Op::$code, x.to_expr())
            }
        )*
        impl<T: Float> Expr<T> {
            $(
                $(#[$doc])*
                #[track_caller]
                pub fn $name(self) -> Expr<T> {
                    unary(ir::Op::$code, self)
                }
            )*
        }
    };
}

float_unary! {
    /// Square root.
    sqrt => Sqrt,
    /// `1 / sqrt(x)`.
    rsqrt => Rsqrt,
    /// `e^x`.
    exp => Exp,
    /// `2^x`.
    exp2 => Exp2,
    /// `e^x - 1`, accurate near zero.
    expm1 => Expm1,
    /// Natural logarithm.
    log => Log,
    /// Base-2 logarithm.
    log2 => Log2,
    /// Base-10 logarithm.
    log10 => Log10,
    /// `ln(1 + x)`, accurate near zero.
    log1p => Log1p,
    /// Sine.
    sin => Sin,
    /// Cosine.
    cos => Cos,
    /// Tangent.
    tan => Tan,
    /// Arcsine.
    asin => Asin,
    /// Arccosine.
    acos => Acos,
    /// Arctangent.
    atan => Atan,
    /// Hyperbolic sine.
    sinh => Sinh,
    /// Hyperbolic cosine.
    cosh => Cosh,
    /// Hyperbolic tangent.
    tanh => Tanh,
    /// Logistic sigmoid `1 / (1 + e^-x)`.
    sigmoid => Sigmoid,
    /// Error function.
    erf => Erf,
    /// Rounds up.
    ceil => Ceil,
    /// Rounds down.
    floor => Floor,
    /// Rounds half away from zero.
    round => Round,
}

macro_rules! float_predicate {
    ($($(#[$doc:meta])* $name:ident => $code:ident),* $(,)?) => {
        $(
            $(#[$doc])*
            #[track_caller]
            pub fn $name<X: Typed>(x: X) -> Expr<bool> where X::Elem: Float {
                unary(ir::Op::$code, x.to_expr())
            }
        )*
        impl<T: Float> Expr<T> {
            $(
                $(#[$doc])*
                #[track_caller]
                pub fn $name(self) -> Expr<bool> {
                    unary(ir::Op::$code, self)
                }
            )*
        }
    };
}

float_predicate! {
    /// Whether `x` is +/- infinity.
    isinf => Isinf,
    /// Whether `x` is neither infinite nor NaN.
    isfinite => Isfinite,
    /// Whether `x` is NaN.
    isnan => Isnan,
}

/// Absolute value (of an integer: wrapping, `abs(MIN) == MIN`).
#[track_caller]
pub fn abs<X: Typed>(x: X) -> Expr<X::Elem>
where
    X::Elem: Num,
{
    unary(ir::Op::Abs, x.to_expr())
}

/// The smaller of `a` and `b` (for floats a NaN operand is ignored).
#[track_caller]
pub fn min<T: Num>(a: impl IntoExpr<T>, b: impl IntoExpr<T>) -> Expr<T> {
    binary(ir::Op::Min, a.into_expr(), b.into_expr())
}

/// `-x` for any numeric type, wrapping for unsigned integers (`wrapping_neg(2u8)` is 254), as
/// Rust's `u8::wrapping_neg`. Unary `-` only applies to [`super::Signed`] types; use this where
/// the wrap is what you mean.
#[track_caller]
pub fn wrapping_neg<T: Num>(x: impl IntoExpr<T>) -> Expr<T> {
    super::ops::unary(ir::Op::Neg, x.into_expr())
}

/// The larger of `a` and `b` (for floats a NaN operand is ignored).
#[track_caller]
pub fn max<T: Num>(a: impl IntoExpr<T>, b: impl IntoExpr<T>) -> Expr<T> {
    binary(ir::Op::Max, a.into_expr(), b.into_expr())
}

/// `base` raised to `exponent`.
#[track_caller]
pub fn pow<T: Float>(base: impl IntoExpr<T>, exponent: impl IntoExpr<T>) -> Expr<T> {
    binary(ir::Op::Pow, base.into_expr(), exponent.into_expr())
}

/// The angle of the point `(x, y)`: `atan2(y, x)`.
#[track_caller]
pub fn atan2<T: Float>(y: impl IntoExpr<T>, x: impl IntoExpr<T>) -> Expr<T> {
    binary(ir::Op::Atan2, y.into_expr(), x.into_expr())
}

/// `a * b + c` with a single rounding.
#[track_caller]
pub fn fma<T: Float>(a: impl IntoExpr<T>, b: impl IntoExpr<T>, c: impl IntoExpr<T>) -> Expr<T> {
    let (a, b, c) = (a.into_expr(), b.into_expr(), c.into_expr());
    apply(
        ir::Op::Fma,
        T::DTYPE,
        &[(a.trace, a.id), (b.trace, b.id), (c.trace, c.id)],
    )
}

/// `if_true` where `condition` holds, else `if_false` (both are evaluated).
#[track_caller]
pub fn select<T: Scalar>(
    condition: impl super::control::Condition,
    if_true: impl IntoExpr<T>,
    if_false: impl IntoExpr<T>,
) -> Expr<T> {
    let c = match condition.into_cond() {
        super::control::Cond::Plain(b) => constant(b),
        super::control::Cond::Staged(e) => e,
    };
    let (a, b) = (if_true.into_expr(), if_false.into_expr());
    apply(
        ir::Op::Select,
        T::DTYPE,
        &[(c.trace, c.id), (a.trace, a.id), (b.trace, b.id)],
    )
}

impl<T: Num> Expr<T> {
    /// Absolute value.
    #[track_caller]
    pub fn abs(self) -> Expr<T> {
        unary(ir::Op::Abs, self)
    }

    /// The smaller of `self` and `other`.
    #[track_caller]
    pub fn min(self, other: impl IntoExpr<T>) -> Expr<T> {
        min(self, other)
    }

    /// The larger of `self` and `other`.
    #[track_caller]
    pub fn max(self, other: impl IntoExpr<T>) -> Expr<T> {
        max(self, other)
    }
}

impl<T: Float> Expr<T> {
    /// `self` raised to `exponent`.
    #[track_caller]
    pub fn pow(self, exponent: impl IntoExpr<T>) -> Expr<T> {
        pow(self, exponent)
    }
}

impl<T: Scalar> Expr<T> {
    /// Converts to dtype `U` with Rust `as` semantics (float to int saturates, NaN becomes 0).
    #[track_caller]
    pub fn cast<U: Scalar>(self) -> Expr<U> {
        unary(ir::Op::Cast, self)
    }

    /// This value as dtype `U`: a CAST, or the value itself (nothing recorded) when `U` is this
    /// value's dtype. For code generic over an element type and its [`Num::Wide`] type, so that
    /// f32 code records the same IR as before.
    ///
    /// [`Num::Wide`]: super::expr::Num::Wide
    #[track_caller]
    pub fn as_dtype<U: Scalar>(self) -> Expr<U> {
        if U::DTYPE == T::DTYPE {
            Expr::from_id(self.trace, self.id)
        } else {
            self.cast::<U>()
        }
    }

    /// This value in its type's [`Num::Wide`] type (f32 for the half types): what sums and
    /// products accumulate in.
    ///
    /// [`Num::Wide`]: super::expr::Num::Wide
    #[track_caller]
    pub fn wide(self) -> Expr<T::Wide>
    where
        T: super::expr::Num,
    {
        self.as_dtype()
    }

    /// This value in its type's [`Float::Compute`] type (f32 for the half types): what row
    /// statistics and softmax compute in.
    ///
    /// [`Float::Compute`]: super::expr::Float::Compute
    #[track_caller]
    pub fn compute(self) -> Expr<T::Compute>
    where
        T: super::expr::Float,
    {
        self.as_dtype()
    }

    /// The dtype of this value.
    pub fn dtype(&self) -> DType {
        T::DTYPE
    }
}

/// Numeric limits of the element types, as trace-time values.
pub trait Limits: Copy {
    /// The smallest finite value.
    const MIN_VALUE: Self;
    /// The largest finite value.
    const MAX_VALUE: Self;
    /// The difference between 1 and the next representable value (1 for integers).
    const EPSILON: Self;
}

macro_rules! limits {
    ($($t:ty => $eps:expr),*) => {$(
        impl Limits for $t {
            const MIN_VALUE: Self = <$t>::MIN;
            const MAX_VALUE: Self = <$t>::MAX;
            const EPSILON: Self = $eps;
        }
    )*};
}
limits!(f32 => f32::EPSILON, f64 => f64::EPSILON, i8 => 1, i16 => 1, i32 => 1, i64 => 1,
        u8 => 1, u16 => 1, u32 => 1, u64 => 1, half::f16 => half::f16::EPSILON,
        half::bf16 => half::bf16::EPSILON);

/// The smallest finite value of `T` (for floats the most negative).
pub fn min_value<T: Limits>() -> T {
    T::MIN_VALUE
}

/// The largest finite value of `T`.
pub fn max_value<T: Limits>() -> T {
    T::MAX_VALUE
}

/// The machine epsilon of `T` (1 for integers).
pub fn epsilon<T: Limits>() -> T {
    T::EPSILON
}

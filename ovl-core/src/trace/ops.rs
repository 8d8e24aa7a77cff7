//! Operator overloading on staged values: `+ - * / %`, the bitwise `& | ^ << >>` of integers,
//! unary `-` and `!`, compound assignment.

use super::expr::{Expr, Int, IntoExpr, Num, Var};
use super::state;
use crate::dtype::DType;
use crate::host::Scalar;
use crate::ir;
use std::ops::{
    Add, AddAssign, BitAnd, BitAndAssign, BitOr, BitOrAssign, BitXor, BitXorAssign, Div, DivAssign,
    Mul, MulAssign, Neg, Not, Rem, RemAssign, Shl, ShlAssign, Shr, ShrAssign, Sub, SubAssign,
};
use std::panic::Location;

/// Emits `code` applied to `operands` with result dtype `dtype`.
#[track_caller]
pub(crate) fn apply<T>(code: ir::Op, dtype: DType, operands: &[(u32, u32)]) -> Expr<T> {
    let loc = Location::caller();
    state::with(|s| {
        let ops = operands
            .iter()
            .map(|&(trace, id)| s.operand(loc, trace, id))
            .collect();
        Expr::from_id(s.id, s.push_op(code, Some(dtype), ops))
    })
}

/// `a <code> b` for two staged values of the same dtype, producing a `T`.
#[track_caller]
pub(crate) fn binary<T: Scalar, U>(code: ir::Op, a: Expr<U>, b: Expr<U>) -> Expr<T> {
    apply(code, T::DTYPE, &[(a.trace, a.id), (b.trace, b.id)])
}

/// `code(a)` for a staged value, producing a `T`.
#[track_caller]
pub(crate) fn unary<T: Scalar, U>(code: ir::Op, a: Expr<U>) -> Expr<T> {
    apply(code, T::DTYPE, &[(a.trace, a.id)])
}

/// Rejects rebinding a staged value inside a staged block it was not defined in: the rebinding
/// would happen at trace time, unconditionally, which is never what the user meant.
#[track_caller]
pub(crate) fn check_rebind<T>(old: Expr<T>) {
    let loc = Location::caller();
    state::with(|s| {
        if old.trace == s.id && !s.in_current_region(old.id) {
            s.error(
                loc,
                "this value was defined outside the staged `if`/`for`/`while` it is reassigned in, \
                 so the reassignment would not depend on the condition or iteration; declare it \
                 with `let mut v = variable(..)` to get a worker-local variable",
            );
        }
    });
}

macro_rules! arith {
    ($bound:ident; $plain:tt; $($trait:ident $method:ident $atrait:ident $amethod:ident $code:ident),*) => {$(
        impl<T: $bound, R: IntoExpr<T>> $trait<R> for Expr<T> {
            type Output = Expr<T>;
            #[track_caller]
            fn $method(self, rhs: R) -> Expr<T> {
                binary(ir::Op::$code, self, rhs.into_expr())
            }
        }
        impl<T: $bound, R: IntoExpr<T>> $trait<R> for Var<T> {
            type Output = Expr<T>;
            #[track_caller]
            fn $method(self, rhs: R) -> Expr<T> {
                binary(ir::Op::$code, self.get(), rhs.into_expr())
            }
        }
        impl<T: $bound, R: IntoExpr<T>> $trait<R> for &Var<T> {
            type Output = Expr<T>;
            #[track_caller]
            fn $method(self, rhs: R) -> Expr<T> {
                binary(ir::Op::$code, self.get(), rhs.into_expr())
            }
        }
        impl<T: $bound, R: IntoExpr<T>> $atrait<R> for Var<T> {
            #[track_caller]
            fn $amethod(&mut self, rhs: R) {
                let value = binary(ir::Op::$code, self.get(), rhs.into_expr());
                self.set(value);
            }
        }
        impl<T: $bound, R: IntoExpr<T>> $atrait<R> for Expr<T> {
            #[track_caller]
            fn $amethod(&mut self, rhs: R) {
                check_rebind(*self);
                *self = binary(ir::Op::$code, *self, rhs.into_expr());
            }
        }
        arith!(@plain $bound $trait $method $code; $plain);
    )*};
    (@plain $bound:ident $trait:ident $method:ident $code:ident; [$($p:ty)*]) => {$(
        impl<T: $bound> $trait<Expr<T>> for $p where $p: IntoExpr<T> {
            type Output = Expr<T>;
            #[track_caller]
            fn $method(self, rhs: Expr<T>) -> Expr<T> {
                binary(ir::Op::$code, self.into_expr(), rhs)
            }
        }
        impl<T: $bound> $trait<Var<T>> for $p where $p: IntoExpr<T> {
            type Output = Expr<T>;
            #[track_caller]
            fn $method(self, rhs: Var<T>) -> Expr<T> {
                binary(ir::Op::$code, self.into_expr(), rhs.get())
            }
        }
    )*};
}

arith! {
    Num; [f32 f64 i8 i16 i32 i64 isize u8 u16 u32 u64 usize];
    Add add AddAssign add_assign Add,
    Sub sub SubAssign sub_assign Sub,
    Mul mul MulAssign mul_assign Mul,
    Div div DivAssign div_assign Div,
    Rem rem RemAssign rem_assign Mod
}

// The bitwise operators of integers (`ir::Op::BitAnd` ... `Shr`): a shift's count is a value
// of the same type, taken modulo the width (see `proto/ovl.proto`).
arith! {
    Int; [i8 i16 i32 i64 isize u8 u16 u32 u64 usize];
    BitAnd bitand BitAndAssign bitand_assign BitAnd,
    BitOr bitor BitOrAssign bitor_assign BitOr,
    BitXor bitxor BitXorAssign bitxor_assign BitXor,
    Shl shl ShlAssign shl_assign Shl,
    Shr shr ShrAssign shr_assign Shr
}

impl<T: super::expr::Signed> Neg for Expr<T> {
    type Output = Expr<T>;
    #[track_caller]
    fn neg(self) -> Expr<T> {
        unary(ir::Op::Neg, self)
    }
}

impl<T: super::expr::Signed> Neg for Var<T> {
    type Output = Expr<T>;
    #[track_caller]
    fn neg(self) -> Expr<T> {
        unary(ir::Op::Neg, self.get())
    }
}

/// Element types with `!`: logical on `bool`, bitwise on integers.
pub trait Logical: Scalar {}
impl Logical for bool {}
macro_rules! logical { ($($t:ty)*) => {$( impl Logical for $t {} )*} }
logical!(i8 i16 i32 i64 u8 u16 u32 u64);

impl<T: Logical> Not for Expr<T> {
    type Output = Expr<T>;
    #[track_caller]
    fn not(self) -> Expr<T> {
        unary(ir::Op::Not, self)
    }
}

impl<T: Logical> Not for Var<T> {
    type Output = Expr<T>;
    #[track_caller]
    fn not(self) -> Expr<T> {
        unary(ir::Op::Not, self.get())
    }
}

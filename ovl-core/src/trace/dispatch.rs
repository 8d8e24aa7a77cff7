//! Syntax that Rust cannot overload, dispatched on operand types: comparisons, `&&`/`||`,
//! `as` casts, assignment and indexed assignment. A trace-time operand keeps Rust's meaning;
//! a staged one builds the IR. The `#[operator]` rewrite calls these.

use super::expr::{Expr, IntoExpr, Var};
use super::ops::{binary, check_rebind, unary};
use super::tensor::{IndexPart, Tensor};
use crate::host::Scalar;
use crate::ir;
use std::borrow::Borrow;
use std::ops::IndexMut;

/// `<`, `<=`, `>`, `>=`, `==`, `!=` for trace-time and staged operands.
#[diagnostic::on_unimplemented(
    message = "cannot compare `{Self}` with `{R}` inside an operator",
    note = "inside #[operator], comparisons work on numbers (trace-time or staged) of one type, `char`, `&str`, `String`, and slices, `Vec`s and arrays of comparable elements (shapes); compare other values in a plain helper function"
)]
pub trait Compare<R> {
    /// `bool` for trace-time operands, `Expr<bool>` for staged ones.
    type Out;
    fn lt(self, r: R) -> Self::Out;
    fn le(self, r: R) -> Self::Out;
    fn gt(self, r: R) -> Self::Out;
    fn ge(self, r: R) -> Self::Out;
    fn eq(self, r: R) -> Self::Out;
    fn ne(self, r: R) -> Self::Out;
}

macro_rules! staged_compare {
    ($self_ty:ty, $conv:ident) => {
        impl<T: Scalar, R: IntoExpr<T>> Compare<R> for $self_ty {
            type Out = Expr<bool>;
            #[track_caller]
            fn lt(self, r: R) -> Expr<bool> {
                binary(ir::Op::Lt, $conv(self), r.into_expr())
            }
            #[track_caller]
            fn le(self, r: R) -> Expr<bool> {
                binary(ir::Op::Le, $conv(self), r.into_expr())
            }
            #[track_caller]
            fn gt(self, r: R) -> Expr<bool> {
                binary(ir::Op::Gt, $conv(self), r.into_expr())
            }
            #[track_caller]
            fn ge(self, r: R) -> Expr<bool> {
                binary(ir::Op::Ge, $conv(self), r.into_expr())
            }
            #[track_caller]
            fn eq(self, r: R) -> Expr<bool> {
                binary(ir::Op::Eq, $conv(self), r.into_expr())
            }
            #[track_caller]
            fn ne(self, r: R) -> Expr<bool> {
                binary(ir::Op::Ne, $conv(self), r.into_expr())
            }
        }
    };
}

fn same<T>(e: Expr<T>) -> Expr<T> {
    e
}
#[track_caller]
fn read_var<T: Scalar>(v: Var<T>) -> Expr<T> {
    v.get()
}
staged_compare!(Expr<T>, same);
staged_compare!(Var<T>, read_var);

macro_rules! plain_compare {
    ($($t:ty),*) => {$(
        impl Compare<$t> for $t {
            type Out = bool;
            fn lt(self, r: $t) -> bool { self < r }
            fn le(self, r: $t) -> bool { self <= r }
            fn gt(self, r: $t) -> bool { self > r }
            fn ge(self, r: $t) -> bool { self >= r }
            fn eq(self, r: $t) -> bool { self == r }
            fn ne(self, r: $t) -> bool { self != r }
        }
        impl<'a> Compare<&'a $t> for &'a $t {
            type Out = bool;
            fn lt(self, r: &$t) -> bool { self < r }
            fn le(self, r: &$t) -> bool { self <= r }
            fn gt(self, r: &$t) -> bool { self > r }
            fn ge(self, r: &$t) -> bool { self >= r }
            fn eq(self, r: &$t) -> bool { self == r }
            fn ne(self, r: &$t) -> bool { self != r }
        }
    )*};
}
plain_compare!(f32, f64, i8, i16, i32, i64, isize, u8, u16, u32, u64, usize, bool, char, String);

impl Compare<&str> for &str {
    type Out = bool;
    fn lt(self, r: &str) -> bool {
        self < r
    }
    fn le(self, r: &str) -> bool {
        self <= r
    }
    fn gt(self, r: &str) -> bool {
        self > r
    }
    fn ge(self, r: &str) -> bool {
        self >= r
    }
    fn eq(self, r: &str) -> bool {
        self == r
    }
    fn ne(self, r: &str) -> bool {
        self != r
    }
}

/// Sequences compare at trace time as Rust compares slices (lexicographically), whatever mix of
/// slice, `Vec` and array holds them: `a.shape() != b.shape()`, `x.dims::<2>() == [3, 4]`.
macro_rules! seq_compare {
    ($([$($g:tt)*] $l:ty, $r:ty;)*) => {$(
        impl<$($g)*> Compare<$r> for $l {
            type Out = bool;
            fn lt(self, r: $r) -> bool { seq(&self) < seq(&r) }
            fn le(self, r: $r) -> bool { seq(&self) <= seq(&r) }
            fn gt(self, r: $r) -> bool { seq(&self) > seq(&r) }
            fn ge(self, r: $r) -> bool { seq(&self) >= seq(&r) }
            fn eq(self, r: $r) -> bool { seq(&self) == seq(&r) }
            fn ne(self, r: $r) -> bool { seq(&self) != seq(&r) }
        }
    )*};
}

/// Any sequence as a slice.
fn seq<T, S: AsRef<[T]> + ?Sized>(s: &S) -> &[T] {
    s.as_ref()
}

seq_compare! {
    ['a, 'b, T: PartialOrd] &'a [T], &'b [T];
    ['a, T: PartialOrd] &'a [T], Vec<T>;
    ['a, 'b, T: PartialOrd] &'a [T], &'b Vec<T>;
    ['a, T: PartialOrd, const N: usize] &'a [T], [T; N];
    ['a, 'b, T: PartialOrd, const N: usize] &'a [T], &'b [T; N];
    ['a, T: PartialOrd] Vec<T>, &'a [T];
    [T: PartialOrd] Vec<T>, Vec<T>;
    ['a, T: PartialOrd] Vec<T>, &'a Vec<T>;
    [T: PartialOrd, const N: usize] Vec<T>, [T; N];
    ['a, T: PartialOrd] &'a Vec<T>, &'a [T];
    ['a, T: PartialOrd] &'a Vec<T>, Vec<T>;
    ['a, 'b, T: PartialOrd] &'a Vec<T>, &'b Vec<T>;
    ['a, T: PartialOrd, const N: usize] &'a Vec<T>, [T; N];
    ['a, T: PartialOrd, const N: usize] [T; N], &'a [T];
    [T: PartialOrd, const N: usize, const M: usize] [T; N], [T; M];
    [T: PartialOrd, const N: usize] [T; N], Vec<T>;
    ['a, T: PartialOrd, const N: usize] [T; N], &'a Vec<T>;
    ['a, 'b, T: PartialOrd, const N: usize, const M: usize] &'a [T; N], &'b [T; M];
}

macro_rules! mixed_compare {
    ($($p:ty),*) => {$(
        impl<T: Scalar> Compare<Expr<T>> for $p where $p: IntoExpr<T> {
            type Out = Expr<bool>;
            #[track_caller]
            fn lt(self, r: Expr<T>) -> Expr<bool> { binary(ir::Op::Lt, self.into_expr(), r) }
            #[track_caller]
            fn le(self, r: Expr<T>) -> Expr<bool> { binary(ir::Op::Le, self.into_expr(), r) }
            #[track_caller]
            fn gt(self, r: Expr<T>) -> Expr<bool> { binary(ir::Op::Gt, self.into_expr(), r) }
            #[track_caller]
            fn ge(self, r: Expr<T>) -> Expr<bool> { binary(ir::Op::Ge, self.into_expr(), r) }
            #[track_caller]
            fn eq(self, r: Expr<T>) -> Expr<bool> { binary(ir::Op::Eq, self.into_expr(), r) }
            #[track_caller]
            fn ne(self, r: Expr<T>) -> Expr<bool> { binary(ir::Op::Ne, self.into_expr(), r) }
        }
        impl<T: Scalar> Compare<Var<T>> for $p where $p: IntoExpr<T> {
            type Out = Expr<bool>;
            #[track_caller]
            fn lt(self, r: Var<T>) -> Expr<bool> { binary(ir::Op::Lt, self.into_expr(), r.get()) }
            #[track_caller]
            fn le(self, r: Var<T>) -> Expr<bool> { binary(ir::Op::Le, self.into_expr(), r.get()) }
            #[track_caller]
            fn gt(self, r: Var<T>) -> Expr<bool> { binary(ir::Op::Gt, self.into_expr(), r.get()) }
            #[track_caller]
            fn ge(self, r: Var<T>) -> Expr<bool> { binary(ir::Op::Ge, self.into_expr(), r.get()) }
            #[track_caller]
            fn eq(self, r: Var<T>) -> Expr<bool> { binary(ir::Op::Eq, self.into_expr(), r.get()) }
            #[track_caller]
            fn ne(self, r: Var<T>) -> Expr<bool> { binary(ir::Op::Ne, self.into_expr(), r.get()) }
        }
    )*};
}
mixed_compare!(f32, f64, i8, i16, i32, i64, isize, u8, u16, u32, u64, usize, bool);

/// `a < b`.
#[track_caller]
pub fn lt<A: Compare<B>, B>(a: A, b: B) -> A::Out {
    a.lt(b)
}
/// `a <= b`.
#[track_caller]
pub fn le<A: Compare<B>, B>(a: A, b: B) -> A::Out {
    a.le(b)
}
/// `a > b`.
#[track_caller]
pub fn gt<A: Compare<B>, B>(a: A, b: B) -> A::Out {
    a.gt(b)
}
/// `a >= b`.
#[track_caller]
pub fn ge<A: Compare<B>, B>(a: A, b: B) -> A::Out {
    a.ge(b)
}
/// `a == b`.
#[track_caller]
pub fn eq<A: Compare<B>, B>(a: A, b: B) -> A::Out {
    a.eq(b)
}
/// `a != b`.
#[track_caller]
pub fn ne<A: Compare<B>, B>(a: A, b: B) -> A::Out {
    a.ne(b)
}

/// `&&` and `||`: short-circuit on trace-time `bool`, AND/OR on staged booleans.
#[diagnostic::on_unimplemented(
    message = "`&&`/`||` need booleans, found `{Self}` and `{B}`",
    note = "operands are `bool` (trace time) or `Expr<bool>` (staged)"
)]
pub trait Logic<B> {
    type Out;
    fn and(self, b: impl FnOnce() -> B) -> Self::Out;
    fn or(self, b: impl FnOnce() -> B) -> Self::Out;
}

impl Logic<bool> for bool {
    type Out = bool;
    fn and(self, b: impl FnOnce() -> bool) -> bool {
        self && b()
    }
    fn or(self, b: impl FnOnce() -> bool) -> bool {
        self || b()
    }
}

impl Logic<Expr<bool>> for bool {
    type Out = Expr<bool>;
    #[track_caller]
    fn and(self, b: impl FnOnce() -> Expr<bool>) -> Expr<bool> {
        if self {
            b()
        } else {
            super::expr::constant(false)
        }
    }
    #[track_caller]
    fn or(self, b: impl FnOnce() -> Expr<bool>) -> Expr<bool> {
        if self {
            super::expr::constant(true)
        } else {
            b()
        }
    }
}

impl<B: IntoExpr<bool>> Logic<B> for Expr<bool> {
    type Out = Expr<bool>;
    #[track_caller]
    fn and(self, b: impl FnOnce() -> B) -> Expr<bool> {
        binary(ir::Op::And, self, b().into_expr())
    }
    #[track_caller]
    fn or(self, b: impl FnOnce() -> B) -> Expr<bool> {
        binary(ir::Op::Or, self, b().into_expr())
    }
}

impl<B: IntoExpr<bool>> Logic<B> for Var<bool> {
    type Out = Expr<bool>;
    #[track_caller]
    fn and(self, b: impl FnOnce() -> B) -> Expr<bool> {
        binary(ir::Op::And, self.get(), b().into_expr())
    }
    #[track_caller]
    fn or(self, b: impl FnOnce() -> B) -> Expr<bool> {
        binary(ir::Op::Or, self.get(), b().into_expr())
    }
}

/// `a && b`.
#[track_caller]
pub fn and<A: Logic<B>, B>(a: A, b: impl FnOnce() -> B) -> A::Out {
    a.and(b)
}

/// `a || b`.
#[track_caller]
pub fn or<A: Logic<B>, B>(a: A, b: impl FnOnce() -> B) -> A::Out {
    a.or(b)
}

/// `e as T` for trace-time numbers (Rust's `as`) and staged values (CAST).
#[diagnostic::on_unimplemented(
    message = "cannot cast `{Self}` to `{T}` inside an operator",
    note = "a staged value casts to an ovl dtype: f32 f64 i8 i16 i32 i64 u8 u16 u32 u64 bool f16 bf16"
)]
pub trait CastTo<T> {
    type Out;
    #[track_caller]
    fn cast_to(self) -> Self::Out;
}

impl<S: Scalar, T: Scalar> CastTo<T> for Expr<S> {
    type Out = Expr<T>;
    #[track_caller]
    fn cast_to(self) -> Expr<T> {
        unary(ir::Op::Cast, self)
    }
}

impl<S: Scalar, T: Scalar> CastTo<T> for Var<S> {
    type Out = Expr<T>;
    #[track_caller]
    fn cast_to(self) -> Expr<T> {
        unary(ir::Op::Cast, self.get())
    }
}

macro_rules! plain_cast {
    ($($from:ty),*) => {$(
        plain_cast!(@to $from; f32 f64 i8 i16 i32 i64 isize u8 u16 u32 u64 usize);
    )*};
    (@to $from:ty; $($to:ty)*) => {$(
        impl CastTo<$to> for $from {
            type Out = $to;
            #[allow(clippy::unnecessary_cast)]
            fn cast_to(self) -> $to { self as $to }
        }
    )*};
}
plain_cast!(f32, f64, i8, i16, i32, i64, isize, u8, u16, u32, u64, usize);
macro_rules! bool_cast {
    ($($to:ty),*) => {$(
        impl CastTo<$to> for bool {
            type Out = $to;
            fn cast_to(self) -> $to { self as $to }
        }
    )*};
}
bool_cast!(i8, i16, i32, i64, isize, u8, u16, u32, u64, usize, bool);
macro_rules! half_cast {
    ($($to:ty),*) => {$(
        impl CastTo<$to> for f32 {
            type Out = $to;
            fn cast_to(self) -> $to { <$to>::from_f32(self) }
        }
        impl CastTo<$to> for f64 {
            type Out = $to;
            /// Through f32, as a CAST from f64 to a half type is (`proto/ovl.proto`).
            fn cast_to(self) -> $to { <$to>::from_f32(self as f32) }
        }
    )*};
}
half_cast!(half::f16, half::bf16);

/// `e as T`.
#[track_caller]
pub fn cast<T, E: CastTo<T>>(e: E) -> E::Out {
    e.cast_to()
}

/// `place = value` when `place` is a staged [`Var`] (ASSIGN) or an [`Expr`] (rebinding).
pub trait AssignStaged<R> {
    #[track_caller]
    fn __ovl_assign(self, r: R);
}

impl<T: Scalar, R: IntoExpr<T>> AssignStaged<R> for &mut Var<T> {
    #[track_caller]
    fn __ovl_assign(self, r: R) {
        self.set(r);
    }
}

impl<T: Scalar, R: IntoExpr<T>> AssignStaged<R> for &mut Expr<T> {
    #[track_caller]
    fn __ovl_assign(self, r: R) {
        check_rebind(*self);
        *self = r.into_expr();
    }
}

/// `place = value` for everything else: Rust's assignment.
pub trait AssignPlain<R> {
    fn __ovl_assign(self, r: R);
}

impl<T> AssignPlain<T> for &mut &mut T {
    fn __ovl_assign(self, r: T) {
        **self = r;
    }
}

/// `base[index] = value` with a non-literal index: a tensor write for [`Tensor`], Rust's
/// `IndexMut` for everything else.
pub trait IndexAssign<I, V> {
    #[track_caller]
    fn __ovl_index_assign(self, index: I, value: V);
}

impl<T: Scalar, I: IndexPart, V: IntoExpr<T>> IndexAssign<I, V> for &Tensor<T> {
    #[track_caller]
    fn __ovl_index_assign(self, index: I, value: V) {
        self.write(index, value);
    }
}

impl<C: ?Sized + IndexMut<I>, I> IndexAssign<I, C::Output> for &mut C
where
    C::Output: Sized,
{
    fn __ovl_index_assign(self, index: I, value: C::Output) {
        self[index] = value;
    }
}

/// `t[[i, j]]`: reads one element.
#[track_caller]
pub fn read<T: Scalar, B: Borrow<Tensor<T>> + ?Sized, const N: usize>(
    t: &B,
    indices: [super::tensor::Idx; N],
) -> Expr<T> {
    t.borrow().read(indices)
}

/// `t[[i, j]] = v`: writes one element.
#[track_caller]
pub fn write<T: Scalar, B: Borrow<Tensor<T>> + ?Sized, const N: usize>(
    t: &B,
    indices: [super::tensor::Idx; N],
    value: impl IntoExpr<T>,
) {
    t.borrow().write(indices, value)
}

/// Unary `-` inside an operator (the `#[operator]` rewrite of `-e`): Rust's `-` on trace-time
/// numbers, NEG on staged values of a [`super::Signed`] type. An unsigned staged value has no
/// negation (it would wrap, `-2u8` being 254): the error names the type and says what to write.
#[diagnostic::on_unimplemented(
    message = "cannot negate `{Self}` inside an operator",
    note = "unary `-` applies to signed numbers (trace-time or staged: `Expr<i32>`, `Expr<f32>`, ...); for an unsigned value cast first (`-(x as i32)`) or use `wrapping_neg(x)` if the wrap is meant"
)]
pub trait Negate {
    /// The negated value's type.
    type Out;
    /// `-self`.
    fn negate(self) -> Self::Out;
}

impl<T: super::Signed> Negate for Expr<T> {
    type Out = Expr<T>;
    #[track_caller]
    fn negate(self) -> Expr<T> {
        -self
    }
}

impl<T: super::Signed> Negate for Var<T> {
    type Out = Expr<T>;
    #[track_caller]
    fn negate(self) -> Expr<T> {
        -self
    }
}

impl<T: super::Signed> Negate for &Expr<T> {
    type Out = Expr<T>;
    #[track_caller]
    fn negate(self) -> Expr<T> {
        -*self
    }
}

impl<T: super::Signed> Negate for &crate::lazy::Lazy<T> {
    type Out = crate::lazy::Lazy<T>;
    #[track_caller]
    fn negate(self) -> crate::lazy::Lazy<T> {
        -self
    }
}

impl<T: super::Signed> Negate for crate::lazy::Lazy<T> {
    type Out = crate::lazy::Lazy<T>;
    #[track_caller]
    fn negate(self) -> crate::lazy::Lazy<T> {
        -self
    }
}

macro_rules! plain_negate {
    ($($t:ty)*) => {$(
        impl Negate for $t {
            type Out = $t;
            fn negate(self) -> $t { -self }
        }
        impl Negate for &$t {
            type Out = $t;
            fn negate(self) -> $t { -*self }
        }
    )*};
}
plain_negate!(i8 i16 i32 i64 i128 isize f32 f64);

/// `-e`.
#[track_caller]
pub fn neg<E: Negate>(e: E) -> E::Out {
    e.negate()
}

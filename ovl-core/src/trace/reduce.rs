//! Reductions: accumulators ([`Acc`]) whose updates inside a staged `for` loop combine in a
//! defined order of 8 independent lanes (`proto/ovl.proto`, "Accumulators"), so that generated
//! code runs the loop at SIMD width and every backend gives bit-identical results. A
//! [`Var`](super::Var) updated in a loop keeps its sequential meaning.
//!
//! ```ignore
//! let mut total = sum_of(0.0f32);
//! let mut largest = max_of(f32::NEG_INFINITY);
//! for j in 0..cols {
//!     total += x[[row, j]];
//!     largest.update(x[[row, j]]);
//! }
//! out[[row]] = total / cols as f32 - largest; // read after the loop
//! ```

use super::expr::{Expr, IntoExpr, Num, Typed};
use super::ops::binary;
use super::state::{self, RegionKind};
use crate::host::Scalar;
use crate::ir;
use ovl_ir::ops::Combiner;
use std::fmt;
use std::ops::{Add, AddAssign, Div, Mul, MulAssign, Rem, Sub};
use std::panic::Location;

/// A worker-local accumulator: made with [`sum_of`], [`product_of`], [`min_of`] or [`max_of`],
/// updated inside a staged `for` loop (`+=` for a sum, `*=` for a product, [`Acc::update`] for
/// any), read after that loop (by using it in an expression, or [`Acc::get`]).
pub struct Acc<T> {
    expr: Expr<T>,
    combiner: Combiner,
}

impl<T> Clone for Acc<T> {
    fn clone(&self) -> Self {
        *self
    }
}
/// Copying an `Acc` copies the handle: both name the same accumulator.
impl<T> Copy for Acc<T> {}

impl<T: Scalar> fmt::Debug for Acc<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Acc<{}>({} %{})",
            T::DTYPE,
            self.combiner.name(),
            self.expr.id
        )
    }
}

#[track_caller]
fn accumulator<I: Typed>(combiner: Combiner, init: I) -> Acc<I::Elem>
where
    I::Elem: Num,
{
    let loc = Location::caller();
    let init = init.to_expr();
    state::with(|s| {
        let v = s.operand(loc, init.trace, init.id);
        let e = ir::Expression {
            code: ir::Op::Accumulator as i32,
            dtype: <I::Elem as Scalar>::DTYPE.to_ir() as i32,
            operands: vec![v],
            int_value: combiner as i64,
            ..Default::default()
        };
        Acc {
            expr: Expr::from_id(s.id, s.push(e)),
            combiner,
        }
    })
}

/// A sum starting at `init` (`sum_of(0.0f32)`); add to it with `+=` inside a `for` loop.
#[track_caller]
pub fn sum_of<I: Typed>(init: I) -> Acc<I::Elem>
where
    I::Elem: Num,
{
    accumulator(Combiner::Sum, init)
}

/// A product starting at `init`; multiply into it with `*=` inside a `for` loop.
#[track_caller]
pub fn product_of<I: Typed>(init: I) -> Acc<I::Elem>
where
    I::Elem: Num,
{
    accumulator(Combiner::Product, init)
}

/// A minimum starting at `init` (for example `f32::INFINITY` or the first element); lower it
/// with [`Acc::update`] inside a `for` loop. A NaN value never wins (as with `min`).
#[track_caller]
pub fn min_of<I: Typed>(init: I) -> Acc<I::Elem>
where
    I::Elem: Num,
{
    accumulator(Combiner::Min, init)
}

/// A maximum starting at `init` (for example `f32::NEG_INFINITY` or the first element); raise it
/// with [`Acc::update`] inside a `for` loop. A NaN value never wins (as with `max`).
#[track_caller]
pub fn max_of<I: Typed>(init: I) -> Acc<I::Elem>
where
    I::Elem: Num,
{
    accumulator(Combiner::Max, init)
}

impl<T: Num> Acc<T> {
    /// Combines `value` into the accumulator (adds it to a sum, multiplies it into a product,
    /// takes the min or max). Must be inside a staged `for` loop that started after the
    /// accumulator was made, as its innermost loop.
    #[track_caller]
    pub fn update(&mut self, value: impl IntoExpr<T>) {
        let loc = Location::caller();
        let value = value.into_expr();
        let acc = self.expr;
        state::with(|s| {
            let loop_region = s
                .regions
                .iter()
                .rev()
                .find(|r| matches!(r.kind, RegionKind::Range | RegionKind::While))
                .copied();
            let defined_in = s.expr_region.get(acc.id as usize).copied();
            let ok = match loop_region {
                Some(r) if r.kind == RegionKind::Range => {
                    // The accumulator must be made outside (before) that loop.
                    let loop_at = s.regions.iter().position(|x| x.id == r.id);
                    let acc_at = s.regions.iter().position(|x| Some(x.id) == defined_in);
                    matches!((acc_at, loop_at), (Some(a), Some(l)) if a < l)
                }
                _ => false,
            };
            if !ok {
                s.error(
                    loc,
                    "an accumulator is updated inside a staged `for` loop that starts after it \
                     was made (and is the innermost loop there): make it with `sum_of(..)` (or \
                     `product_of`, `min_of`, `max_of`) before the loop; elsewhere use a \
                     `variable`",
                );
                return;
            }
            if let Some(r) = loop_region {
                s.reducing.insert(acc.id, r.id);
            }
            let a = s.operand(loc, acc.trace, acc.id);
            let v = s.operand(loc, value.trace, value.id);
            s.push_op(ir::Op::Accumulate, None, vec![a, v]);
        });
    }

    /// The accumulated value: only after the loop that updates it.
    #[track_caller]
    pub fn get(&self) -> Expr<T> {
        let loc = Location::caller();
        let e = self.expr;
        state::with(|s| {
            if let Some(region) = s.reducing.get(&e.id).copied() {
                if s.regions.iter().any(|r| r.id == region) {
                    s.error(
                        loc,
                        "an accumulator is read inside the loop that updates it; its value is \
                         defined after the loop: read it there",
                    );
                }
            }
            let v = s.operand(loc, e.trace, e.id);
            Expr::from_id(s.id, s.push_op(ir::Op::Cast, Some(T::DTYPE), vec![v]))
        })
    }

    #[track_caller]
    fn expect(&self, combiner: Combiner, op: &str) {
        if self.combiner != combiner {
            let loc = Location::caller();
            let have = self.combiner.name();
            state::with(|s| {
                s.error(
                    loc,
                    format!(
                        "`{op}` on a {have} accumulator: `+=` adds to a `sum_of`, `*=` multiplies \
                         into a `product_of`; use `.update(v)`, which combines as the \
                         accumulator was made"
                    ),
                )
            });
        }
    }
}

impl<T: Num, R: IntoExpr<T>> AddAssign<R> for Acc<T> {
    #[track_caller]
    fn add_assign(&mut self, rhs: R) {
        self.expect(Combiner::Sum, "+=");
        self.update(rhs);
    }
}

impl<T: Num, R: IntoExpr<T>> MulAssign<R> for Acc<T> {
    #[track_caller]
    fn mul_assign(&mut self, rhs: R) {
        self.expect(Combiner::Product, "*=");
        self.update(rhs);
    }
}

impl<T: Num> IntoExpr<T> for Acc<T> {
    #[track_caller]
    fn into_expr(self) -> Expr<T> {
        self.get()
    }
}

impl<T: Num> IntoExpr<T> for &Acc<T> {
    #[track_caller]
    fn into_expr(self) -> Expr<T> {
        self.get()
    }
}

impl<T: Num> Typed for Acc<T> {
    type Elem = T;
    #[track_caller]
    fn to_expr(self) -> Expr<T> {
        self.get()
    }
}

macro_rules! acc_arith {
    ($($trait:ident $method:ident $code:ident),*) => {$(
        impl<T: Num, R: IntoExpr<T>> $trait<R> for Acc<T> {
            type Output = Expr<T>;
            #[track_caller]
            fn $method(self, rhs: R) -> Expr<T> {
                binary(ir::Op::$code, self.get(), rhs.into_expr())
            }
        }
    )*};
}
acc_arith!(Add add Add, Sub sub Sub, Mul mul Mul, Div div Div, Rem rem Mod);

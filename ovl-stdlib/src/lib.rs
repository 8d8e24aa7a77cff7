//! # ovl-stdlib: the standard operators, each with its gradient
//!
//! Every function takes lazy handles (or arrays) and returns lazy handles: nothing runs until
//! `ovl::evaluate`, and chains of these operators fuse into few kernels. Binary operators
//! broadcast the way numpy does (trailing dimensions equal or 1). Bad arguments (shapes that do
//! not broadcast, an axis out of range, ...) are reported by `evaluate` as errors, never panics.
//!
//! Every differentiable operator has a gradient, so [`ovl::backward`] works through it:
//!
//! ```
//! use ovl::Lazy;
//! use ovl_stdlib as ops;
//!
//! let x = Lazy::from(ndarray::array![0.5f64, -1.0, 2.0]);
//! let y = ops::mul(&ops::tanh(&x), &x); // x * tanh(x)
//! let seed = Lazy::from(ndarray::array![1.0f64, 1.0, 1.0]);
//! let grads = ovl::backward(&[(&y, &seed)], &[&x]).unwrap();
//! let dx = ovl::evaluate(&grads.of(&x).unwrap()).unwrap();
//! for (i, v) in [0.5f64, -1.0, 2.0].into_iter().enumerate() {
//!     let want = v.tanh() + v * (1.0 - v.tanh() * v.tanh());
//!     assert!((dx[i] - want).abs() < 1e-12);
//! }
//! ```
//!
//! Element types: arithmetic, comparisons, `select`, `clip`, `relu`, `abs`, `minimum`,
//! `maximum`, reductions, scans, `matmul`, shape operators: every numeric dtype (`f32`, `f64`,
//! `i8`..`i64`, `u8`..`u64`). Transcendental functions, `pow`, `mean`, `var` and `softmax`:
//! `f32` and `f64`. Gradients flow through `f32` and `f64` tensors.
//!
//! # Reductions
//!
//! Reductions along an axis come in two forms: `sum(x, axis)` removes the axis,
//! `sum_keepdim(x, axis)` keeps it with size 1 so that the result broadcasts back against `x`.
//! [`sum`], [`mean`], [`prod`], [`max`], [`min`], [`var`] and their `_keepdim` forms are each
//! one operator with one worker per element of the result; their gradients spread the row's
//! gradient back with one elementwise operator, so chains of them fuse. Empty axes: `sum` 0,
//! `prod` 1, `mean` and `var` NaN (as numpy), `max`/`min` an error. Floats' `max`/`min` ignore
//! NaN unless a row is all NaN (the IR's rule); the others propagate it.

mod grad_kernels;
mod index;
mod kernels;
pub mod nuts;
pub mod nuts_models;
mod reduce_kernels;
mod reductions;
mod shapes;

pub use index::broadcast_shapes;
pub use reductions::{
    max, max_keepdim, mean, mean_keepdim, min, min_keepdim, prod, prod_keepdim, sum, sum_keepdim,
    var, var_keepdim,
};
pub use shapes::{broadcast_to, concat, expand_dims, reshape, split, squeeze, transpose};

use grad_kernels as gk;
use ovl::prelude::{Float, Num, Signed};
use ovl::{GradientCall, IntoLazy, Lazy, LazyTensor, Scalar};
use std::panic::Location;

/// Attaches `f` as the gradient of the call behind `y` and returns `y`.
fn with_grad<T>(
    y: Lazy<T>,
    f: impl Fn(&GradientCall) -> Vec<Option<LazyTensor>> + Send + Sync + 'static,
) -> Lazy<T> {
    ovl::set_gradient(&y, f);
    y
}

/// [`with_grad`] for a closure that captures values: `key` describes them (see
/// [`ovl::set_gradient_keyed`]), so that backward graphs through the call can be reused.
fn with_grad_keyed<T, K: ovl::TraceArg + ?Sized>(
    y: Lazy<T>,
    key: &K,
    f: impl Fn(&GradientCall) -> Vec<Option<LazyTensor>> + Send + Sync + 'static,
) -> Lazy<T> {
    ovl::set_gradient_keyed(&y, key, f);
    y
}

fn some<T: Scalar>(x: Lazy<T>) -> Option<LazyTensor> {
    Some(x.into_untyped())
}

// ---------------------------------------------------------------------------------------------
// Unary elementwise

macro_rules! unary_with_grad {
    ($($(#[$doc:meta])* $name:ident<$bound:ident> => $grad:ident(uses $which:ident);)*) => {$(
        $(#[$doc])*
        pub fn $name<T: $bound>(x: impl IntoLazy<T>) -> Lazy<T> {
            with_grad(kernels::$name(x.into_lazy()), |c| {
                let v = if stringify!($which) == "input" { c.input::<T>(0) } else { c.output::<T>(0) };
                vec![some(gk::$grad(&v, &c.output_grad::<T>(0)))]
            })
        }
    )*};
}

unary_with_grad! {
    /// `tanh(x)`, elementwise; shape of `x`. Gradient `dy * (1 - y²)`.
    tanh<Float> => tanh_grad(uses output);
    /// The logistic function `1 / (1 + e^-x)`; shape of `x`. Gradient `dy * y * (1 - y)`.
    sigmoid<Float> => sigmoid_grad(uses output);
    /// `sin(x)`; shape of `x`. Gradient `dy * cos(x)`.
    sin<Float> => sin_grad(uses input);
    /// `cos(x)`; shape of `x`. Gradient `-dy * sin(x)`.
    cos<Float> => cos_grad(uses input);
    /// `tan(x)`; shape of `x`. Gradient `dy * (1 + y²)`.
    tan<Float> => tan_grad(uses output);
    /// `e^x`; shape of `x`. Gradient `dy * y`.
    exp<Float> => exp_grad(uses output);
    /// Natural logarithm (NaN below 0, -inf at 0); shape of `x`. Gradient `dy / x`.
    log<Float> => log_grad(uses input);
    /// Square root (NaN below 0); shape of `x`. Gradient `dy / (2 y)`.
    sqrt<Float> => sqrt_grad(uses output);
    /// `|x|` (integers wrap at the minimum); shape of `x`. Gradient `dy * sign(x)` (0 at 0).
    abs<Num> => abs_grad(uses input);
    /// `max(x, 0)` (NaN stays NaN); shape of `x`. Gradient `dy` where `x > 0`, else 0.
    relu<Num> => relu_grad(uses input);
}

/// `-x` (`i64::MIN` wraps); shape of `x`. Gradient `-dy`. Only for signed element types:
/// negating an unsigned tensor is a compile error, as `-x` on an unsigned integer in Rust.
pub fn neg<T: Signed>(x: impl IntoLazy<T>) -> Lazy<T> {
    wrapping_neg(x)
}

/// `-x` for any numeric type (unsigned integers wrap), as handles negate.
#[track_caller]
fn wrapping_neg<T: Num>(x: impl IntoLazy<T>) -> Lazy<T> {
    x.into_lazy().wrapping_neg()
}

// ---------------------------------------------------------------------------------------------
// Binary elementwise, with broadcasting

/// Sums `g` over the axes along which a tensor of `shape` was broadcast to `g`'s shape: the
/// gradient of an input that was broadcast.
pub fn reduce_to<T: Num>(g: impl IntoLazy<T>, shape: &[usize]) -> Lazy<T> {
    let mut g = g.into_lazy();
    while g.shape().len() > shape.len() {
        g = sum(&g, 0);
    }
    for (axis, &d) in shape.iter().enumerate() {
        if d == 1 && g.shape()[axis] != 1 {
            g = sum_keepdim(&g, axis);
        }
    }
    g
}

macro_rules! binary_with_grad {
    ($($(#[$doc:meta])* $name:ident<$bound:ident> => |$c:ident, $a:ident, $b:ident, $g:ident| ($da:expr, $db:expr);)*) => {$(
        $(#[$doc])*
        pub fn $name<T: $bound>(a: impl IntoLazy<T>, b: impl IntoLazy<T>) -> Lazy<T> {
            with_grad(kernels::$name(a.into_lazy(), b.into_lazy()), |$c| {
                let ($a, $b, $g) = ($c.input::<T>(0), $c.input::<T>(1), $c.output_grad::<T>(0));
                let (da, db): (Lazy<T>, Lazy<T>) = ($da, $db);
                vec![some(reduce_to(da, $a.shape())), some(reduce_to(db, $b.shape()))]
            })
        }
    )*};
}

/// The arithmetic of handles (`&a + &b`, ...), which carries its gradient (summed over
/// broadcast axes); one definition for both spellings.
macro_rules! handle_arithmetic {
    ($($(#[$doc:meta])* $name:ident => $op:tt;)*) => {$(
        $(#[$doc])*
        #[track_caller]
        pub fn $name<T: Num>(a: impl IntoLazy<T>, b: impl IntoLazy<T>) -> Lazy<T> {
            a.into_lazy() $op b.into_lazy()
        }
    )*};
}

handle_arithmetic! {
    /// `a + b` (integers wrap); the broadcast shape, as `&a + &b`. Gradients `dy`, `dy`
    /// (summed over broadcast axes).
    add => +;
    /// `a - b`; the broadcast shape, as `&a - &b`. Gradients `dy`, `-dy`.
    sub => -;
    /// `a * b`; the broadcast shape, as `&a * &b`. Gradients `dy * b`, `dy * a`.
    mul => *;
    /// `a / b` (integers: truncating, division by 0 gives 0); the broadcast shape, as
    /// `&a / &b`. Gradients `dy / b`, `-dy * a / b²`.
    div => /;
    /// `a % b` with Rust's sign rules (remainder by 0 gives 0); the broadcast shape, as
    /// `&a % &b`. Gradient `dy` for `a`; none for `b`.
    rem => %;
}

binary_with_grad! {
    /// `a` to the power `b`; the broadcast shape. Gradients `dy * b * a^(b-1)`, `dy * ln(a) * a^b`.
    pow<Float> => |c, a, b, g| (gk::pow_grad_base(&a, &b, &g), gk::pow_grad_exp(&a, &b, &g));
    /// Elementwise minimum (floats: NaN-ignoring, like `f32::min`); the broadcast shape.
    /// Gradient: `dy` to the smaller input (to `a` on ties).
    minimum<Num> => |c, a, b, g| (gk::min_grad_first(&a, &b, &g), gk::min_grad_second(&a, &b, &g));
    /// Elementwise maximum; the broadcast shape. Gradient: `dy` to the larger input (to `a` on
    /// ties).
    maximum<Num> => |c, a, b, g| (gk::max_grad_first(&a, &b, &g), gk::max_grad_second(&a, &b, &g));
}

macro_rules! comparison {
    ($($(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        pub fn $name<T: Num>(a: impl IntoLazy<T>, b: impl IntoLazy<T>) -> Lazy<bool> {
            kernels::$name(a.into_lazy(), b.into_lazy())
        }
    )*};
}

comparison! {
    /// `a == b` as `bool` (NaN is unequal to everything); the broadcast shape. No gradient.
    equal;
    /// `a != b`; the broadcast shape. No gradient.
    not_equal;
    /// `a < b`; the broadcast shape. No gradient.
    less;
    /// `a <= b`; the broadcast shape. No gradient.
    less_equal;
    /// `a > b`; the broadcast shape. No gradient.
    greater;
    /// `a >= b`; the broadcast shape. No gradient.
    greater_equal;
}

/// `where(c, a, b)`: `a` where `c` is true, else `b`; all three broadcast. Gradients: `dy`
/// routed to the chosen input.
pub fn select<T: Num>(c: impl IntoLazy<bool>, a: impl IntoLazy<T>, b: impl IntoLazy<T>) -> Lazy<T> {
    with_grad(
        kernels::select(c.into_lazy(), a.into_lazy(), b.into_lazy()),
        |call| {
            let (c, a, b) = (
                call.input::<bool>(0),
                call.input::<T>(1),
                call.input::<T>(2),
            );
            let g = call.output_grad::<T>(0);
            vec![
                None,
                some(reduce_to(gk::select_grad(&c, &g, true), a.shape())),
                some(reduce_to(gk::select_grad(&c, &g, false), b.shape())),
            ]
        },
    )
}

/// `x` converted to `U` with Rust's `as` rules (floats saturate into integers, NaN becomes 0);
/// shape of `x`. Gradient: `dy` cast back, between float types only.
pub fn cast<T: Scalar, U: Scalar>(x: impl IntoLazy<T>) -> Lazy<U> {
    with_grad(kernels::cast::<T, U>(x.into_lazy()), |c| {
        let float = |d: ovl::DType| d.is_float();
        if float(T::DTYPE) && float(U::DTYPE) {
            vec![some(kernels::cast::<U, T>(c.output_grad::<U>(0)))]
        } else {
            vec![None]
        }
    })
}

/// `x` limited to `[lo, hi]` (NaN stays NaN); shape of `x`. Gradient `dy` inside the range, 0 outside.
pub fn clip<T: Num>(x: impl IntoLazy<T>, lo: T, hi: T) -> Lazy<T> {
    let key = (lo.to_literal(), hi.to_literal());
    with_grad_keyed(kernels::clip(x.into_lazy(), lo, hi), &key, move |c| {
        let mask = kernels::clip_mask(c.input::<T>(0), lo, hi);
        vec![some(gk::masked(c.output_grad::<T>(0), mask))]
    })
}

// ---------------------------------------------------------------------------------------------
// Reductions and scans

/// Running sum along `axis`; shape of `x`. Gradient: the reverse running sum of `dy`. An axis
/// out of range is an error of `evaluate` naming the caller's line.
#[track_caller]
pub fn cumsum<T: Num>(x: impl IntoLazy<T>, axis: usize) -> Lazy<T> {
    let x = x.into_lazy();
    if let Some(bad) = reductions::checked_scan_axis(&x, "cumsum", axis, Location::caller()) {
        return bad;
    }
    scan(x, axis, false, false)
}

fn scan<T: Num>(x: Lazy<T>, axis: usize, product: bool, reverse: bool) -> Lazy<T> {
    let key = (axis, product, reverse);
    with_grad_keyed(kernels::scan(x, axis, product, reverse), &key, move |c| {
        if product {
            return vec![None];
        }
        vec![some(scan(c.output_grad::<T>(0), axis, false, !reverse))]
    })
}

/// Running product along `axis`; shape of `x`. Gradient (floats):
/// `reverse_cumsum(dy * y) / x` (not finite where `x` is 0). An axis out of range is an error
/// of `evaluate` naming the caller's line.
#[track_caller]
pub fn cumprod<T: Float>(x: impl IntoLazy<T>, axis: usize) -> Lazy<T> {
    let x = x.into_lazy();
    if let Some(bad) = reductions::checked_scan_axis(&x, "cumprod", axis, Location::caller()) {
        return bad;
    }
    with_grad_keyed(kernels::scan(x, axis, true, false), &axis, move |c| {
        let (x, y) = (c.input::<T>(0), c.output::<T>(0));
        let s = scan(mul(c.output_grad::<T>(0), y), axis, false, true);
        vec![some(gk::scale_by_ratio(s, x))]
    })
}

// ---------------------------------------------------------------------------------------------
// Linear algebra and networks

/// Matrix product `a @ b`: `[m, k]` and `[k, n]` give `[m, n]`; with leading batch axes,
/// `[batch.., m, k]` and `[batch.., k, n]` give `[batch.., m, n]` (the batch axes equal in both,
/// not broadcast). A library call (`ovl::gemm`): the CPU runs it through a tuned GEMM (f32,
/// f64), fusion keeps it a kernel of its own. `k = 0` gives zeros. Gradients `dy @ bᵀ` and
/// `aᵀ @ dy`, as products that read the operand transposed (no transposed copy). Shapes that
/// do not multiply are an error of `evaluate` naming them and the caller's line.
#[track_caller]
pub fn matmul<T: Num>(a: impl IntoLazy<T>, b: impl IntoLazy<T>) -> Lazy<T> {
    ovl::gemm(&a.into_lazy(), &b.into_lazy(), false, false)
}

/// [`matmul`] of the operands with their last two axes swapped where asked:
/// `matmul_t(a, b, true, false)` is `aᵀ @ b` without a transposed copy of `a`.
#[track_caller]
pub fn matmul_t<T: Num>(
    a: impl IntoLazy<T>,
    b: impl IntoLazy<T>,
    transpose_a: bool,
    transpose_b: bool,
) -> Lazy<T> {
    ovl::gemm(&a.into_lazy(), &b.into_lazy(), transpose_a, transpose_b)
}

/// `Some(error)` when `x` has no last axis (a 0-d tensor) or, with `nonempty`, an empty one:
/// the argument check of the functions along the last axis. `shape` is the result's shape.
fn last_axis_check<T: Scalar>(
    x: &Lazy<T>,
    function: &str,
    nonempty: bool,
    shape: &[usize],
    at: &Location<'_>,
) -> Option<Lazy<T>> {
    let problem = match x.shape().last() {
        None => format!(
            "`{function}` works along the last axis, and a 0-d tensor has none: `reshape` it to \
             [1] first"
        ),
        // Only where there are rows: with none the result is empty.
        Some(0) if nonempty && index::has_elements(&x.shape()[..x.shape().len() - 1]) => {
            format!(
                "`{function}` of an empty axis (the last axis of a {:?} tensor): a row of no \
                 elements has no {}; check the shape",
                x.shape(),
                if function == "logsumexp" {
                    "maximum (the result would be -inf)"
                } else {
                    "statistics"
                }
            )
        }
        _ => return None,
    };
    Some(reductions::bad_call(
        x.clone(),
        function,
        at,
        problem,
        shape,
    ))
}

/// `log(sum(exp(x)))` along the last axis (stable), which is removed. Gradient: `softmax(x)`
/// times the output gradient, repeated along the axis.
///
/// A 0-d `x` or an empty last axis is an error of `evaluate` naming the caller's line.
#[track_caller]
pub fn logsumexp<T: Float>(x: impl IntoLazy<T>) -> Lazy<T> {
    let x = x.into_lazy();
    let rows = index::without(x.shape(), x.shape().len().saturating_sub(1));
    if let Some(bad) = last_axis_check(&x, "logsumexp", true, &rows, Location::caller()) {
        return bad;
    }
    with_grad(kernels::logsumexp(x), |c| {
        vec![some(gk::logsumexp_grad(
            c.input::<T>(0),
            c.output::<T>(0),
            c.output_grad::<T>(0),
        ))]
    })
}

/// Layer normalization along the last axis, without scale and shift:
/// `(x - mean) / sqrt(var + eps)` per row (the variance is the population variance). One
/// operator, one pass for the statistics. Its gradient is a row reduction (the statistics)
/// and one elementwise operator. A 0-d `x` or an empty last axis is an error of `evaluate`
/// naming the caller's line.
#[track_caller]
pub fn layernorm<T: Float>(x: impl IntoLazy<T>, eps: f64) -> Lazy<T> {
    normalize(x.into_lazy(), eps, true, Location::caller())
}

/// RMS normalization along the last axis, without scale: `x / sqrt(mean(x^2) + eps)` per row.
/// As [`layernorm`] otherwise.
#[track_caller]
pub fn rmsnorm<T: Float>(x: impl IntoLazy<T>, eps: f64) -> Lazy<T> {
    normalize(x.into_lazy(), eps, false, Location::caller())
}

fn normalize<T: Float>(x: Lazy<T>, eps: f64, center: bool, at: &Location<'_>) -> Lazy<T> {
    let function = if center { "layernorm" } else { "rmsnorm" };
    let shape = x.shape().to_vec();
    if let Some(bad) = last_axis_check(&x, function, true, &shape, at) {
        return bad;
    }
    with_grad_keyed(
        kernels::normalize(x, eps, center),
        &(eps, center),
        move |c| {
            let (x, g) = (c.input::<T>(0), c.output_grad::<T>(0));
            let stats = gk::normalize_stats(&x, &g, eps, center);
            vec![some(gk::normalize_grad(x, g, stats))]
        },
    )
}

/// Softmax along the last axis (stable: the maximum is subtracted first); shape of `x`.
/// One operator with one worker per row: `e = exp(x - max)` is computed once per element (kept
/// in a worker-local row buffer by fusion's row reuse, for rows of up to 256 KiB on the CPU and
/// 16 KiB on a GPU; computed twice for longer rows) and multiplied by the reciprocal of
/// the row's sum, `e * (1 / sum(e))`: one division per row instead of one per element, at the
/// cost of up to one more rounding than `e / sum(e)` (within 2 ulp of it). Gradient
/// `y * (dy - sum(dy * y))` along the axis: a row reduction and one elementwise operator. A
/// 0-d `x` is an error of `evaluate` naming the caller's line; an empty last axis gives an
/// empty result.
#[track_caller]
pub fn softmax<T: Float>(x: impl IntoLazy<T>) -> Lazy<T> {
    let x = x.into_lazy();
    let shape = x.shape().to_vec();
    if let Some(bad) = last_axis_check(&x, "softmax", false, &shape, Location::caller()) {
        return bad;
    }
    with_grad(kernels::softmax(x), |c| {
        let (y, g) = (c.output::<T>(0), c.output_grad::<T>(0));
        let dot = gk::softmax_dot(&y, &g);
        vec![some(gk::softmax_grad(y, g, dot))]
    })
}

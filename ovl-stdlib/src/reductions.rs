//! Reductions along one axis: `sum`, `mean`, `prod`, `max`, `min`, `var`, each also as a
//! `_keepdim` variant that keeps the reduced axis with size 1, so that a row statistic
//! broadcasts back against its input with numpy's rule:
//!
//! ```
//! use ovl::Lazy;
//! use ovl_stdlib as ops;
//!
//! let x = Lazy::from(ndarray::array![[1.0f64, 2.0, 3.0], [4.0, 6.0, 8.0]]);
//! let centered = ops::sub(&x, ops::mean_keepdim(&x, 1)); // [2, 3] - [2, 1]
//! let y = ovl::evaluate(&centered).unwrap();
//! assert_eq!(y, ndarray::array![[-1.0, 0.0, 1.0], [-2.0, 0.0, 2.0]].into_dyn());
//! ```
//!
//! Each is one operator with one worker per element of its result (an accumulator loop over the
//! row, in the vectorizing order `proto/ovl.proto` defines), and its gradient is one elementwise
//! operator over the input's shape (plus one row reduction for `var` and `prod`), so chains of
//! them fuse. A bad axis, or `max`/`min` of an empty axis, is an error of `ovl::evaluate` that
//! names the function and the line that called it.

use crate::reduce_kernels as rk;
use crate::{kernels, some, with_grad, with_grad_keyed};
use ovl::prelude::{Float, Num};
use ovl::{IntoLazy, Lazy, Scalar};
use std::panic::Location;

/// What is wrong with reducing a tensor of `shape` along `axis`, if anything.
fn axis_problem(shape: &[usize], axis: usize) -> Option<String> {
    match shape.len() {
        0 => Some(format!(
            "axis {axis} of a 0-d tensor: it has no axes; use the value as it is, or \
             `reshape(&x, &[1])` it first"
        )),
        r if axis >= r => Some(format!(
            "axis {axis} is out of range for a tensor of shape {shape:?} (rank {r}): pass an \
             axis in 0..{r}"
        )),
        _ => None,
    }
}

/// A call with bad arguments: an operator whose trace records `message`, prefixed with the
/// function and the caller's line, so that `evaluate` reports it (and its gradient reports it
/// too). `shape` is the shape the call would have returned.
pub(crate) fn bad_call<T: Scalar>(
    x: Lazy<T>,
    function: &str,
    at: &Location<'_>,
    message: String,
    shape: &[usize],
) -> Lazy<T> {
    let message = format!(
        "`ovl_stdlib::{function}` called at {}:{}:{}: {message}",
        at.file(),
        at.line(),
        at.column()
    );
    let again = message.clone();
    with_grad(
        kernels::bad_arguments(x, message, shape.to_vec()),
        move |c| {
            let x = c.input::<T>(0);
            let shape = x.shape().to_vec();
            vec![some(kernels::bad_arguments(
                c.output_grad::<T>(0),
                again.clone(),
                shape,
            ))]
        },
    )
}

/// The result shape of a reduction along `axis`, for the error path (any shape will do when the
/// axis does not exist).
fn result_shape(shape: &[usize], axis: usize, keep: bool) -> Vec<usize> {
    crate::index::reduced_shape(shape, axis, keep)
}

/// `Some(error)` when `x` cannot be reduced along `axis` (`nonempty`: also when that axis is
/// empty).
fn checked<T: Scalar>(
    x: &Lazy<T>,
    function: &str,
    axis: usize,
    keep: bool,
    nonempty: bool,
    at: &Location<'_>,
) -> Option<Lazy<T>> {
    let shape = x.shape();
    let result = result_shape(shape, axis, keep);
    let problem = axis_problem(shape, axis).or_else(|| {
        // Only where there are rows to reduce: with none the result is empty, as in numpy.
        let rows = crate::index::has_elements(&result);
        (nonempty && shape[axis] == 0 && rows).then(|| {
            format!(
                "`{function}` of an empty axis (axis {axis} of a {shape:?} tensor) has no \
                 value: check the shape, or mask the row out before reducing"
            )
        })
    })?;
    Some(bad_call(x.clone(), function, at, problem, &result))
}

/// `Some(error)` when `x` has no axis `axis` to scan along (the result keeps `x`'s shape).
pub(crate) fn checked_scan_axis<T: Scalar>(
    x: &Lazy<T>,
    function: &str,
    axis: usize,
    at: &Location<'_>,
) -> Option<Lazy<T>> {
    let problem = axis_problem(x.shape(), axis)?;
    let shape = x.shape().to_vec();
    Some(bad_call(x.clone(), function, at, problem, &shape))
}

/// The name of a reduction as the user called it.
fn name(base: &'static str, keep: bool) -> String {
    if keep {
        format!("{base}_keepdim")
    } else {
        base.to_string()
    }
}

pub(crate) fn sum_impl<T: Num>(x: Lazy<T>, axis: usize, keep: bool, at: &Location<'_>) -> Lazy<T> {
    if let Some(bad) = checked(&x, &name("sum", keep), axis, keep, false, at) {
        return bad;
    }
    with_grad_keyed(rk::sum(x, axis, keep), &(axis, keep), move |c| {
        let x = c.input::<T>(0);
        let g = c.output_grad::<T>(0);
        vec![some(rk::spread(g, x.shape().to_vec(), axis, keep, false))]
    })
}

fn mean_impl<T: Float>(x: Lazy<T>, axis: usize, keep: bool, at: &Location<'_>) -> Lazy<T> {
    if let Some(bad) = checked(&x, &name("mean", keep), axis, keep, false, at) {
        return bad;
    }
    with_grad_keyed(rk::mean(x, axis, keep), &(axis, keep), move |c| {
        let x = c.input::<T>(0);
        let g = c.output_grad::<T>(0);
        vec![some(rk::spread(g, x.shape().to_vec(), axis, keep, true))]
    })
}

fn prod_impl<T: Num>(x: Lazy<T>, axis: usize, keep: bool, at: &Location<'_>) -> Lazy<T> {
    if let Some(bad) = checked(&x, &name("prod", keep), axis, keep, false, at) {
        return bad;
    }
    with_grad_keyed(rk::prod(x, axis, keep), &(axis, keep), move |c| {
        let x = c.input::<T>(0);
        let stats = rk::prod_stats(&x, axis, keep);
        let g = c.output_grad::<T>(0);
        vec![some(rk::prod_grad(&x, &stats[0], &stats[1], g, axis, keep))]
    })
}

fn extreme_impl<T: Num>(
    x: Lazy<T>,
    axis: usize,
    largest: bool,
    keep: bool,
    at: &Location<'_>,
) -> Lazy<T> {
    let function = name(if largest { "max" } else { "min" }, keep);
    if let Some(bad) = checked(&x, &function, axis, keep, true, at) {
        return bad;
    }
    with_grad_keyed(
        rk::extreme(x, axis, largest, keep),
        &(axis, largest, keep),
        move |c| {
            let (x, y) = (c.input::<T>(0), c.output::<T>(0));
            vec![some(rk::extreme_grad(
                x,
                y,
                c.output_grad::<T>(0),
                axis,
                keep,
            ))]
        },
    )
}

fn var_impl<T: Float>(x: Lazy<T>, axis: usize, keep: bool, at: &Location<'_>) -> Lazy<T> {
    if let Some(bad) = checked(&x, &name("var", keep), axis, keep, false, at) {
        return bad;
    }
    with_grad_keyed(rk::var(x, axis, keep), &(axis, keep), move |c| {
        let x = c.input::<T>(0);
        let mean = rk::mean(&x, axis, keep);
        vec![some(rk::var_grad(
            &x,
            mean,
            c.output_grad::<T>(0),
            axis,
            keep,
        ))]
    })
}

/// Sum along `axis`, which is removed: `[2, 3]` summed along 1 is `[2]`. Any numeric dtype
/// (integers wrap); an empty axis sums to 0. Gradient: `dy` repeated along the axis.
#[track_caller]
pub fn sum<T: Num>(x: impl IntoLazy<T>, axis: usize) -> Lazy<T> {
    sum_impl(x.into_lazy(), axis, false, Location::caller())
}

/// Sum along `axis`, which is kept with size 1: `[2, 3]` summed along 1 is `[2, 1]`, which
/// broadcasts back against `[2, 3]`. As [`sum`] otherwise.
#[track_caller]
pub fn sum_keepdim<T: Num>(x: impl IntoLazy<T>, axis: usize) -> Lazy<T> {
    sum_impl(x.into_lazy(), axis, true, Location::caller())
}

/// Mean along `axis`, which is removed; `f32`/`f64`. The mean of an empty axis is NaN (0 / 0),
/// as in numpy. Gradient: `dy / n` repeated along the axis.
#[track_caller]
pub fn mean<T: Float>(x: impl IntoLazy<T>, axis: usize) -> Lazy<T> {
    mean_impl(x.into_lazy(), axis, false, Location::caller())
}

/// Mean along `axis`, which is kept with size 1. As [`mean`] otherwise.
#[track_caller]
pub fn mean_keepdim<T: Float>(x: impl IntoLazy<T>, axis: usize) -> Lazy<T> {
    mean_impl(x.into_lazy(), axis, true, Location::caller())
}

/// Product along `axis`, which is removed. Any numeric dtype (integers wrap); an empty axis
/// multiplies to 1. Gradient: `dy` times the product of the row's other elements (exact where
/// the row holds zeros).
#[track_caller]
pub fn prod<T: Num>(x: impl IntoLazy<T>, axis: usize) -> Lazy<T> {
    prod_impl(x.into_lazy(), axis, false, Location::caller())
}

/// Product along `axis`, which is kept with size 1. As [`prod`] otherwise.
#[track_caller]
pub fn prod_keepdim<T: Num>(x: impl IntoLazy<T>, axis: usize) -> Lazy<T> {
    prod_impl(x.into_lazy(), axis, true, Location::caller())
}

/// Maximum along `axis`, which is removed. Any numeric dtype. Floats follow the IR's rule: a
/// NaN never wins (like `f64::max`), so a row is NaN only when all of it is. An empty axis is an
/// error (unless there are no rows either: the result is then empty). Gradient: `dy` to every
/// element equal to the maximum.
#[track_caller]
pub fn max<T: Num>(x: impl IntoLazy<T>, axis: usize) -> Lazy<T> {
    extreme_impl(x.into_lazy(), axis, true, false, Location::caller())
}

/// Maximum along `axis`, which is kept with size 1. As [`max`] otherwise.
#[track_caller]
pub fn max_keepdim<T: Num>(x: impl IntoLazy<T>, axis: usize) -> Lazy<T> {
    extreme_impl(x.into_lazy(), axis, true, true, Location::caller())
}

/// Minimum along `axis`, which is removed. As [`max`] otherwise (a NaN never wins; an empty
/// axis is an error). Gradient: `dy` to every element equal to the minimum.
#[track_caller]
pub fn min<T: Num>(x: impl IntoLazy<T>, axis: usize) -> Lazy<T> {
    extreme_impl(x.into_lazy(), axis, false, false, Location::caller())
}

/// Minimum along `axis`, which is kept with size 1. As [`min`] otherwise.
#[track_caller]
pub fn min_keepdim<T: Num>(x: impl IntoLazy<T>, axis: usize) -> Lazy<T> {
    extreme_impl(x.into_lazy(), axis, false, true, Location::caller())
}

/// Population variance along `axis` (ddof 0: the mean squared deviation from the row's mean),
/// which is removed; `f32`/`f64`. Computed in two passes over the row, the mean and then the
/// mean of the squared deviations, so a large common offset does not cancel the result away.
/// An empty axis gives NaN, as in numpy. Gradient: `dy * 2 (x - mean) / n`.
#[track_caller]
pub fn var<T: Float>(x: impl IntoLazy<T>, axis: usize) -> Lazy<T> {
    var_impl(x.into_lazy(), axis, false, Location::caller())
}

/// Population variance along `axis`, which is kept with size 1. As [`var`] otherwise.
#[track_caller]
pub fn var_keepdim<T: Float>(x: impl IntoLazy<T>, axis: usize) -> Lazy<T> {
    var_impl(x.into_lazy(), axis, true, Location::caller())
}

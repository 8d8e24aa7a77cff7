//! The reduction operators along one axis and the operators of their gradients.
//!
//! A reduction has one worker per element of its result (the reduced shape, with the axis kept
//! as size 1 when `keep`), which reduces its row with an accumulator and writes its one element
//! once, after the loop, at its own position: a producer that fusion can inline wherever its
//! result is read. Every gradient that spreads a row statistic back along the axis is
//! elementwise over the input's shape (one worker per element, reading the statistic at the
//! broadcast index), so backward graphs fuse like forward ones.

use crate::index::*;
use ovl::prelude as dsl;
use ovl::prelude::*;

/// The length of `axis` of `shape`, 0 for an axis that does not exist (the caller has already
/// recorded that error).
fn length(shape: &[usize], axis: usize) -> usize {
    shape.get(axis).copied().unwrap_or(0)
}

/// The sum of worker `p`'s row of `x` along `axis` (an accumulator loop; 0 for an empty axis),
/// in `T::Wide` (f32 for the half types), read where it is used.
#[helper]
fn row_sum<T: Num>(x: &Tensor<T>, p: &Position, axis: usize, keep: bool) -> Acc<T::Wide> {
    let mut acc = sum_of(lit::<T::Wide>(0.0));
    for k in 0..length(x.shape(), axis) {
        acc += x.read(row_element(p, x.rank(), axis, keep, k)).wide();
    }
    acc
}

/// Sum along `axis`; with `keep` the axis stays with size 1. An empty axis sums to 0.
#[operator]
pub(crate) fn sum<T: Num>(x: Tensor<T>, axis: usize, keep: bool) -> Tensor<T> {
    let axis = checked_axis("sum", axis, x.shape());
    let shape = reduced_shape(x.shape(), axis, keep);
    let (p, out) = (workers(&shape), output(&shape));
    let total = row_sum(&x, &p, axis, keep).get().as_dtype::<T>();
    out.write(own(&p, shape.len()), total);
    out
}

/// Mean along `axis` (the sum divided by the length; NaN for an empty axis, 0 / 0).
#[operator]
pub(crate) fn mean<T: Float>(x: Tensor<T>, axis: usize, keep: bool) -> Tensor<T> {
    let axis = checked_axis("mean", axis, x.shape());
    let shape = reduced_shape(x.shape(), axis, keep);
    let n = length(x.shape(), axis);
    let (p, out) = (workers(&shape), output(&shape));
    let total = row_sum(&x, &p, axis, keep);
    let mean = (total / lit::<T::Wide>(n as f64)).as_dtype::<T>();
    out.write(own(&p, shape.len()), mean);
    out
}

/// Population variance along `axis` (ddof 0), in two passes over the row: the mean, then the
/// mean of the squared deviations from it (no cancellation of `E[x²] - E[x]²`). NaN for an
/// empty axis.
#[operator]
pub(crate) fn var<T: Float>(x: Tensor<T>, axis: usize, keep: bool) -> Tensor<T> {
    let axis = checked_axis("var", axis, x.shape());
    let shape = reduced_shape(x.shape(), axis, keep);
    let n = length(x.shape(), axis);
    let r = x.rank();
    let p = workers(&shape);
    let out = output(&shape);
    let count = lit::<T::Wide>(n as f64);
    let mean = row_sum(&x, &p, axis, keep) / count;
    let mut squares = sum_of(lit::<T::Wide>(0.0));
    for k in 0..n {
        let d = x.read(row_element(&p, r, axis, keep, k)).wide() - mean;
        squares += d * d;
    }
    out.write(own(&p, shape.len()), (squares / count).as_dtype::<T>());
    out
}

/// Product along `axis` (integers wrap). An empty axis multiplies to 1.
#[operator]
pub(crate) fn prod<T: Num>(x: Tensor<T>, axis: usize, keep: bool) -> Tensor<T> {
    let axis = checked_axis("prod", axis, x.shape());
    let shape = reduced_shape(x.shape(), axis, keep);
    let p = workers(&shape);
    let out = output(&shape);
    let mut acc = product_of(lit::<T::Wide>(1.0));
    for k in 0..length(x.shape(), axis) {
        acc *= x.read(row_element(&p, x.rank(), axis, keep, k)).wide();
    }
    out.write(own(&p, shape.len()), acc.get().as_dtype::<T>());
    out
}

/// Maximum (`largest`) or minimum along `axis`, following the IR's rule: a NaN never wins. A
/// row that is all NaN is NaN (the IR's lanes start at -inf/+inf, so its accumulator alone would
/// give the identity: a float row also counts its numbers, in the same loop). An empty axis has
/// no extreme: a trace error.
#[operator]
pub(crate) fn extreme<T: Num>(x: Tensor<T>, axis: usize, largest: bool, keep: bool) -> Tensor<T> {
    let name = if largest { "max" } else { "min" };
    let axis = checked_axis(name, axis, x.shape());
    let n = length(x.shape(), axis);
    let shape = reduced_shape(x.shape(), axis, keep);
    // An empty axis is an error where there are rows to reduce (none run otherwise).
    let rows = has_elements(&shape);
    if n == 0 && axis < x.rank() && rows {
        trace_error(format!(
            "`{name}` of an empty axis (axis {axis} of a {:?} tensor): it has no {name}imum; \
             check the shape, or reduce with an identity (`max_of(f32::NEG_INFINITY)` in an \
             operator) if an empty row should give one",
            x.shape()
        ));
    }
    let r = x.rank();
    let p = workers(&shape);
    let out = output(&shape);
    // Element 0 of the row (with no rows, where no worker runs, a stand-in that reads nothing).
    // It starts the accumulators, and the loop still runs over the whole row (a maximum is
    // idempotent: the same result), so that fusion sees the loop over `0..n` that the row's
    // other statistics and consumers run: a value computed for every element here (a fused
    // producer's `sigmoid`) is then kept in a row buffer for them (`ovl-fuse`'s row reuse
    // needs the later loop's range inside the earlier one's), not computed again.
    let first = if rows {
        x.read(row_element(&p, r, axis, keep, 0usize))
    } else {
        lit::<T>(0.0)
    };
    let mut acc = if largest {
        max_of(first)
    } else {
        min_of(first)
    };
    if T::DTYPE.is_float() {
        // Whether the row holds a number (not NaN): the largest of 1 per number, 0 per NaN.
        let (zero, one) = (lit::<T>(0.0), lit::<T>(1.0));
        let mut numbers = max_of(dsl::select(first == first, one, zero));
        for k in 0..n {
            let v = x.read(row_element(&p, r, axis, keep, k));
            acc.update(v);
            numbers.update(dsl::select(v == v, one, zero));
        }
        // All NaN: `first` is one of them.
        out.write(
            own(&p, shape.len()),
            dsl::select(numbers.get() == zero, first, acc.get()),
        );
    } else {
        for k in 0..n {
            acc.update(x.read(row_element(&p, r, axis, keep, k)));
        }
        out.write(own(&p, shape.len()), acc);
    }
    out
}

/// The row statistics of a product's gradient: the product of the row's non-zero elements
/// (output 0) and how many of its elements are zero (output 1, counted in `T`).
#[operator]
pub(crate) fn prod_stats<T: Num>(x: Tensor<T>, axis: usize, keep: bool) -> Vec<Tensor<T>> {
    let shape = reduced_shape(x.shape(), axis, keep);
    let p = workers(&shape);
    let outs: Vec<Tensor<T>> = outputs_of(2, &shape);
    let zero = lit::<T::Wide>(0.0);
    let one = lit::<T::Wide>(1.0);
    let mut nonzero = product_of(one);
    let mut zeros = sum_of(zero);
    for k in 0..length(x.shape(), axis) {
        let v = x.read(row_element(&p, x.rank(), axis, keep, k)).wide();
        let is_zero = v == zero;
        nonzero *= dsl::select(is_zero, one, v);
        zeros += dsl::select(is_zero, one, zero);
    }
    outs[0].write(own(&p, shape.len()), nonzero.get().as_dtype::<T>());
    outs[1].write(own(&p, shape.len()), zeros.get().as_dtype::<T>());
    outs
}

/// `g` (the gradient of a reduction along `axis`, kept as size 1 when `keep`) spread back over
/// `shape`: every element of a row gets its row's `g`, divided by the row's length when
/// `mean`.
#[operator]
pub(crate) fn spread<T: Num>(
    g: Tensor<T>,
    shape: Vec<usize>,
    axis: usize,
    keep: bool,
    mean: bool,
) -> Tensor<T> {
    let p = workers(&shape);
    let out = output(&shape);
    let v = g.read(row_of(&p, shape.len(), axis, keep));
    let v = if mean {
        v / lit::<T>(length(&shape, axis) as f64)
    } else {
        v
    };
    out.write(own(&p, shape.len()), v);
    out
}

/// Gradient of a max/min reduction along `axis`: the row's `g` flows to every element equal to
/// the row's result `y`.
#[operator]
pub(crate) fn extreme_grad<T: Num>(
    x: Tensor<T>,
    y: Tensor<T>,
    g: Tensor<T>,
    axis: usize,
    keep: bool,
) -> Tensor<T> {
    let p = workers(x.shape());
    let out = output_like(&x);
    let r = x.rank();
    let v = x.read(own(&p, r));
    let at = row_of(&p, r, axis, keep);
    out.write(
        own(&p, r),
        dsl::select(v == y.read(at.clone()), g.read(at), lit::<T>(0.0)),
    );
    out
}

/// Gradient of the variance along `axis`: `g * 2 (x - mean) / n`, with the row's `g` and mean.
#[operator]
pub(crate) fn var_grad<T: Float>(
    x: Tensor<T>,
    mean: Tensor<T>,
    g: Tensor<T>,
    axis: usize,
    keep: bool,
) -> Tensor<T> {
    let p = workers(x.shape());
    let out = output_like(&x);
    let r = x.rank();
    let at = row_of(&p, r, axis, keep);
    let n = lit::<T>(length(x.shape(), axis) as f64);
    let d = x.read(own(&p, r)) - mean.read(at.clone());
    out.write(own(&p, r), g.read(at) * (lit::<T>(2.0) * d) / n);
    out
}

/// Gradient of a product along `axis`: the product of the row's other elements times the row's
/// `g`, from the row's product of non-zero elements and its count of zeros (exact where the row
/// has zeros: with one zero only that element gets a gradient, with two none does).
#[operator]
pub(crate) fn prod_grad<T: Num>(
    x: Tensor<T>,
    nonzero: Tensor<T>,
    zeros: Tensor<T>,
    g: Tensor<T>,
    axis: usize,
    keep: bool,
) -> Tensor<T> {
    let p = workers(x.shape());
    let out = output_like(&x);
    let r = x.rank();
    let at = row_of(&p, r, axis, keep);
    let (zero, one) = (lit::<T>(0.0), lit::<T>(1.0));
    let v = x.read(own(&p, r));
    let (q, z, gv) = (nonzero.read(at.clone()), zeros.read(at.clone()), g.read(at));
    let is_zero = v == zero;
    // `v` stands in as 1 where it is 0, so the division never divides by zero.
    let others = dsl::select(
        z == zero,
        q / dsl::select(is_zero, one, v),
        dsl::select(z == one && is_zero, q, zero),
    );
    out.write(own(&p, r), gv * others);
    out
}

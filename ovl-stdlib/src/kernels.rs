//! The traced operators. Each `#[operator]` here is one operator of the graph (its name is the
//! name fusion reports and profiles show); the public functions of the crate wrap them and
//! attach their gradients.

use crate::index::*;
use ovl::prelude::*;
// The DSL's math functions, by path: several operators here share their names.
use ovl::prelude as dsl;

macro_rules! unary {
    ($($name:ident<$T:ident: $bound:ident>($x:ident) => { $($body:tt)* })*) => {$(
        #[operator]
        pub(crate) fn $name<$T: $bound>(x: Tensor<$T>) -> Tensor<$T> {
            let p = workers(x.shape());
            let out = output_like(&x);
            let $x = x.read(own(&p, x.rank()));
            out.write(own(&p, x.rank()), $($body)*);
            out
        }
    )*};
}

unary! {
    abs<T: Num>(v) => { dsl::abs(v) }
    relu<T: Num>(v) => { dsl::select(v < lit::<T>(0.0), lit::<T>(0.0), v) }
    tanh<T: Float>(v) => { dsl::tanh(v) }
    sigmoid<T: Float>(v) => { dsl::sigmoid(v) }
    sin<T: Float>(v) => { dsl::sin(v) }
    cos<T: Float>(v) => { dsl::cos(v) }
    tan<T: Float>(v) => { dsl::tan(v) }
    exp<T: Float>(v) => { dsl::exp(v) }
    log<T: Float>(v) => { dsl::log(v) }
    sqrt<T: Float>(v) => { dsl::sqrt(v) }
}

macro_rules! binary {
    ($($name:ident<$T:ident: $bound:ident> -> $O:ty, ($a:ident, $b:ident) => { $($body:tt)* })*) => {$(
        #[operator]
        pub(crate) fn $name<$T: $bound>(a: Tensor<$T>, b: Tensor<$T>) -> Tensor<$O> {
            let shape = broadcast(stringify!($name), a.shape(), b.shape());
            let p = workers(&shape);
            let out = output(&shape);
            let $a = a.read(broadcast_index(&p, a.shape(), &shape));
            let $b = b.read(broadcast_index(&p, b.shape(), &shape));
            out.write(own(&p, shape.len()), $($body)*);
            out
        }
    )*};
}

binary! {
    pow<T: Float> -> T, (x, y) => { dsl::pow(x, y) }
    minimum<T: Num> -> T, (x, y) => { min(x, y) }
    maximum<T: Num> -> T, (x, y) => { max(x, y) }
    equal<T: Num> -> bool, (x, y) => { x == y }
    not_equal<T: Num> -> bool, (x, y) => { x != y }
    less<T: Num> -> bool, (x, y) => { x < y }
    less_equal<T: Num> -> bool, (x, y) => { x <= y }
    greater<T: Num> -> bool, (x, y) => { x > y }
    greater_equal<T: Num> -> bool, (x, y) => { x >= y }
}

/// `select(c, a, b)` with numpy broadcasting of all three.
#[operator]
pub(crate) fn select<T: Scalar>(c: Tensor<bool>, a: Tensor<T>, b: Tensor<T>) -> Tensor<T> {
    let ab = broadcast("select", a.shape(), b.shape());
    let shape = broadcast("select", c.shape(), &ab);
    let p = workers(&shape);
    let out = output(&shape);
    let cv = c.read(broadcast_index(&p, c.shape(), &shape));
    let av = a.read(broadcast_index(&p, a.shape(), &shape));
    let bv = b.read(broadcast_index(&p, b.shape(), &shape));
    out.write(own(&p, shape.len()), dsl::select(cv, av, bv));
    out
}

#[operator]
pub(crate) fn cast<T: Scalar, U: Scalar>(x: Tensor<T>) -> Tensor<U> {
    let p = workers(x.shape());
    let out = output(x.shape());
    out.write(own(&p, x.rank()), x.read(own(&p, x.rank())).cast::<U>());
    out
}

#[operator]
pub(crate) fn clip<T: Num>(x: Tensor<T>, lo: T, hi: T) -> Tensor<T> {
    let p = workers(x.shape());
    let out = output_like(&x);
    let v = x.read(own(&p, x.rank()));
    // NaN stays NaN (as with `f64::clamp`).
    out.write(
        own(&p, x.rank()),
        dsl::select(v < lo, lo, dsl::select(v > hi, hi, v)),
    );
    out
}

/// 1 where `lo <= x <= hi`, else 0: the gradient mask of `clip`.
#[operator]
pub(crate) fn clip_mask<T: Num>(x: Tensor<T>, lo: T, hi: T) -> Tensor<T> {
    let p = workers(x.shape());
    let out = output_like(&x);
    let v = x.read(own(&p, x.rank()));
    out.write(
        own(&p, x.rank()),
        dsl::select(v >= lo && v <= hi, lit::<T>(1.0), lit::<T>(0.0)),
    );
    out
}

#[operator]
pub(crate) fn transpose<T: Scalar>(x: Tensor<T>, perm: Vec<usize>) -> Tensor<T> {
    let perm = checked_perm(&perm, x.shape());
    let shape = permuted(x.shape(), &perm);
    let p = workers(&shape);
    let out = output(&shape);
    out.write(own(&p, shape.len()), x.read(unpermuted_index(&p, &perm)));
    out
}

/// `y` repeated `n` times along a new `axis` (with `n == 1`: `expand_dims`). One worker per
/// output element, reading `y` at its position without `axis`.
#[operator]
pub(crate) fn expand<T: Scalar>(y: Tensor<T>, axis: usize, n: usize) -> Tensor<T> {
    let shape = with(y.shape(), axis, n);
    let p = workers(&shape);
    let out = output(&shape);
    out.write(
        own(&p, shape.len()),
        y.read(skipping(&p, shape.len(), axis)),
    );
    out
}

/// `x` with its `axis` of size 1 removed: one worker per output element, reading `x` at its
/// position with index 0 inserted at `axis`.
#[operator]
pub(crate) fn squeeze<T: Scalar>(x: Tensor<T>, axis: usize) -> Tensor<T> {
    let shape = without(x.shape(), axis);
    let p = workers(&shape);
    let out = output(&shape);
    out.write(
        own(&p, shape.len()),
        x.read(along(&p, x.rank(), axis, 0usize)),
    );
    out
}

/// `x` with the same elements in row-major order and the shape `shape` (the caller checked that
/// the sizes agree): one worker per output element, reading `x` at the same flattened position.
#[operator]
pub(crate) fn reshape<T: Scalar>(x: Tensor<T>, shape: Vec<usize>) -> Tensor<T> {
    let p = workers(&shape);
    let out = output(&shape);
    out.write(
        own(&p, shape.len()),
        x.read(reshaped_index(&p, x.shape(), &shape)),
    );
    out
}

/// `x` broadcast to `shape` with numpy's rule (the caller checked that it broadcasts): one
/// worker per output element.
#[operator]
pub(crate) fn broadcast_to<T: Scalar>(x: Tensor<T>, shape: Vec<usize>) -> Tensor<T> {
    let p = workers(&shape);
    let out = output(&shape);
    out.write(
        own(&p, shape.len()),
        x.read(broadcast_index(&p, x.shape(), &shape)),
    );
    out
}

/// A call of a public function with bad arguments: records `message` (which names the function
/// and the caller's line) as the trace's error, so that `evaluate` reports it. Never runs.
#[operator]
pub(crate) fn bad_arguments<T: Scalar>(
    x: Tensor<T>,
    message: String,
    shape: Vec<usize>,
) -> Tensor<T> {
    trace_error(message);
    let p = workers(&shape);
    let out = output(&shape);
    let _ = (&x, &p);
    out
}

/// Running sum (`product == false`) or product along `axis`, forwards or `reverse`.
#[operator]
pub(crate) fn scan<T: Num>(x: Tensor<T>, axis: usize, product: bool, reverse: bool) -> Tensor<T> {
    let axis = checked_axis(if product { "cumprod" } else { "cumsum" }, axis, x.shape());
    let others = without(x.shape(), axis);
    let p = workers(&others);
    let out = output_like(&x);
    let n = x.dim(axis);
    let mut acc = variable(lit::<T::Wide>(if product { 1.0 } else { 0.0 }));
    for k in 0..n {
        let at = if reverse { (n as i64 - 1) - k } else { k };
        let v = x.read(along(&p, x.rank(), axis, at)).wide();
        if product {
            acc *= v;
        } else {
            acc += v;
        }
        out.write(along(&p, x.rank(), axis, at), acc.get().as_dtype::<T>());
    }
    out
}

/// Softmax along the last axis, one worker per row: the row's maximum `top`, then
/// `e = exp(x - top)` and its sum `total`, then `e * (1 / total)` (one division per row; the
/// result may differ from `e / total` by an ulp). The last pass names `e` again: fusion's row
/// reuse (`ovl_fuse::reuse_rows`, from opt_level 1) keeps it in a worker-local buffer where the
/// row fits the target's budget (16 KiB on a GPU, 256 KiB on the CPU), so `exp` runs once per
/// element; a longer row computes the same `e` again. Both give the same values.
#[operator]
pub(crate) fn softmax<T: Float>(x: Tensor<T>) -> Tensor<T> {
    let axis = checked_axis("softmax", x.rank().saturating_sub(1), x.shape());
    let others = without(x.shape(), axis);
    let p = workers(&others);
    let out = output_like(&x);
    let r = x.rank();
    let n = x.dim(axis);
    // From -inf, so that an empty row reads nothing (its result is empty).
    let mut top = max_of(lit::<T::Compute>(f64::NEG_INFINITY));
    for k in 0..n {
        top.update(x.read(along(&p, r, axis, k)).compute());
    }
    let top = top.get();
    let mut total = sum_of(lit::<T::Compute>(0.0));
    for k in 0..n {
        total += dsl::exp(x.read(along(&p, r, axis, k)).compute() - top);
    }
    let scale = lit::<T::Compute>(1.0) / total.get();
    for k in 0..n {
        let e = dsl::exp(x.read(along(&p, r, axis, k)).compute() - top);
        out.write(along(&p, r, axis, k), (e * scale).as_dtype::<T>());
    }
    out
}

/// `log(sum(exp(x)))` along the last axis (stable: the maximum is taken out first); the axis is
/// removed.
#[operator]
pub(crate) fn logsumexp<T: Float>(x: Tensor<T>) -> Tensor<T> {
    let axis = checked_axis("logsumexp", x.rank().saturating_sub(1), x.shape());
    // An empty axis is an error where there are rows to reduce (none run otherwise).
    if x.dim(axis) == 0 && has_elements(&without(x.shape(), axis)) {
        trace_error("`logsumexp` of an empty axis: it has no maximum (the result would be -inf)");
    }
    let others = without(x.shape(), axis);
    let p = workers(&others);
    let out = output(&others);
    let r = x.rank();
    // From -inf, so that a tensor with no rows reads nothing.
    let mut top = max_of(lit::<T::Compute>(f64::NEG_INFINITY));
    for k in 0..x.dim(axis) {
        top.update(x.read(along(&p, r, axis, k)).compute());
    }
    let top = top.get();
    let mut total = sum_of(lit::<T::Compute>(0.0));
    for k in 0..x.dim(axis) {
        total += dsl::exp(x.read(along(&p, r, axis, k)).compute() - top);
    }
    out.write(own(&p, others.len()), (top + dsl::log(total)).as_dtype());
    out
}

/// Normalization along the last axis: `(x - mean) / sqrt(var + eps)` with `center` (layer
/// norm), `x / sqrt(mean(x^2) + eps)` without (RMS norm). One worker per row, one pass for the
/// statistics.
#[operator]
pub(crate) fn normalize<T: Float>(x: Tensor<T>, eps: f64, center: bool) -> Tensor<T> {
    let name = if center { "layernorm" } else { "rmsnorm" };
    let axis = checked_axis(name, x.rank().saturating_sub(1), x.shape());
    if x.dim(axis) == 0 && has_elements(&without(x.shape(), axis)) {
        trace_error(format!(
            "`{name}` of an empty axis: a row of no elements has no statistics"
        ));
    }
    let others = without(x.shape(), axis);
    let p = workers(&others);
    let out = output_like(&x);
    let r = x.rank();
    let n = lit::<T::Compute>(x.dim(axis) as f64);
    let mut s = sum_of(lit::<T::Compute>(0.0));
    let mut sq = sum_of(lit::<T::Compute>(0.0));
    for k in 0..x.dim(axis) {
        let v = x.read(along(&p, r, axis, k)).compute();
        s += v;
        sq += v * v;
    }
    let mean = if center {
        s / n
    } else {
        lit::<T::Compute>(0.0).into_expr()
    };
    let scale = dsl::rsqrt(sq / n - mean * mean + lit::<T::Compute>(eps));
    for k in 0..x.dim(axis) {
        let v = x.read(along(&p, r, axis, k)).compute();
        out.write(along(&p, r, axis, k), ((v - mean) * scale).as_dtype::<T>());
    }
    out
}

/// `x` cut into `parts` equal pieces along `axis`: one worker per element of a piece, writing
/// that element of every piece (the paper's split).
#[operator]
pub(crate) fn split<T: Scalar>(x: Tensor<T>, axis: usize, parts: usize) -> Vec<Tensor<T>> {
    let axis = checked_axis("split", axis, x.shape());
    let n = x.dim(axis);
    if parts == 0 || n % parts != 0 {
        trace_error(format!(
            "`split`: axis {axis} of a {:?} tensor has {n} elements, which do not split into \
             {parts} equal parts",
            x.shape()
        ));
    }
    let parts = parts.max(1);
    let size = (n / parts).max(1);
    let mut piece = x.shape().to_vec();
    piece[axis] = size;
    let p = workers(&piece);
    let outs: Vec<Tensor<T>> = outputs_of(parts, &piece);
    for (j, piece_out) in outs.iter().enumerate() {
        piece_out.write(
            own(&p, piece.len()),
            x.read(shifted(&p, piece.len(), axis, j * size)),
        );
    }
    outs
}

/// Equal-shaped `xs` joined along `axis`: one worker per element of a piece (the paper's concat).
#[operator]
pub(crate) fn concat<T: Scalar>(xs: Vec<Tensor<T>>, axis: usize) -> Tensor<T> {
    let piece = common_shape("concat", &xs);
    let axis = checked_axis("concat", axis, &piece);
    let size = piece[axis];
    let mut shape = piece.clone();
    shape[axis] = size * xs.len().max(1);
    let p = workers(&piece);
    let out = output(&shape);
    for (j, x) in xs.iter().enumerate() {
        out.write(
            shifted(&p, piece.len(), axis, j * size),
            x.read(own(&p, piece.len())),
        );
    }
    out
}

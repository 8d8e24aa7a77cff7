//! Operators that compute gradients. Each is elementwise over the gradient's shape, so the
//! backward graph fuses like the forward one.

use crate::index::*;
use ovl::prelude as dsl;
use ovl::prelude::*;

macro_rules! grad2 {
    ($($name:ident<$T:ident: $bound:ident>($v:ident, $g:ident) => { $($body:tt)* })*) => {$(
        /// `dx` from a value of the forward call (`v`) and the output gradient (`g`), both of
        /// the output's shape.
        #[operator]
        pub(crate) fn $name<$T: $bound>(v: Tensor<$T>, g: Tensor<$T>) -> Tensor<$T> {
            let p = workers(g.shape());
            let out = output_like(&g);
            let $v = v.read(own(&p, v.rank()));
            let $g = g.read(own(&p, g.rank()));
            out.write(own(&p, g.rank()), $($body)*);
            out
        }
    )*};
}

grad2! {
    tanh_grad<T: Float>(y, g) => { g * (lit::<T>(1.0) - y * y) }
    sigmoid_grad<T: Float>(y, g) => { g * y * (lit::<T>(1.0) - y) }
    sin_grad<T: Float>(x, g) => { g * cos(x) }
    cos_grad<T: Float>(x, g) => { -(g * sin(x)) }
    tan_grad<T: Float>(y, g) => { g * (lit::<T>(1.0) + y * y) }
    exp_grad<T: Float>(y, g) => { g * y }
    log_grad<T: Float>(x, g) => { g / x }
    sqrt_grad<T: Float>(y, g) => { g / (lit::<T>(2.0) * y) }
    relu_grad<T: Num>(x, g) => { select(x > lit::<T>(0.0), g, lit::<T>(0.0)) }
    abs_grad<T: Num>(x, g) => {
        select(x > lit::<T>(0.0), g, select(x < lit::<T>(0.0), dsl::wrapping_neg(g), lit::<T>(0.0)))
    }
}

macro_rules! grad3 {
    ($($name:ident<$T:ident: $bound:ident>($a:ident, $b:ident, $g:ident) => { $($body:tt)* })*) => {$(
        /// An input's gradient (before summing over broadcast axes) from both inputs of a
        /// binary call, broadcast to the output's shape, and the output gradient `g`.
        #[operator]
        pub(crate) fn $name<$T: $bound>(a: Tensor<$T>, b: Tensor<$T>, g: Tensor<$T>) -> Tensor<$T> {
            let shape = g.shape().to_vec();
            let p = workers(&shape);
            let out = output_like(&g);
            let $a = a.read(broadcast_index(&p, a.shape(), &shape));
            let $b = b.read(broadcast_index(&p, b.shape(), &shape));
            let $g = g.read(own(&p, shape.len()));
            out.write(own(&p, shape.len()), $($body)*);
            out
        }
    )*};
}

grad3! {
    pow_grad_base<T: Float>(x, y, g) => { g * y * pow(x, y - lit::<T>(1.0)) }
    pow_grad_exp<T: Float>(x, y, g) => { g * log(x) * pow(x, y) }
    min_grad_first<T: Num>(x, y, g) => { select(x <= y, g, lit::<T>(0.0)) }
    min_grad_second<T: Num>(x, y, g) => { select(x <= y, lit::<T>(0.0), g) }
    max_grad_first<T: Num>(x, y, g) => { select(x >= y, g, lit::<T>(0.0)) }
    max_grad_second<T: Num>(x, y, g) => { select(x >= y, lit::<T>(0.0), g) }
}

/// `g * other` (`other` broadcast to `g`'s shape): the gradient of a product.
#[operator]
pub(crate) fn mul_grad<T: Num>(other: Tensor<T>, g: Tensor<T>) -> Tensor<T> {
    let shape = g.shape().to_vec();
    let p = workers(&shape);
    let out = output_like(&g);
    let o = other.read(broadcast_index(&p, other.shape(), &shape));
    out.write(own(&p, shape.len()), g.read(own(&p, shape.len())) * o);
    out
}

/// `g / den` (`den` broadcast to `g`'s shape): the gradient of a quotient's numerator.
#[operator]
pub(crate) fn div_grad_num<T: Num>(den: Tensor<T>, g: Tensor<T>) -> Tensor<T> {
    let shape = g.shape().to_vec();
    let p = workers(&shape);
    let out = output_like(&g);
    let d = den.read(broadcast_index(&p, den.shape(), &shape));
    out.write(own(&p, shape.len()), g.read(own(&p, shape.len())) / d);
    out
}

/// Gradient of `select(c, a, b)` for `a` (`first`) or `b`, over the output's shape.
#[operator]
pub(crate) fn select_grad<T: Num>(c: Tensor<bool>, g: Tensor<T>, first: bool) -> Tensor<T> {
    let shape = g.shape().to_vec();
    let p = workers(&shape);
    let out = output_like(&g);
    let cv = c.read(broadcast_index(&p, c.shape(), &shape));
    let gv = g.read(own(&p, shape.len()));
    let zero = lit::<T>(0.0);
    let v = if first {
        select(cv, gv, zero)
    } else {
        select(cv, zero, gv)
    };
    out.write(own(&p, shape.len()), v);
    out
}

/// The row statistic of softmax's gradient along the last axis: `sum(y * g)` per row (the axis
/// removed). One worker per row, an accumulator loop.
#[operator]
pub(crate) fn softmax_dot<T: Float>(y: Tensor<T>, g: Tensor<T>) -> Tensor<T> {
    let r = y.rank();
    let axis = r.saturating_sub(1);
    let others = without(y.shape(), axis);
    let p = workers(&others);
    let out = output(&others);
    let mut dot = sum_of(lit::<T::Compute>(0.0));
    for k in 0..y.dim(axis) {
        dot += y.read(along(&p, r, axis, k)).compute() * g.read(along(&p, r, axis, k)).compute();
    }
    out.write(own(&p, others.len()), dot.get().as_dtype::<T>());
    out
}

/// Gradient of softmax along the last axis, elementwise: `y * (g - dot)` with the row's
/// `dot = sum(y * g)` ([`softmax_dot`]) read at the broadcast index.
#[operator]
pub(crate) fn softmax_grad<T: Float>(y: Tensor<T>, g: Tensor<T>, dot: Tensor<T>) -> Tensor<T> {
    let r = y.rank();
    let p = workers(y.shape());
    let out = output_like(&y);
    let at = own(&p, r);
    let d = dot.read(skipping(&p, r, r.saturating_sub(1)));
    out.write(at.clone(), y.read(at.clone()) * (g.read(at) - d));
    out
}

/// Gradient of `logsumexp` along the last axis: `exp(x - y) * g`, with `y` and `g` repeated
/// along the axis.
#[operator]
pub(crate) fn logsumexp_grad<T: Float>(x: Tensor<T>, y: Tensor<T>, g: Tensor<T>) -> Tensor<T> {
    let r = x.rank();
    let axis = r.saturating_sub(1);
    let p = workers(x.shape());
    let out = output_like(&x);
    let at = own(&p, r);
    let row = skipping(&p, r, axis);
    let v = x.read(at.clone()) - y.read(row.clone());
    out.write(at, dsl::exp(v) * g.read(row));
    out
}

/// The row statistics of the gradient of `normalize` (layer norm with `center`, RMS norm
/// without) along the last axis, one worker per row: the row's mean (0 without `center`), its
/// scale `s = 1 / sqrt(var + eps)` (as the forward pass computes them), the mean of `g` (0
/// without `center`) and the mean of `g * y`, with `y = (x - mean) * s` the normalized row.
#[operator]
pub(crate) fn normalize_stats<T: Float>(
    x: Tensor<T>,
    g: Tensor<T>,
    eps: f64,
    center: bool,
) -> Vec<Tensor<T>> {
    let r = x.rank();
    let axis = r.saturating_sub(1);
    let others = without(x.shape(), axis);
    let p = workers(&others);
    let outs: Vec<Tensor<T>> = outputs_of(4, &others);
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
    let mut gsum = sum_of(lit::<T::Compute>(0.0));
    let mut gy = sum_of(lit::<T::Compute>(0.0));
    for k in 0..x.dim(axis) {
        let gk = g.read(along(&p, r, axis, k)).compute();
        let yk = (x.read(along(&p, r, axis, k)).compute() - mean) * scale;
        gsum += gk;
        gy += gk * yk;
    }
    let gmean = if center {
        gsum / n
    } else {
        lit::<T::Compute>(0.0).into_expr()
    };
    let at = own(&p, others.len());
    outs[0].write(at.clone(), mean.as_dtype::<T>());
    outs[1].write(at.clone(), scale.as_dtype::<T>());
    outs[2].write(at.clone(), gmean.as_dtype::<T>());
    outs[3].write(at, (gy / n).as_dtype::<T>());
    outs
}

/// Gradient of `normalize` along the last axis, elementwise: with the row's statistics of
/// [`normalize_stats`] read at the broadcast index and `y = (x - mean) * s`,
/// `dx = s * (g - mean(g) - y * mean(g * y))` (the two means are 0 and 0 for RMS norm's centre).
#[operator]
pub(crate) fn normalize_grad<T: Float>(
    x: Tensor<T>,
    g: Tensor<T>,
    stats: Vec<Tensor<T>>,
) -> Tensor<T> {
    let r = x.rank();
    let p = workers(x.shape());
    let out = output_like(&x);
    let at = own(&p, r);
    let row = skipping(&p, r, r.saturating_sub(1));
    let mean = stats[0].read(row.clone());
    let scale = stats[1].read(row.clone());
    let gmean = stats[2].read(row.clone());
    let gy = stats[3].read(row);
    let y = (x.read(at.clone()) - mean) * scale;
    out.write(at.clone(), scale * (g.read(at) - gmean - y * gy));
    out
}

/// `g * mask` elementwise (the gradient of `clip`).
#[operator]
pub(crate) fn masked<T: Num>(g: Tensor<T>, mask: Tensor<T>) -> Tensor<T> {
    let p = workers(g.shape());
    let out = output_like(&g);
    let at = own(&p, g.rank());
    out.write(at.clone(), g.read(at.clone()) * mask.read(at));
    out
}

/// Gradient of cumprod: `reverse_cumsum(g * y) / x`.
#[operator]
pub(crate) fn scale_by_ratio<T: Float>(s: Tensor<T>, x: Tensor<T>) -> Tensor<T> {
    let p = workers(x.shape());
    let out = output_like(&x);
    let at = own(&p, x.rank());
    out.write(at.clone(), s.read(at.clone()) / x.read(at));
    out
}

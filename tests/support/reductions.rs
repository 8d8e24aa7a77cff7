//! The kernels of the reductions benchmark (layer norm, softmax, RMS norm, logsumexp along the
//! last axis of a `[rows, cols]` f32 tensor, forward and the gradient with respect to `x`), each
//! written three ways, and a plain-Rust f64 reference for them. Shared by
//! `benches/reductions.rs` and `tests/fuse/` (`reductions_bench.rs`, `reductions_axes.rs`),
//! which include this file with `#[path]`.
//!
//! - [`Way::Ops`]: composed from `ovl_stdlib` operators with row statistics kept as `[rows, 1]`
//!   (`max_keepdim`, `sum_keepdim`, `mean_keepdim`) and broadcast back with numpy's rule; the
//!   gradient is what `ovl::backward` derives from the operators' own gradients.
//! - [`Way::Operator`]: one hand-written `#[operator]` per kernel and one for its gradient, one
//!   worker per row, with accumulators, as a user would write them.
//! - [`Way::Stdlib`]: the stdlib function (`ovl_stdlib::layernorm`, `softmax`, `rmsnorm`,
//!   `logsumexp`) with the gradient it carries, through `ovl::backward`.

#![allow(dead_code)]

use ndarray::{Array1, Array2, ArrayD};
use ovl::prelude::*;
use ovl_stdlib as ops;

/// The `eps` of layer norm and RMS norm (added to the variance, or the mean square).
pub const EPS: f32 = 1e-5;

/// A kernel of the benchmark.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    LayerNorm,
    Softmax,
    RmsNorm,
    LogSumExp,
}

impl Kernel {
    pub const ALL: [Kernel; 4] = [
        Kernel::LayerNorm,
        Kernel::Softmax,
        Kernel::RmsNorm,
        Kernel::LogSumExp,
    ];

    /// The name in tables and files (the same on the TensorFlow and JAX sides).
    pub fn name(self) -> &'static str {
        match self {
            Kernel::LayerNorm => "layernorm",
            Kernel::Softmax => "softmax",
            Kernel::RmsNorm => "rmsnorm",
            Kernel::LogSumExp => "logsumexp",
        }
    }

    /// Whether the output has the shape of `x` (logsumexp gives one value per row).
    pub fn keeps_shape(self) -> bool {
        self != Kernel::LogSumExp
    }
}

/// How the kernel is written in ovl.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    Ops,
    Operator,
    Stdlib,
}

impl Way {
    pub const ALL: [Way; 3] = [Way::Ops, Way::Operator, Way::Stdlib];

    pub fn name(self) -> &'static str {
        match self {
            Way::Ops => "stdlib ops",
            Way::Operator => "hand-written operator",
            Way::Stdlib => "stdlib function",
        }
    }
}

// ---------------------------------------------------------------------------------------------
// (a) From stdlib operators

fn eps() -> Lazy<f32> {
    Lazy::from(ndarray::arr0(EPS))
}

fn layernorm_ops(x: &Lazy<f32>, axis: usize) -> Lazy<f32> {
    let mean = ops::mean_keepdim(x, axis);
    let d = ops::sub(x, &mean);
    let var = ops::mean_keepdim(ops::mul(&d, &d), axis);
    ops::div(&d, ops::sqrt(ops::add(var, eps())))
}

fn softmax_ops(x: &Lazy<f32>, axis: usize) -> Lazy<f32> {
    let top = ops::max_keepdim(x, axis);
    let e = ops::exp(ops::sub(x, &top));
    let total = ops::sum_keepdim(&e, axis);
    ops::div(&e, total)
}

fn rmsnorm_ops(x: &Lazy<f32>, axis: usize) -> Lazy<f32> {
    let mean_square = ops::mean_keepdim(ops::mul(x, x), axis);
    ops::div(x, ops::sqrt(ops::add(mean_square, eps())))
}

fn logsumexp_ops(x: &Lazy<f32>, axis: usize) -> Lazy<f32> {
    let top = ops::max_keepdim(x, axis);
    let total = ops::sum_keepdim(ops::exp(ops::sub(x, &top)), axis);
    ops::squeeze(ops::add(ops::log(total), top), axis)
}

/// `kernel` along `axis` of `x` (any rank), composed from stdlib operators with the statistics
/// kept as size-1 axes (`max_keepdim`, `sum_keepdim`, `mean_keepdim`), as [`Way::Ops`] is along
/// the last axis.
pub fn ops_along(kernel: Kernel, x: &Lazy<f32>, axis: usize) -> Lazy<f32> {
    match kernel {
        Kernel::LayerNorm => layernorm_ops(x, axis),
        Kernel::Softmax => softmax_ops(x, axis),
        Kernel::RmsNorm => rmsnorm_ops(x, axis),
        Kernel::LogSumExp => logsumexp_ops(x, axis),
    }
}

/// [`ops_along`] and, with `dy` (of the output's shape), the gradient with respect to `x` that
/// `ovl::backward` derives: `[y]` or `[y, dx]`.
pub fn outputs_along(
    kernel: Kernel,
    x: &Lazy<f32>,
    axis: usize,
    dy: Option<&Lazy<f32>>,
) -> Result<Vec<Lazy<f32>>, ovl::Error> {
    let y = ops_along(kernel, x, axis);
    let Some(dy) = dy else {
        return Ok(vec![y]);
    };
    let grads = ovl::backward(&[(&y, dy)], &[x])?;
    // `y` depends on `x`, so `backward` gives a gradient for it.
    let dx = grads
        .of(x)
        .unwrap_or_else(|| panic!("{} has no gradient for x", kernel.name()));
    Ok(vec![y, dx])
}

// ---------------------------------------------------------------------------------------------
// (b) Hand-written operators, one worker per row

/// Layer norm's statistics of row `r` of `x` (`cols` wide): its mean and `1 / sqrt(var + eps)`,
/// in one pass (sum and sum of squares).
#[helper]
fn layernorm_stats(x: &Tensor<f32>, r: Expr<i64>, cols: usize, eps: f32) -> (Expr<f32>, Expr<f32>) {
    let mut s = sum_of(0.0f32);
    let mut sq = sum_of(0.0f32);
    for j in 0..cols {
        let v = x[[r, j]];
        s += v;
        sq += v * v;
    }
    let mean = s / cols as f32;
    (mean, rsqrt(sq / cols as f32 - mean * mean + eps))
}

/// RMS norm's statistic of row `r` of `x` (`cols` wide): `1 / sqrt(mean(x²) + eps)`.
#[helper]
fn rms_inv(x: &Tensor<f32>, r: Expr<i64>, cols: usize, eps: f32) -> Expr<f32> {
    let mut sq = sum_of(0.0f32);
    for j in 0..cols {
        sq += x[[r, j]] * x[[r, j]];
    }
    rsqrt(sq / cols as f32 + eps)
}

/// `(x - mean) / sqrt(var + eps)` per row, the statistics in one pass (sum and sum of squares).
#[operator]
pub fn layernorm_rows(x: Tensor<f32>, eps: f32) -> Tensor<f32> {
    let [rows, cols] = x.dims::<2>();
    let r = position_in([rows])[0];
    let y = output_like(&x);
    let (mean, inv) = layernorm_stats(&x, r, cols, eps);
    for j in 0..cols {
        y[[r, j]] = (x[[r, j]] - mean) * inv;
    }
    y
}

/// The gradient of [`layernorm_rows`]: with `ŷ` the normalized row and `inv = 1/sqrt(var + eps)`,
/// `dx = inv * (dy - mean(dy) - ŷ * mean(dy * ŷ))` (the statistics recomputed from `x`).
#[operator]
pub fn layernorm_rows_grad(x: Tensor<f32>, dy: Tensor<f32>, eps: f32) -> Tensor<f32> {
    let [rows, cols] = x.dims::<2>();
    let r = position_in([rows])[0];
    let dx = output_like(&x);
    let (mean, inv) = layernorm_stats(&x, r, cols, eps);
    let mut g = sum_of(0.0f32);
    let mut gy = sum_of(0.0f32);
    for j in 0..cols {
        let d = dy[[r, j]];
        g += d;
        gy += d * ((x[[r, j]] - mean) * inv);
    }
    let g_mean = g / cols as f32;
    let gy_mean = gy / cols as f32;
    for j in 0..cols {
        let yhat = (x[[r, j]] - mean) * inv;
        dx[[r, j]] = inv * (dy[[r, j]] - g_mean - yhat * gy_mean);
    }
    dx
}

/// The longest row (f32 elements) [`softmax_rows`] keeps in a worker-local buffer: 64 KiB, the
/// limit of a local tensor.
const ROW_BUFFER: usize = 16 * 1024;

/// `exp(x - max) / sum(exp(x - max))` per row, as `e * (1 / sum(e))` (one division per row).
/// A row that fits a local tensor keeps `e = exp(x - max)` in it, so `exp` runs once per
/// element; a longer one computes it again for the output.
#[operator]
pub fn softmax_rows(x: Tensor<f32>) -> Tensor<f32> {
    let [rows, cols] = x.dims::<2>();
    let r = position_in([rows])[0];
    let y = output_like(&x);
    let mut top = max_of(f32::NEG_INFINITY);
    for j in 0..cols {
        top.update(x[[r, j]]);
    }
    let mut total = sum_of(0.0f32);
    if cols <= ROW_BUFFER {
        let e = zeros::<f32>([cols]);
        for j in 0..cols {
            let v = exp(x[[r, j]] - top);
            e[[j]] = v;
            total += v;
        }
        let scale = 1.0f32 / total.get();
        for j in 0..cols {
            y[[r, j]] = e[[j]] * scale;
        }
    } else {
        for j in 0..cols {
            total += exp(x[[r, j]] - top);
        }
        let scale = 1.0f32 / total.get();
        for j in 0..cols {
            y[[r, j]] = exp(x[[r, j]] - top) * scale;
        }
    }
    y
}

/// The gradient of [`softmax_rows`] from its output: `dx = y * (dy - sum(dy * y))`.
#[operator]
pub fn softmax_rows_grad(y: Tensor<f32>, dy: Tensor<f32>) -> Tensor<f32> {
    let [rows, cols] = y.dims::<2>();
    let r = position_in([rows])[0];
    let dx = output_like(&y);
    let mut dot = sum_of(0.0f32);
    for j in 0..cols {
        dot += dy[[r, j]] * y[[r, j]];
    }
    for j in 0..cols {
        dx[[r, j]] = y[[r, j]] * (dy[[r, j]] - dot);
    }
    dx
}

/// `x / sqrt(mean(x²) + eps)` per row.
#[operator]
pub fn rmsnorm_rows(x: Tensor<f32>, eps: f32) -> Tensor<f32> {
    let [rows, cols] = x.dims::<2>();
    let r = position_in([rows])[0];
    let y = output_like(&x);
    let inv = rms_inv(&x, r, cols, eps);
    for j in 0..cols {
        y[[r, j]] = x[[r, j]] * inv;
    }
    y
}

/// The gradient of [`rmsnorm_rows`]: `dx = inv * (dy - ŷ * mean(dy * ŷ))` with `ŷ = x * inv`.
#[operator]
pub fn rmsnorm_rows_grad(x: Tensor<f32>, dy: Tensor<f32>, eps: f32) -> Tensor<f32> {
    let [rows, cols] = x.dims::<2>();
    let r = position_in([rows])[0];
    let dx = output_like(&x);
    let inv = rms_inv(&x, r, cols, eps);
    let mut gy = sum_of(0.0f32);
    for j in 0..cols {
        gy += dy[[r, j]] * x[[r, j]];
    }
    let gy_mean = gy * inv / cols as f32;
    for j in 0..cols {
        let yhat = x[[r, j]] * inv;
        dx[[r, j]] = inv * (dy[[r, j]] - yhat * gy_mean);
    }
    dx
}

/// `max + log(sum(exp(x - max)))` per row: one value per row.
#[operator]
pub fn logsumexp_rows(x: Tensor<f32>) -> Tensor<f32> {
    let [rows, cols] = x.dims::<2>();
    let r = position_in([rows])[0];
    let y = output::<f32>([rows]);
    let mut top = max_of(f32::NEG_INFINITY);
    for j in 0..cols {
        top.update(x[[r, j]]);
    }
    let mut total = sum_of(0.0f32);
    for j in 0..cols {
        total += exp(x[[r, j]] - top);
    }
    y[[r]] = top + log(total);
    y
}

/// The gradient of [`logsumexp_rows`]: `dx = exp(x - y) * dy`, `y` and `dy` one value per row.
#[operator]
pub fn logsumexp_rows_grad(x: Tensor<f32>, y: Tensor<f32>, dy: Tensor<f32>) -> Tensor<f32> {
    let [rows, cols] = x.dims::<2>();
    let r = position_in([rows])[0];
    let dx = output_like(&x);
    let (lse, g) = (y[[r]], dy[[r]]);
    for j in 0..cols {
        dx[[r, j]] = exp(x[[r, j]] - lse) * g;
    }
    dx
}

// ---------------------------------------------------------------------------------------------
// The handles to evaluate

/// The forward output of `kernel` written `way`.
pub fn forward(kernel: Kernel, way: Way, x: &Lazy<f32>) -> Lazy<f32> {
    match (way, kernel) {
        (Way::Ops, _) => ops_along(kernel, x, 1),
        (Way::Operator, Kernel::LayerNorm) => layernorm_rows(x, EPS),
        (Way::Operator, Kernel::Softmax) => softmax_rows(x),
        (Way::Operator, Kernel::RmsNorm) => rmsnorm_rows(x, EPS),
        (Way::Operator, Kernel::LogSumExp) => logsumexp_rows(x),
        (Way::Stdlib, Kernel::LayerNorm) => ops::layernorm(x, EPS as f64),
        (Way::Stdlib, Kernel::Softmax) => ops::softmax(x),
        (Way::Stdlib, Kernel::RmsNorm) => ops::rmsnorm(x, EPS as f64),
        (Way::Stdlib, Kernel::LogSumExp) => ops::logsumexp(x),
    }
}

/// What one call computes: `[y]` forward, or `[y, dx]` with `dy` (the incoming gradient, of
/// `y`'s shape) for forward + backward.
pub fn outputs(
    kernel: Kernel,
    way: Way,
    x: &Lazy<f32>,
    dy: Option<&Lazy<f32>>,
) -> Result<Vec<Lazy<f32>>, ovl::Error> {
    let y = forward(kernel, way, x);
    let Some(dy) = dy else {
        return Ok(vec![y]);
    };
    let dx = match way {
        Way::Operator => match kernel {
            Kernel::LayerNorm => layernorm_rows_grad(x, dy, EPS),
            Kernel::Softmax => softmax_rows_grad(&y, dy),
            Kernel::RmsNorm => rmsnorm_rows_grad(x, dy, EPS),
            Kernel::LogSumExp => logsumexp_rows_grad(x, &y, dy),
        },
        Way::Ops | Way::Stdlib => {
            let grads = ovl::backward(&[(&y, dy)], &[x])?;
            // `y` depends on `x`, so `backward` gives a gradient for it.
            grads
                .of(x)
                .unwrap_or_else(|| panic!("{} has no gradient for x", kernel.name()))
        }
    };
    Ok(vec![y, dx])
}

// ---------------------------------------------------------------------------------------------
// The plain-Rust reference (f64)

/// `kernel` forward and its gradient for `dy` (`[rows, cols]`, or `[rows]` for logsumexp), in
/// f64 from the f32 inputs, computed row by row with the textbook formulas: `(y, dx)`.
pub fn reference(kernel: Kernel, x: &Array2<f32>, dy: &ArrayD<f32>) -> (ArrayD<f64>, ArrayD<f64>) {
    let (rows, cols) = x.dim();
    let n = cols as f64;
    let eps = EPS as f64;
    let mut y = if kernel.keeps_shape() {
        Array2::<f64>::zeros((rows, cols)).into_dyn()
    } else {
        Array1::<f64>::zeros(rows).into_dyn()
    };
    let mut dx = Array2::<f64>::zeros((rows, cols));
    for r in 0..rows {
        let v: Vec<f64> = x.row(r).iter().map(|&a| a as f64).collect();
        match kernel {
            Kernel::LayerNorm | Kernel::RmsNorm => {
                let g: Vec<f64> = (0..cols).map(|j| dy[[r, j]] as f64).collect();
                let mean = if kernel == Kernel::LayerNorm {
                    v.iter().sum::<f64>() / n
                } else {
                    0.0
                };
                let var = v.iter().map(|a| (a - mean) * (a - mean)).sum::<f64>() / n;
                let inv = 1.0 / (var + eps).sqrt();
                let yh: Vec<f64> = v.iter().map(|a| (a - mean) * inv).collect();
                let g_mean = if kernel == Kernel::LayerNorm {
                    g.iter().sum::<f64>() / n
                } else {
                    0.0
                };
                let gy_mean = g.iter().zip(&yh).map(|(a, b)| a * b).sum::<f64>() / n;
                for j in 0..cols {
                    y[[r, j]] = yh[j];
                    dx[[r, j]] = inv * (g[j] - g_mean - yh[j] * gy_mean);
                }
            }
            Kernel::Softmax => {
                let g: Vec<f64> = (0..cols).map(|j| dy[[r, j]] as f64).collect();
                let top = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = v.iter().map(|a| (a - top).exp()).collect();
                let total: f64 = e.iter().sum();
                let s: Vec<f64> = e.iter().map(|a| a / total).collect();
                let dot: f64 = s.iter().zip(&g).map(|(a, b)| a * b).sum();
                for j in 0..cols {
                    y[[r, j]] = s[j];
                    dx[[r, j]] = s[j] * (g[j] - dot);
                }
            }
            Kernel::LogSumExp => {
                let top = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let lse = top + v.iter().map(|a| (a - top).exp()).sum::<f64>().ln();
                y[[r]] = lse;
                for j in 0..cols {
                    dx[[r, j]] = (v[j] - lse).exp() * dy[[r]] as f64;
                }
            }
        }
    }
    (y, dx.into_dyn())
}

/// The largest `|got - want|`, and whether it is within the tolerance of an f32 computation:
/// `1e-4 * (1 + max |want|)` (a NaN anywhere fails).
pub fn max_abs_error<A, B>(got: &ArrayD<A>, want: &ArrayD<B>) -> (f64, bool)
where
    A: Copy + Into<f64>,
    B: Copy + Into<f64>,
{
    if got.shape() != want.shape() {
        return (f64::INFINITY, false);
    }
    let mut err = 0.0f64;
    let mut scale = 0.0f64;
    let mut nan = false;
    for (&g, &w) in got.iter().zip(want.iter()) {
        let (g, w): (f64, f64) = (g.into(), w.into());
        nan |= g.is_nan() || w.is_nan();
        err = err.max((g - w).abs());
        scale = scale.max(w.abs());
    }
    (err, !nan && err <= 1e-4 * (1.0 + scale))
}

/// `shape` without axis `axis`.
pub fn without(shape: &[usize], axis: usize) -> Vec<usize> {
    let mut s = shape.to_vec();
    s.remove(axis);
    s
}

/// Deterministic pseudo-random values in [-2, 2) (xorshift), the same on every run and machine.
pub fn pseudo_random(shape: &[usize], seed: u64) -> ArrayD<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    ArrayD::from_shape_simple_fn(ndarray::IxDyn(shape), || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        ((s >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
    })
}

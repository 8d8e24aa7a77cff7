//! Two models for [`nuts`](crate::nuts::nuts), each a [`LogDensity`] whose body is a `#[helper]`.

use crate::nuts::LogDensity;
use ovl::prelude::*;

/// A zero-mean Gaussian given its precision matrix (the inverse covariance): `data[0]`,
/// `[dim, dim]`, symmetric. `log p(q) = -q' A q / 2` (up to a constant), gradient `-A q`.
pub struct Gaussian;

#[helper]
fn gaussian(q: &Tensor<f64>, grad: &Tensor<f64>, precision: &Tensor<f64>) -> Expr<f64> {
    let d = q.dims::<1>()[0];
    let mut quad = variable(0.0f64);
    for j in 0..d {
        let mut s = sum_of(0.0f64);
        for k in 0..d {
            s += precision[[j, k]] * q[[k]];
        }
        grad[[j]] = -s.get();
        quad += q[[j]] * s.get();
    }
    -0.5 * quad.get()
}

impl LogDensity for Gaussian {
    fn log_density(q: &Tensor<f64>, grad: &Tensor<f64>, data: &[Tensor<f64>]) -> Expr<f64> {
        gaussian(q, grad, &data[0])
    }
}

/// Bayesian logistic regression: `data[0]` the design matrix `x` `[n, dim]`, `data[1]` the labels
/// `y` `[n]` (0 or 1), a standard normal prior on the coefficients. `log p(beta) =
/// sum_i (y_i eta_i - softplus(eta_i)) - |beta|^2 / 2` with `eta = x beta`; gradient
/// `x' (y - sigmoid(eta)) - beta`.
pub struct Logistic;

#[helper]
fn logistic(q: &Tensor<f64>, grad: &Tensor<f64>, x: &Tensor<f64>, y: &Tensor<f64>) -> Expr<f64> {
    let [n, d] = x.dims::<2>();
    let mut lp = variable(0.0f64);
    for j in 0..d {
        grad[[j]] = -q[[j]];
        lp += q[[j]] * q[[j]];
    }
    lp = -0.5 * lp.get();
    for i in 0..n {
        let mut eta = sum_of(0.0f64);
        for j in 0..d {
            eta += x[[i, j]] * q[[j]];
        }
        let e = eta.get();
        // softplus(e) = max(e, 0) + log1p(exp(-|e|)), without overflow.
        lp += y[[i]] * e - (max(e, 0.0f64) + log1p(exp(-abs(e))));
        let r = y[[i]] - sigmoid(e);
        for j in 0..d {
            grad[[j]] = grad[[j]] + x[[i, j]] * r;
        }
    }
    lp.get()
}

impl LogDensity for Logistic {
    fn log_density(q: &Tensor<f64>, grad: &Tensor<f64>, data: &[Tensor<f64>]) -> Expr<f64> {
        logistic(q, grad, &data[0], &data[1])
    }
}

/// The precision matrix (inverse covariance) of the AR(1)-correlated Gaussian with covariance
/// `rho^|i - j|` (unit variances), in closed form: `1 / (1 - rho^2)` times the tridiagonal
/// matrix with diagonal `1, 1 + rho^2, .., 1 + rho^2, 1` and off-diagonals `-rho`.
pub fn ar1_precision(dim: usize, rho: f64) -> ndarray::Array2<f64> {
    let s = 1.0 / (1.0 - rho * rho);
    ndarray::Array2::from_shape_fn((dim, dim), |(i, j)| {
        if i == j && (i == 0 || i + 1 == dim) {
            s
        } else if i == j {
            s * (1.0 + rho * rho)
        } else if i.abs_diff(j) == 1 {
            -s * rho
        } else {
            0.0
        }
    })
}

/// Uniforms in [0, 1) from a 64-bit LCG (Knuth's MMIX constants) seeded with `seed`.
pub fn lcg_uniforms(seed: u64, count: usize) -> Vec<f64> {
    let mut s = seed ^ 0x9E37_79B9_7F4A_7C15;
    (0..count)
        .map(|_| {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (s >> 11) as f64 / (1u64 << 53) as f64
        })
        .collect()
}

/// A seeded synthetic data set for [`Logistic`]: `x` `[n, dim]` uniform in [-sqrt 3, sqrt 3)
/// (unit variance), true coefficients uniform in [-1, 1), and labels `y_i = 1` with probability
/// `sigmoid(x_i . beta)`. Returns `(x, y, beta)`.
pub fn logistic_data(
    n: usize,
    dim: usize,
    seed: u64,
) -> (
    ndarray::Array2<f64>,
    ndarray::Array1<f64>,
    ndarray::Array1<f64>,
) {
    let u = lcg_uniforms(seed, n * dim + dim + n);
    let root3 = 3.0f64.sqrt();
    let x = ndarray::Array2::from_shape_fn((n, dim), |(i, j)| (2.0 * u[i * dim + j] - 1.0) * root3);
    let beta = ndarray::Array1::from_shape_fn(dim, |j| 2.0 * u[n * dim + j] - 1.0);
    let eta = x.dot(&beta);
    let y = ndarray::Array1::from_shape_fn(n, |i| {
        f64::from(u[n * dim + dim + i] < 1.0 / (1.0 + (-eta[i]).exp()))
    });
    (x, y, beta)
}

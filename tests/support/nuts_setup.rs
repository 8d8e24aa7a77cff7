//! Inputs of the NUTS tests: an AR(1)-correlated Gaussian, a seeded logistic-regression data
//! set and the sampler's call, shared by the `core` and `cuda` test binaries.

#![allow(dead_code)]

use ndarray::{Array1, Array2, ArrayD};
use ovl::{Lazy, Options};
use ovl_stdlib::nuts::{nuts, LogDensity};
use ovl_stdlib::nuts_models::lcg_uniforms;

/// The covariance `rho^|i - j|` (unit variances, AR(1) correlation).
pub fn ar1_covariance(dim: usize, rho: f64) -> Array2<f64> {
    Array2::from_shape_fn((dim, dim), |(i, j)| rho.powi((i as i32 - j as i32).abs()))
}

/// Initial positions uniform in [-1, 1).
pub fn initial_positions(chains: usize, dim: usize, seed: u64) -> Array2<f64> {
    let u = lcg_uniforms(seed, chains * dim);
    Array2::from_shape_fn((chains, dim), |(c, j)| 2.0 * u[c * dim + j] - 1.0)
}

/// The sampler's outputs, evaluated.
pub struct Run {
    pub samples: ArrayD<f64>,
    pub depth: ArrayD<i32>,
    pub leapfrogs: ArrayD<i32>,
    pub divergent: ArrayD<i32>,
    pub accept: ArrayD<f64>,
}

#[allow(clippy::too_many_arguments)]
pub fn run<M: LogDensity>(
    key: [u32; 2],
    init: &Array2<f64>,
    step: f64,
    inv_mass: &Array1<f64>,
    data: &[ArrayD<f64>],
    transitions: usize,
    max_depth: usize,
    options: &Options,
) -> Run {
    let chains = init.nrows();
    let outs = nuts::<M>(
        Array1::from(key.to_vec()),
        init.clone(),
        Array1::from_elem(chains, step),
        inv_mass.clone(),
        data.iter().map(|d| Lazy::from(d.clone())).collect(),
        transitions,
        max_depth,
    );
    let (samples, depth, leapfrogs, divergent, accept) =
        ovl::evaluate_with((&outs.0, &outs.1, &outs.2, &outs.3, &outs.4), options)
            .unwrap_or_else(|e| panic!("{e}"));
    Run {
        samples,
        depth,
        leapfrogs,
        divergent,
        accept,
    }
}

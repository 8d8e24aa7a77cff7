//! Gradients derived from an operator's IR (`ovl_ir::grad`): operators written without a
//! gradient, differentiated by `backward`, compared with central differences in f64 (computed
//! on the interpreter from forward evaluations only) and with the hand-written gradients of the
//! standard library, on the interpreter, the C++ backend and CUDA validation (every kernel
//! compiled by NVRTC and checked by ptxas, then run by the interpreter in the GPU's reduction
//! order: GPU execution does not run here); the constructs that are not differentiated are
//! errors naming the operator.

use ndarray::{ArrayD, IxDyn};
use ovl::prelude::*;
use ovl::GradError;

fn targets() -> [(&'static str, Options); 3] {
    [
        ("interpreter", Options::interpreter()),
        ("cpu", Options::cpu()),
        ("cuda-validate", Options::cuda_validate()),
    ]
}

/// Deterministic values in [lo, hi) (xorshift).
fn values(shape: &[usize], seed: u64, lo: f64, hi: f64) -> ArrayD<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    ArrayD::from_shape_simple_fn(IxDyn(shape), || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        lo + (hi - lo) * ((s >> 11) as f64 / (1u64 << 53) as f64)
    })
}

type Forward = dyn Fn(&[Lazy<f64>]) -> Vec<Lazy<f64>>;

/// The loss `sum_o sum(seed_o * f(xs)_o)` on the interpreter.
fn loss(f: &Forward, xs: &[ArrayD<f64>], seeds: &[ArrayD<f64>]) -> f64 {
    let lazies: Vec<Lazy<f64>> = xs.iter().map(|x| Lazy::from(x.clone())).collect();
    let ys = f(&lazies);
    ys.iter()
        .zip(seeds)
        .map(|(y, s)| {
            let v = ovl::evaluate_with(y, &Options::interpreter()).unwrap();
            (&v * s).sum()
        })
        .sum()
}

/// Central differences of the loss with respect to every element of every input.
fn numeric(f: &Forward, xs: &[ArrayD<f64>], seeds: &[ArrayD<f64>]) -> Vec<ArrayD<f64>> {
    let h = 1e-6;
    (0..xs.len())
        .map(|i| {
            let mut g = ArrayD::zeros(xs[i].raw_dim());
            for (k, slot) in g.iter_mut().enumerate() {
                let mut plus = xs.to_vec();
                let mut minus = xs.to_vec();
                plus[i].as_slice_mut().unwrap()[k] += h;
                minus[i].as_slice_mut().unwrap()[k] -= h;
                *slot = (loss(f, &plus, seeds) - loss(f, &minus, seeds)) / (2.0 * h);
            }
            g
        })
        .collect()
}

/// The derived gradients of every input (zeros where none flows), evaluated on `options`.
fn derived(
    f: &Forward,
    xs: &[ArrayD<f64>],
    seeds: &[ArrayD<f64>],
    options: &Options,
) -> Result<Vec<ArrayD<f64>>, GradError> {
    let lazies: Vec<Lazy<f64>> = xs.iter().map(|x| Lazy::from(x.clone())).collect();
    let ys = f(&lazies);
    let seed_handles: Vec<Lazy<f64>> = seeds.iter().map(|s| Lazy::from(s.clone())).collect();
    let pairs: Vec<(&Lazy<f64>, &Lazy<f64>)> = ys.iter().zip(&seed_handles).collect();
    let wrt: Vec<&Lazy<f64>> = lazies.iter().collect();
    let grads = ovl::backward(&pairs, &wrt)?;
    Ok(lazies
        .iter()
        .map(|x| ovl::evaluate_with(&grads.of_or_zeros(x), options).unwrap())
        .collect())
}

fn assert_close(what: &str, got: &ArrayD<f64>, want: &ArrayD<f64>, tol: f64) {
    assert_eq!(got.shape(), want.shape(), "{what}");
    for (k, (g, w)) in got.iter().zip(want.iter()).enumerate() {
        assert!(
            (g - w).abs() <= tol * w.abs().max(1.0),
            "{what}: element {k}: derived {g}, expected {w}"
        );
    }
}

/// Checks the derived gradients of `f` against central differences on every target.
fn check(name: &str, f: &Forward, xs: Vec<ArrayD<f64>>) {
    let lazies: Vec<Lazy<f64>> = xs.iter().map(|x| Lazy::from(x.clone())).collect();
    let seeds: Vec<ArrayD<f64>> = f(&lazies)
        .iter()
        .enumerate()
        .map(|(o, y)| values(y.shape(), 100 + o as u64, -1.0, 1.0))
        .collect();
    let want = numeric(f, &xs, &seeds);
    for (target, options) in targets() {
        let got =
            derived(f, &xs, &seeds, &options).unwrap_or_else(|e| panic!("{name} on {target}: {e}"));
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_close(&format!("{name} on {target}, input {i}"), g, w, 1e-6);
        }
    }
}

/// The derived gradients of `f` (seeded with fixed values) as a function of the inputs.
fn gradient_of(f: &'static Forward) -> impl Fn(&[Lazy<f64>]) -> Vec<Lazy<f64>> {
    move |xs: &[Lazy<f64>]| {
        let ys = f(xs);
        let seeds: Vec<Lazy<f64>> = ys
            .iter()
            .enumerate()
            .map(|(o, y)| Lazy::from(values(y.shape(), 200 + o as u64, -1.0, 1.0)))
            .collect();
        let pairs: Vec<(&Lazy<f64>, &Lazy<f64>)> = ys.iter().zip(&seeds).collect();
        let wrt: Vec<&Lazy<f64>> = xs.iter().collect();
        let g = ovl::backward(&pairs, &wrt).unwrap();
        xs.iter().map(|x| g.of_or_zeros(x)).collect()
    }
}

mod api;
use crate::conformance;
mod elementwise;
mod loops;
mod props;
mod recurrences;
mod suite;

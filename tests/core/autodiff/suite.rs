//! The conformance suite's operators with float outputs (`tests/conformance/`), written without
//! gradients: derived gradients against central differences, at values away from the kinks
//! (`%`, `min`/`max`, `abs`, `round`) and inside every function's domain.

use super::conformance::{arithmetic, control, math, paper};
use super::*;

fn at(v: &[f64]) -> ArrayD<f64> {
    ArrayD::from_shape_vec(IxDyn(&[v.len()]), v.to_vec()).unwrap()
}

#[test]
fn arithmetic_and_unary_ops() {
    check(
        "binary_ops",
        &|xs| {
            let o = arithmetic::binary_ops(&xs[0], &xs[1]);
            vec![o.0, o.1, o.2, o.3, o.4, o.5, o.6]
        },
        vec![
            at(&[0.55, 1.3, 1.9, -0.8, 2.2]),
            at(&[0.7, -1.1, 0.45, 1.6, 0.9]),
        ],
    );
    check(
        "unary_ops",
        &|xs| {
            let (n, a) = arithmetic::unary_ops(&xs[0]);
            vec![n, a]
        },
        vec![at(&[-1.5, -0.2, 0.3, 2.5])],
    );
}

#[test]
fn every_math_function() {
    // Inside every domain (sqrt, log, asin, acos) and away from round's jumps at 0.5.
    check(
        "unary_all",
        &|xs| math::unary_all(&xs[0]),
        vec![at(&[0.15, 0.3, 0.42, 0.63, 0.8])],
    );
    check(
        "binary_all",
        &|xs| {
            let o = math::binary_all(&xs[0], &xs[1]);
            vec![o.0, o.1, o.2]
        },
        vec![at(&[0.4, 1.2, 2.1, 0.9]), at(&[1.5, -0.6, 0.8, 2.4])],
    );
}

#[test]
fn the_original_systems_examples() {
    check(
        "log1p_expm1",
        &|xs| {
            let (l, e) = paper::log1p_expm1(&xs[0]);
            vec![l, e]
        },
        vec![at(&[-0.5, 0.25, 1.5, 3.0])],
    );
    // A cumulative sum carries only a sum; a cumulative product carries its product (recorded).
    check(
        "cumsum_cumprod",
        &|xs| {
            let (s, p) = control::cumsum_cumprod(&xs[0]);
            vec![s, p]
        },
        vec![values(&[2, 4], 90, 0.5, 1.5)],
    );
}

/// The original system's f32 1-D convolution (zero padding, guarded taps): the derived
/// gradients of `x` (a gather over the taps that read each element) and of `w` (a sum over the
/// row) against the correlation computed here in f64, on every backend.
#[test]
fn the_original_systems_f32_convolution() {
    let (n, taps, r) = (37usize, 5usize, 2i64);
    let x: Vec<f32> = (0..n).map(|i| ((i * 7) % 11) as f32 * 0.2 - 1.0).collect();
    let w: Vec<f32> = vec![0.25, -0.5, 1.0, 0.5, 0.125];
    let seed: Vec<f32> = (0..n).map(|i| ((i * 5) % 13) as f32 * 0.1 - 0.6).collect();
    let (mut dx, mut dw) = (vec![0.0f64; n], vec![0.0f64; taps]);
    for i in 0..n as i64 {
        for k in 0..taps as i64 {
            let j = i + k - r;
            if (0..n as i64).contains(&j) {
                dx[j as usize] += f64::from(seed[i as usize]) * f64::from(w[k as usize]);
                dw[k as usize] += f64::from(seed[i as usize]) * f64::from(x[j as usize]);
            }
        }
    }
    let lazy =
        |v: &[f32]| Lazy::from(ArrayD::from_shape_vec(IxDyn(&[v.len()]), v.to_vec()).unwrap());
    let (xl, wl, sl) = (lazy(&x), lazy(&w), lazy(&seed));
    let y = paper::conv1d(&xl, &wl);
    let g = ovl::backward(&[(&y, &sl)], &[&xl, &wl]).unwrap();
    for (name, options) in targets() {
        for (what, got, want) in [("x", &xl, &dx), ("w", &wl, &dw)] {
            let got = ovl::evaluate_with(&g.of(got).unwrap(), &options).unwrap();
            for (i, (&a, &b)) in got.iter().zip(want.iter()).enumerate() {
                assert!(
                    (f64::from(a) - b).abs() <= 1e-5 * b.abs().max(1.0),
                    "conv1d d{what}[{i}] on {name}: {a} vs {b}"
                );
            }
        }
    }
}

//! The standard library on half tensors (f16, bf16): activations, reductions, softmax, the norms
//! and the LSTM cell against references computed here in f64 from the exact half values, with
//! f32 accumulation visible (a sum of 4096 ones is 4096); gradients against central differences
//! of the same functions computed in f32.

use ndarray::{Array, ArrayD, IxDyn};
use ovl::half::{bf16, f16};
use ovl::prelude::Float;
use ovl::{Lazy, Options};
use ovl_stdlib as ops;

/// Deterministic values in [lo, hi), different for each `seed`.
fn values(shape: &[usize], seed: u64, lo: f64, hi: f64) -> ArrayD<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    Array::from_shape_simple_fn(IxDyn(shape), || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        lo + (hi - lo) * ((s >> 11) as f64 / (1u64 << 53) as f64)
    })
}

/// A half type with its conversions and the relative size of its ulp (2^-fraction bits).
trait Half: Float {
    const ULP: f64;
    fn of(x: f64) -> Self;
    fn value(self) -> f64;
}
impl Half for f16 {
    const ULP: f64 = 1.0 / 1024.0;
    fn of(x: f64) -> Self {
        f16::from_f32(x as f32)
    }
    fn value(self) -> f64 {
        self.to_f64()
    }
}
impl Half for bf16 {
    const ULP: f64 = 1.0 / 128.0;
    fn of(x: f64) -> Self {
        bf16::from_f32(x as f32)
    }
    fn value(self) -> f64 {
        self.to_f64()
    }
}

/// `got` within `ulps` ulps of the half type of `want`, on both targets.
fn close<T: Half>(name: &str, y: &Lazy<T>, want: &ArrayD<f64>, ulps: f64) {
    close_at::<T>(name, y, want, ulps, 1e-3)
}

/// [`close`] with ulps of at least `floor` (the LSTM cell: small results come from cancelling
/// terms near 1, each rounded).
fn close_at<T: Half>(name: &str, y: &Lazy<T>, want: &ArrayD<f64>, ulps: f64, floor: f64) {
    for options in [Options::interpreter(), Options::cpu()] {
        let got = ovl::evaluate_with(y, &options).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(got.shape(), want.shape(), "{name}");
        for (k, (g, w)) in got.iter().zip(want).enumerate() {
            let tol = ulps * T::ULP * w.abs().max(floor);
            assert!(
                (g.value() - w).abs() <= tol,
                "{name} {:?} [{k}]: {} vs {w}",
                options.target,
                g.value()
            );
        }
    }
}

/// Rows of a `[rows, cols]` array as f64 slices.
fn rows(x: &ArrayD<f64>) -> Vec<Vec<f64>> {
    x.outer_iter()
        .map(|r| r.iter().copied().collect())
        .collect()
}

fn forward<T: Half>() {
    let x64 = values(&[5, 37], 1, -3.0, 3.0).mapv(|v| T::of(v).value());
    let x = Lazy::from(x64.mapv(T::of));
    let r = rows(&x64);
    let per_row = |f: &dyn Fn(&[f64]) -> f64| {
        ArrayD::from_shape_vec(IxDyn(&[5]), r.iter().map(|v| f(v)).collect()).unwrap()
    };
    let per_elem = |f: &dyn Fn(&[f64], f64) -> f64| {
        let v: Vec<f64> = r
            .iter()
            .flat_map(|row| row.iter().map(|&e| f(row, e)))
            .collect();
        ArrayD::from_shape_vec(IxDyn(&[5, 37]), v).unwrap()
    };
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let var = |v: &[f64]| v.iter().map(|e| (e - mean(v)).powi(2)).sum::<f64>() / v.len() as f64;
    let lse = |v: &[f64]| v.iter().map(|e| e.exp()).sum::<f64>().ln();
    // Rounded once: within one ulp, plus the f32 computation's own error (far smaller).
    close("sum", &ops::sum(&x, 1), &per_row(&|v| v.iter().sum()), 1.0);
    close("mean", &ops::mean(&x, 1), &per_row(&mean), 1.0);
    close("var", &ops::var(&x, 1), &per_row(&var), 1.0);
    close("logsumexp", &ops::logsumexp(&x), &per_row(&lse), 1.0);
    close(
        "softmax",
        &ops::softmax(&x),
        &per_elem(&|v, e| (e - lse(v)).exp()),
        1.0,
    );
    let eps = 1e-5;
    close(
        "layernorm",
        &ops::layernorm(&x, eps),
        &per_elem(&|v, e| (e - mean(v)) / (var(v) + eps).sqrt()),
        1.0,
    );
    let ms = |v: &[f64]| v.iter().map(|e| e * e).sum::<f64>() / v.len() as f64;
    close(
        "rmsnorm",
        &ops::rmsnorm(&x, eps),
        &per_elem(&|v, e| e / (ms(v) + eps).sqrt()),
        1.0,
    );
    let sig = |e: f64| 1.0 / (1.0 + (-e).exp());
    close("sigmoid", &ops::sigmoid(&x), &x64.mapv(sig), 1.0);
    close("tanh", &ops::tanh(&x), &x64.mapv(f64::tanh), 1.0);
    close("relu", &ops::relu(&x), &x64.mapv(|e| e.max(0.0)), 0.0);
    // Accumulated in f32: a half accumulator would stop at 2048 (f16) or 256 (bf16).
    let ones = Lazy::from(ArrayD::from_elem(IxDyn(&[2, 4096]), T::of(1.0)));
    let four_k = ArrayD::from_elem(IxDyn(&[2]), 4096.0);
    close("sum of ones", &ops::sum(&ones, 1), &four_k, 0.0);
    let counts = ArrayD::from_shape_fn(IxDyn(&[2, 4096]), |i| (i[1] + 1) as f64);
    close("cumsum of ones", &ops::cumsum(&ones, 1), &counts, 1.0);
}

#[test]
fn reductions_norms_softmax_and_activations_on_half_tensors() {
    forward::<f16>();
    forward::<bf16>();
}

/// The LSTM cell of `lstm.rs` on half tensors: each operator rounds once, so the result is
/// within a few ulps of the f64 cell.
fn lstm_cell<T: Half>() {
    let (b, h) = (3, 8);
    let concat64 = values(&[b, 4 * h], 3, -2.0, 2.0).mapv(|v| T::of(v).value());
    let c64 = values(&[b, h], 4, -1.0, 1.0).mapv(|v| T::of(v).value());
    let (concat, c) = (
        Lazy::from(concat64.mapv(T::of)),
        Lazy::from(c64.mapv(T::of)),
    );
    let gates = ops::split(&concat, 1, 4);
    let (i, j, f, o) = (&gates[0], &gates[1], &gates[2], &gates[3]);
    let new_c = ops::add(
        ops::mul(&c, ops::sigmoid(f)),
        ops::mul(ops::sigmoid(i), ops::tanh(j)),
    );
    let new_h = ops::mul(ops::tanh(&new_c), ops::sigmoid(o));
    let sig = |e: f64| 1.0 / (1.0 + (-e).exp());
    let mut want_c = ArrayD::zeros(IxDyn(&[b, h]));
    let mut want_h = ArrayD::zeros(IxDyn(&[b, h]));
    for r in 0..b {
        for k in 0..h {
            let g = |q: usize| concat64[[r, q * h + k]];
            let nc = c64[[r, k]] * sig(g(2)) + sig(g(0)) * g(1).tanh();
            want_c[[r, k]] = nc;
            want_h[[r, k]] = nc.tanh() * sig(g(3));
        }
    }
    close_at("lstm new_c", &new_c, &want_c, 4.0, 1.0);
    close_at("lstm new_h", &new_h, &want_h, 4.0, 1.0);
}

#[test]
fn the_lstm_cell_on_half_tensors() {
    lstm_cell::<f16>();
    lstm_cell::<bf16>();
}

/// The gradient of `sum(f(x) * w)` on half tensors against central differences of the f32
/// function (step 1e-2, computed in f32 by ovl on the same values).
fn gradient<T: Half>(
    name: &str,
    f: impl Fn(&Lazy<T>) -> Lazy<T>,
    g32: impl Fn(&Lazy<f32>) -> Lazy<f32>,
) {
    let x64 = values(&[3, 16], 7, -1.5, 1.5).mapv(|v| T::of(v).value());
    let x = Lazy::from(x64.mapv(T::of));
    let y = f(&x);
    let w64 = values(y.shape(), 8, -1.0, 1.0).mapv(|v| T::of(v).value());
    let w = Lazy::from(w64.mapv(T::of));
    let grads = ovl::backward(&[(&y, &w)], &[&x]).unwrap_or_else(|e| panic!("{name}: {e}"));
    let analytic = ovl::evaluate_with(&grads.of_or_zeros(&x), &Options::cpu()).unwrap();
    let w32 = w64.mapv(|v| v as f32);
    let loss = |x: &ArrayD<f32>| -> f32 {
        let y = ovl::evaluate_with(&g32(&Lazy::from(x.clone())), &Options::cpu()).unwrap();
        (y * &w32).sum()
    };
    let x32 = x64.mapv(|v| v as f32);
    let h = 1e-2f32;
    for j in 0..x32.len() {
        let mut plus = x32.clone();
        plus.as_slice_mut().unwrap()[j] += h;
        let mut minus = x32.clone();
        minus.as_slice_mut().unwrap()[j] -= h;
        let numeric = ((loss(&plus) - loss(&minus)) / (2.0 * h)) as f64;
        let got = analytic.as_slice().unwrap()[j].value();
        assert!(
            (got - numeric).abs() <= 8.0 * T::ULP * numeric.abs().max(1.0),
            "{name} ({}): d/dx[{j}] = {got}, central difference {numeric}",
            std::any::type_name::<T>()
        );
    }
}

/// The LSTM cell's new_h from gate pre-activations `z` `[B, 4H]` and cell state `c` `[B, H]`.
fn cell<U: ovl::prelude::Float>(z: &Lazy<U>, c: &Lazy<U>) -> Lazy<U> {
    let gates = ops::split(z, 1, 4);
    let (i, j, f, o) = (&gates[0], &gates[1], &gates[2], &gates[3]);
    let new_c = ops::add(
        ops::mul(c, ops::sigmoid(f)),
        ops::mul(ops::sigmoid(i), ops::tanh(j)),
    );
    ops::mul(ops::tanh(&new_c), ops::sigmoid(o))
}

#[test]
fn gradients_on_half_tensors_match_central_differences_in_f32() {
    fn all<T: Half>() {
        gradient::<T>("softmax", |x| ops::softmax(x), |x| ops::softmax(x));
        gradient::<T>(
            "layernorm",
            |x| ops::layernorm(x, 1e-5),
            |x| ops::layernorm(x, 1e-5),
        );
        gradient::<T>(
            "rmsnorm",
            |x| ops::rmsnorm(x, 1e-5),
            |x| ops::rmsnorm(x, 1e-5),
        );
        gradient::<T>("tanh", |x| ops::tanh(x), |x| ops::tanh(x));
        // The LSTM cell's new_h as a function of its gate pre-activations ([3, 16]: H = 4),
        // with a fixed cell state.
        let c = values(&[3, 4], 9, -1.0, 1.0).mapv(|v| T::of(v).value());
        let (ct, c32) = (Lazy::from(c.mapv(T::of)), Lazy::from(c.mapv(|v| v as f32)));
        gradient::<T>("lstm cell", |x| cell(x, &ct), |x| cell(x, &c32));
        gradient::<T>(
            "sum",
            |x| ops::sum_keepdim(x, 1),
            |x| ops::sum_keepdim(x, 1),
        );
    }
    all::<f16>();
    all::<bf16>();
}

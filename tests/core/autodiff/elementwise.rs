//! Elementwise operators: every op of the table, affine reads, branches, the LSTM cell.

use super::*;

/// Every differentiable unary and binary op of the table, in one elementwise operator.
#[operator]
pub fn every_op(x: Tensor<f64>, y: Tensor<f64>) -> (Tensor<f64>, Tensor<f64>) {
    let i = position_in(x.shape())[0];
    let (a, b) = (x[[i]], y[[i]]);
    let out = output_like(&x);
    let out2 = output_like(&x);
    let s = sin(a) * exp(b * 0.3) + log1p(a * a) + sqrt(b * b + 1.0) / (cos(a) + 2.0)
        - tanh(a) * sigmoid(b)
        + pow(abs(b) + 0.5, a)
        + atan2(a, b + 3.0)
        + erf(a)
        + fma(a, b, a)
        + min(a, b)
        - max(a, b * 0.5);
    let t = asin(a * 0.3) * acos(b * 0.2)
        + atan(a)
        + sinh(a * 0.5) * cosh(b * 0.5)
        + tan(a * 0.3)
        + exp2(a)
        + expm1(b * 0.5)
        + log2(abs(a) + 1.0)
        + log10(abs(b) + 2.0)
        + log(b * b + 0.1)
        + rsqrt(a * a + 1.0)
        + -a / (b * b + 1.5)
        + floor(a) * a
        + (a - b) * (a + b);
    out[[i]] = s;
    out2[[i]] = t.cast::<f32>().cast::<f64>() * 0.0 + t;
    (out, out2)
}

#[test]
fn elementwise_ops_match_central_differences() {
    // Away from the kinks of abs, min, max and floor.
    let x = ArrayD::from_shape_vec(IxDyn(&[6]), vec![-1.3, -0.7, -0.2, 0.35, 0.8, 1.6]).unwrap();
    let y = ArrayD::from_shape_vec(IxDyn(&[6]), vec![0.9, -1.1, 0.45, -0.3, 1.7, -0.6]).unwrap();
    check(
        "every_op",
        &|xs| {
            let (a, b) = every_op(&xs[0], &xs[1]);
            vec![a, b]
        },
        vec![x, y],
    );
}

/// `x[i, j] * w[j, i] + b[j]`: a transposed read and a broadcast read.
#[operator]
pub fn transpose_bias(x: Tensor<f64>, w: Tensor<f64>, b: Tensor<f64>) -> Tensor<f64> {
    let [r, c] = x.dims::<2>();
    let p = position_in([r, c]);
    let out = output([r, c]);
    out[[p[0], p[1]]] = tanh(x[[p[0], p[1]]] * w[[p[1], p[0]]] + b[[p[1]]]);
    out
}

#[test]
fn transposed_and_broadcast_reads() {
    check(
        "transpose_bias",
        &|xs| vec![transpose_bias(&xs[0], &xs[1], &xs[2])],
        vec![
            values(&[3, 4], 1, -1.0, 1.0),
            values(&[4, 3], 2, -1.0, 1.0),
            values(&[4], 3, -1.0, 1.0),
        ],
    );
}

/// A three-point stencil with guarded neighbours (a variable and `if`s on the position).
#[operator]
pub fn stencil(x: Tensor<f64>) -> Tensor<f64> {
    let [n] = x.dims::<1>();
    let i = position_in([n])[0];
    let out = output([n]);
    let mut v = variable(-2.0 * x[[i]] * x[[i]]);
    if i > 0 {
        v += sin(x[[i - 1]]);
    }
    if i + 1 < n {
        v += x[[i + 1]] * x[[i]];
    }
    out[[i]] = v;
    out
}

#[test]
pub fn stencil_with_guards() {
    check(
        "stencil",
        &|xs| vec![stencil(&xs[0])],
        vec![values(&[7], 4, -1.5, 1.5)],
    );
}

/// Reversed and strided reads: `out[i] = x[2 i] * x[n - 1 - 2 i]` (even elements forward,
/// odd ones backward).
#[operator]
fn reversed_strided(x: Tensor<f64>) -> Tensor<f64> {
    let [n] = x.dims::<1>();
    let i = position_in([n / 2])[0];
    let out = output([n / 2]);
    out[[i]] = x[[2 * i]] * exp(x[[n - 1 - 2 * i]]);
    out
}

#[test]
fn reversed_and_strided_reads() {
    check(
        "reversed_strided",
        &|xs| vec![reversed_strided(&xs[0])],
        vec![values(&[8], 5, -1.0, 1.0)],
    );
}

/// Even elements only: the gradient is written by the reading workers; odd ones stay zero.
#[operator]
fn evens(x: Tensor<f64>) -> Tensor<f64> {
    let [n] = x.dims::<1>();
    let i = position_in([n / 2])[0];
    let out = output([n / 2]);
    out[[i]] = exp(x[[2 * i]]);
    out
}

#[test]
fn a_strided_read_leaves_the_other_elements_zero() {
    check(
        "evens",
        &|xs| vec![evens(&xs[0])],
        vec![values(&[8], 36, -1.0, 1.0)],
    );
}

/// `if`/`else` on values, with a variable assigned in both branches, and `select`.
#[operator]
fn branches(x: Tensor<f64>, y: Tensor<f64>) -> Tensor<f64> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    let (a, b) = (x[[i]], y[[i]]);
    let mut v = variable(a);
    if a > b {
        v = a * a * b;
    } else {
        // Only evaluated where b > 0 in these data: sqrt of a negative is never taken.
        v = sqrt(b) + v;
    }
    out[[i]] = select(a * b > 0.0, v * 3.0, v - b);
    out
}

#[test]
fn if_else_and_select() {
    let x = ArrayD::from_shape_vec(IxDyn(&[6]), vec![1.2, -0.5, 0.3, 2.0, -1.0, 0.1]).unwrap();
    let y = ArrayD::from_shape_vec(IxDyn(&[6]), vec![0.4, 0.8, 0.9, -1.5, 0.6, 1.3]).unwrap();
    check("branches", &|xs| vec![branches(&xs[0], &xs[1])], vec![x, y]);
}

/// An LSTM cell as one operator (no gradient written): gate pre-activations `[B, 4H]` read at
/// `[b, h + k H]`, the cell state at the worker's element.
#[operator]
pub fn lstm_cell_op<T: Float>(
    z: Tensor<T>,
    c: Tensor<T>,
    forget_bias: T,
) -> (Tensor<T>, Tensor<T>) {
    let [b, h] = c.dims::<2>();
    let p = position_in([b, h]);
    let new_c = output([b, h]);
    let new_h = output([b, h]);
    let (r, k) = (p[0], p[1]);
    let i = sigmoid(z[[r, k]]);
    let j = tanh(z[[r, k + h]]);
    let f = sigmoid(z[[r, k + 2 * h]] + forget_bias);
    let o = sigmoid(z[[r, k + 3 * h]]);
    let nc = c[[r, k]] * f + i * j;
    new_c[[r, k]] = nc;
    new_h[[r, k]] = tanh(nc) * o;
    (new_c, new_h)
}

/// The derived gradient of the one-operator LSTM cell on half tensors (every operation of the
/// backward kernels in f32, rounded once into the half type), on the interpreter, the C++
/// backend and CUDA validation, against central differences of the same cell in f64 on the
/// same (half) values: within 8 ulps of the half type (relative to max(|d|, 1)).
fn lstm_cell_half_gradient<T: Float>(of: fn(f64) -> T, value: fn(T) -> f64, ulp: f64) {
    let (b, h) = (2usize, 3usize);
    let half = |a: ArrayD<f64>| a.mapv(|v| value(of(v)));
    let z64 = half(values(&[b, 4 * h], 70, -2.0, 2.0));
    let c64 = half(values(&[b, h], 71, -1.0, 1.0));
    let dc64 = half(values(&[b, h], 72, -1.0, 1.0));
    let dh64 = half(values(&[b, h], 73, -1.0, 1.0));
    let lazy = |a: &ArrayD<f64>| Lazy::from(a.mapv(of));
    let (z, c) = (lazy(&z64), lazy(&c64));
    let (nc, nh) = lstm_cell_op(&z, &c, of(1.0));
    let grads = ovl::backward(&[(&nc, &lazy(&dc64)), (&nh, &lazy(&dh64))], &[&z, &c]).unwrap();
    // sum(new_c * dc + new_h * dh) in f64 on the interpreter.
    let loss = |z: &ArrayD<f64>, c: &ArrayD<f64>| -> f64 {
        let (nc, nh) = lstm_cell_op(Lazy::from(z.clone()), Lazy::from(c.clone()), 1.0);
        let (nc, nh): (ArrayD<f64>, ArrayD<f64>) =
            ovl::evaluate_with((&nc, &nh), &Options::interpreter()).unwrap();
        (nc * &dc64).sum() + (nh * &dh64).sum()
    };
    let step = 1e-4;
    for (name, options) in targets() {
        for (which, x) in [&z, &c].into_iter().enumerate() {
            let got: ArrayD<T> = ovl::evaluate_with(&grads.of(x).unwrap(), &options).unwrap();
            for j in 0..got.len() {
                let (mut zp, mut cp) = (z64.clone(), c64.clone());
                let (mut zm, mut cm) = (z64.clone(), c64.clone());
                let (p, m) = if which == 0 {
                    (&mut zp, &mut zm)
                } else {
                    (&mut cp, &mut cm)
                };
                p.as_slice_mut().unwrap()[j] += step;
                m.as_slice_mut().unwrap()[j] -= step;
                let numeric = (loss(&zp, &cp) - loss(&zm, &cm)) / (2.0 * step);
                let g = value(got.as_slice().unwrap()[j]);
                assert!(
                    (g - numeric).abs() <= 8.0 * ulp * numeric.abs().max(1.0),
                    "{name} {} input {which} [{j}]: {g} vs {numeric}",
                    std::any::type_name::<T>()
                );
            }
        }
    }
}

#[test]
fn lstm_cell_derived_gradients_on_half_tensors_match_central_differences() {
    use ovl::half::{bf16, f16};
    lstm_cell_half_gradient(f16::from_f64, |x| x.to_f64(), 2f64.powi(-10));
    lstm_cell_half_gradient(bf16::from_f64, |x| x.to_f64(), 2f64.powi(-7));
}

#[test]
fn lstm_cell_matches_central_differences() {
    check(
        "lstm_cell_op",
        &|xs| {
            let (c, h) = lstm_cell_op(&xs[0], &xs[1], 1.0);
            vec![c, h]
        },
        vec![
            values(&[2, 12], 6, -2.0, 2.0),
            values(&[2, 3], 7, -1.0, 1.0),
        ],
    );
}

/// Forward and derived backward of the one-operator LSTM cell run as one kernel.
#[test]
fn lstm_cell_forward_and_derived_backward_fuse_into_one_kernel() {
    let (b, h) = (4usize, 8usize);
    let z = Lazy::from(values(&[b, 4 * h], 8, -2.0, 2.0).mapv(|v| v as f32));
    let c = Lazy::from(values(&[b, h], 9, -1.0, 1.0).mapv(|v| v as f32));
    let (nc, nh) = lstm_cell_op(&z, &c, 1.0f32);
    let dc = Lazy::from(values(&[b, h], 10, -1.0, 1.0).mapv(|v| v as f32));
    let dh = Lazy::from(values(&[b, h], 11, -1.0, 1.0).mapv(|v| v as f32));
    let grads = ovl::backward(&[(&nc, &dc), (&nh, &dh)], &[&z, &c]).unwrap();
    let (dz, dcp) = (grads.of(&z).unwrap(), grads.of(&c).unwrap());
    let fusion = ovl::fusion((&nc, &nh, &dz, &dcp), 3).unwrap();
    println!("{}", fusion.report);
    assert_eq!(fusion.report.kernels_before, 2);
    assert_eq!(fusion.report.kernels_after, 1, "{}", fusion.report);
    for (name, options) in targets() {
        let (_, prof) = ovl::profile((&nc, &nh, &dz, &dcp), &options, 1).unwrap();
        assert_eq!(prof.kernel_count(), 1, "{name}");
    }
}

//! Gradients derived from an operator's IR (`ovl_ir::grad`): operators written without a
//! gradient, differentiated by `backward`, compared with central differences in f64 (computed
//! on the interpreter from forward evaluations only) and with the hand-written gradients of the
//! standard library, on the interpreter, the C++ backend and CUDA validation (every kernel
//! compiled by NVRTC and checked by ptxas, then run by the interpreter in the GPU's reduction
//! order: GPU execution does not run here); the constructs that are not differentiated are
//! errors naming the operator.

use ndarray::{ArrayD, IxDyn};
use ovl::prelude::*;
use ovl::{Construct, GradError};
use ovl_stdlib as ops;

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

// ---------------------------------------------------------------- the menu

/// Every differentiable unary and binary op of the table, in one elementwise operator.
#[operator]
fn every_op(x: Tensor<f64>, y: Tensor<f64>) -> (Tensor<f64>, Tensor<f64>) {
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
fn transpose_bias(x: Tensor<f64>, w: Tensor<f64>, b: Tensor<f64>) -> Tensor<f64> {
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
fn stencil(x: Tensor<f64>) -> Tensor<f64> {
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
fn stencil_with_guards() {
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
fn lstm_cell_op<T: Float>(z: Tensor<T>, c: Tensor<T>, forget_bias: T) -> (Tensor<T>, Tensor<T>) {
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

/// A counted loop summing into a variable: `sum_j sin(x[r, j]) * w[j]`.
#[operator]
fn row_sums(x: Tensor<f64>, w: Tensor<f64>) -> Tensor<f64> {
    let [rows, cols] = x.dims::<2>();
    let r = position_in([rows])[0];
    let out = output([rows]);
    let mut s = variable(0.0f64);
    for j in 0..cols {
        s += sin(x[[r, j]]) * w[[j]];
    }
    out[[r]] = s * s;
    out
}

#[test]
fn counted_loop_summing_into_a_variable() {
    check(
        "row_sums",
        &|xs| vec![row_sums(&xs[0], &xs[1])],
        vec![values(&[3, 4], 30, -1.5, 1.5), values(&[4], 31, -1.0, 1.0)],
    );
}

/// A row kernel: the mean by a sum accumulator, then a loop writing the row (the pattern of
/// the standard library's normalisations).
#[operator]
fn centered_tanh(x: Tensor<f64>) -> Tensor<f64> {
    let [rows, cols] = x.dims::<2>();
    let r = position_in([rows])[0];
    let out = output([rows, cols]);
    let mut total = sum_of(0.0f64);
    for j in 0..cols {
        total += x[[r, j]] * x[[r, j]];
    }
    let mean = total / cols as f64;
    for j in 0..cols {
        out[[r, j]] = tanh(x[[r, j]] - mean);
    }
    out
}

#[test]
fn sum_reduction_and_a_loop_writing_the_row() {
    check(
        "centered_tanh",
        &|xs| vec![centered_tanh(&xs[0])],
        vec![values(&[3, 5], 32, -1.5, 1.5)],
    );
}

/// A max reduction (the row's first element as the initial value) and a min one.
#[operator]
fn row_max_min(x: Tensor<f64>) -> Tensor<f64> {
    let [rows, cols] = x.dims::<2>();
    let r = position_in([rows])[0];
    let out = output([rows]);
    let mut m = max_of(x[[r, 0]]);
    let mut n = min_of(0.5f64);
    for j in 1..cols {
        m.update(sin(x[[r, j]]) * 2.0);
        n.update(x[[r, j]] * x[[r, j]]);
    }
    out[[r]] = m * n;
    out
}

#[test]
fn max_and_min_reductions() {
    check(
        "row_max_min",
        &|xs| vec![row_max_min(&xs[0])],
        vec![values(&[4, 5], 35, -1.5, 1.5)],
    );
    // Ties: the gradient goes to the last equal value in loop order, then to the initial
    // value (here the row's first element, read before the loop).
    let x = Lazy::from(
        ArrayD::from_shape_vec(
            IxDyn(&[2, 4]),
            vec![0.5, 0.25, 0.5, 0.5, 0.75, 0.5, 0.25, 0.1],
        )
        .unwrap(),
    );
    let ones = Lazy::from(ArrayD::from_elem(IxDyn(&[2]), 1.0));
    let y = row_max_tie(&x);
    let g = ovl::backward(&[(&y, &ones)], &[&x]).unwrap();
    for (name, options) in targets() {
        let got = ovl::evaluate_with(&g.of(&x).unwrap(), &options).unwrap();
        assert_eq!(
            got.as_slice().unwrap(),
            &[0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0],
            "{name}"
        );
    }
}

#[operator]
fn row_max_tie(x: Tensor<f64>) -> Tensor<f64> {
    let [rows, cols] = x.dims::<2>();
    let r = position_in([rows])[0];
    let out = output([rows]);
    let mut m = max_of(x[[r, 0]]);
    for j in 1..cols {
        m.update(x[[r, j]]);
    }
    out[[r]] = m;
    out
}

/// A valid 1-D convolution: `out[i] = sum_k w[k] * x[i + k]`, read in a loop at the worker's
/// position plus the loop's index (both gradients gathered), with an `if` inside the loop.
#[operator]
fn conv1d(x: Tensor<f64>, w: Tensor<f64>) -> Tensor<f64> {
    let [n] = x.dims::<1>();
    let [taps] = w.dims::<1>();
    let i = position_in([n - taps + 1])[0];
    let out = output([n - taps + 1]);
    let mut s = variable(0.0f64);
    for k in 0..taps {
        let v = x[[i + k]];
        if v > 0.0 {
            s += w[[k]] * v * v;
        } else {
            s += w[[k]] * sin(v);
        }
    }
    out[[i]] = tanh(s);
    out
}

#[test]
fn convolution_with_a_branch_in_the_loop() {
    check(
        "conv1d",
        &|xs| vec![conv1d(&xs[0], &xs[1])],
        vec![values(&[9], 33, -1.5, 1.5), values(&[3], 34, -1.0, 1.0)],
    );
}

/// Derived gradients export to TensorFlow like written ones: the gradient program of the
/// one-operator LSTM cell is one kernel, and running it (as the TensorFlow kernel does) gives
/// what `evaluate` gives.
#[test]
fn derived_gradients_export_as_the_gradient_program() {
    let (b, h) = (2usize, 3usize);
    let z = ovl::placeholder::<f64>("z", &[b, 4 * h]);
    let c = ovl::placeholder::<f64>("c", &[b, h]);
    let (nc, nh) = lstm_cell_op(&z, &c, 1.0);
    let dc = ovl::placeholder::<f64>("dc", &[b, h]);
    let dh = ovl::placeholder::<f64>("dh", &[b, h]);
    let grads = ovl::backward(&[(&nc, &dc), (&nh, &dh)], &[&z, &c]).unwrap();
    let (gz, gc) = (grads.of(&z).unwrap(), grads.of(&c).unwrap());
    let bundle = ovl::as_tensorflow((&z, &c), (&nc, &nh))
        .gradient((&dc, &dh), (&gz, &gc))
        .build()
        .unwrap();
    assert_eq!(bundle.gradient_kernel_count(), 1);
    let data = [
        values(&[b, 4 * h], 60, -2.0, 2.0),
        values(&[b, h], 61, -1.0, 1.0),
        values(&[b, h], 62, -1.0, 1.0),
        values(&[b, h], 63, -1.0, 1.0),
    ];
    let host = |a: &ArrayD<f64>| {
        ovl::HostTensor::from_vec(a.shape(), a.iter().copied().collect()).unwrap()
    };
    let got = ovl::program::run_program(
        bundle.gradient.as_ref().unwrap(),
        data.iter().map(host).collect(),
        &Options::cpu(),
    )
    .unwrap();
    // The same gradients on host data.
    let zl = Lazy::from(data[0].clone());
    let cl = Lazy::from(data[1].clone());
    let (nc, nh) = lstm_cell_op(&zl, &cl, 1.0);
    let (dcl, dhl) = (Lazy::from(data[2].clone()), Lazy::from(data[3].clone()));
    let g = ovl::backward(&[(&nc, &dcl), (&nh, &dhl)], &[&zl, &cl]).unwrap();
    for (k, x) in [&zl, &cl].into_iter().enumerate() {
        let want = ovl::evaluate_with(&g.of(x).unwrap(), &Options::cpu()).unwrap();
        assert_eq!(got[k].as_slice::<f64>().unwrap(), want.as_slice().unwrap());
    }
}

/// A graph of several operators without gradients (transposed and broadcast reads, a row
/// kernel, min/max reductions): the backward graph of derived operators, unfused and fused,
/// matches central differences.
#[test]
fn a_graph_of_derived_gradients_fused_and_unfused() {
    let f: &Forward = &|xs| {
        let t = transpose_bias(&xs[0], &xs[1], &xs[2]);
        let c = centered_tanh(&t);
        vec![row_max_min(&c), stencil(&xs[2])]
    };
    let xs = vec![
        values(&[3, 4], 70, -1.0, 1.0),
        values(&[4, 3], 71, -1.0, 1.0),
        values(&[4], 72, -1.0, 1.0),
    ];
    let lazies: Vec<Lazy<f64>> = xs.iter().map(|x| Lazy::from(x.clone())).collect();
    let seeds: Vec<ArrayD<f64>> = f(&lazies)
        .iter()
        .enumerate()
        .map(|(o, y)| values(y.shape(), 73 + o as u64, -1.0, 1.0))
        .collect();
    let want = numeric(f, &xs, &seeds);
    for (target, options) in targets() {
        for level in [0u8, 3] {
            let got = derived(f, &xs, &seeds, &options.clone().with_opt_level(level)).unwrap();
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                let what = format!("graph on {target} at opt level {level}, input {i}");
                assert_close(&what, g, w, 1e-6);
            }
        }
    }
}

// ---------------------------------------------------------------- vs hand-written gradients

#[operator]
fn tanh_bias(x: Tensor<f64>, b: Tensor<f64>) -> Tensor<f64> {
    let [r, c] = x.dims::<2>();
    let p = position_in([r, c]);
    let out = output([r, c]);
    out[[p[0], p[1]]] = tanh(x[[p[0], p[1]]] + b[[p[1]]]) * sqrt(exp(x[[p[0], p[1]]]));
    out
}

#[test]
fn derived_gradients_equal_the_stdlib_hand_written_ones() {
    let x = values(&[3, 5], 12, -1.0, 1.0);
    let b = values(&[5], 13, -1.0, 1.0);
    let seed = values(&[3, 5], 14, -1.0, 1.0);
    let (xl, bl, sl) = (
        Lazy::from(x.clone()),
        Lazy::from(b.clone()),
        Lazy::from(seed.clone()),
    );
    let by_stdlib = ops::mul(ops::tanh(ops::add(&xl, &bl)), ops::sqrt(ops::exp(&xl)));
    let derived = tanh_bias(&xl, &bl);
    let hand = ovl::backward(&[(&by_stdlib, &sl)], &[&xl, &bl]).unwrap();
    let auto = ovl::backward(&[(&derived, &sl)], &[&xl, &bl]).unwrap();
    for (name, options) in targets() {
        for t in [&xl, &bl] {
            let h = ovl::evaluate_with(&hand.of(t).unwrap(), &options).unwrap();
            let a = ovl::evaluate_with(&auto.of(t).unwrap(), &options).unwrap();
            assert_close(&format!("tanh_bias on {name}"), &a, &h, 1e-12);
        }
    }
}

/// A written gradient wins over the derived one; `gradient = auto` derives explicitly.
fn ten_times(_x: Lazy<f64>, dy: Lazy<f64>) -> Lazy<f64> {
    ops::mul(&dy, Lazy::from(ArrayD::from_elem(IxDyn(&[3]), 10.0)))
}

#[operator(gradient = ten_times)]
fn square_written(x: Tensor<f64>) -> Tensor<f64> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = x[[i]] * x[[i]];
    out
}

#[operator(gradient = auto)]
fn square_auto(x: Tensor<f64>) -> Tensor<f64> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = x[[i]] * x[[i]];
    out
}

#[test]
fn a_written_gradient_wins_and_auto_derives() {
    let x = Lazy::from(ArrayD::from_shape_vec(IxDyn(&[3]), vec![1.0, -2.0, 0.5]).unwrap());
    let ones = Lazy::from(ArrayD::from_elem(IxDyn(&[3]), 1.0));
    let y = square_written(&x);
    let g = ovl::backward(&[(&y, &ones)], &[&x]).unwrap();
    let g = ovl::evaluate(&g.of(&x).unwrap()).unwrap();
    assert_eq!(g.as_slice().unwrap(), &[10.0, 10.0, 10.0]);
    let y = square_auto(&x);
    let g = ovl::backward(&[(&y, &ones)], &[&x]).unwrap();
    let g = ovl::evaluate(&g.of(&x).unwrap()).unwrap();
    assert_eq!(g.as_slice().unwrap(), &[2.0, -4.0, 1.0]);
}

#[operator]
fn row_sum_op(x: Tensor<f64>) -> Tensor<f64> {
    let [rows, cols] = x.dims::<2>();
    let r = position_in([rows])[0];
    let out = output([rows]);
    let mut total = sum_of(0.0f64);
    for j in 0..cols {
        total += x[[r, j]];
    }
    out[[r]] = total;
    out
}

#[test]
fn derived_sum_gradient_equals_the_stdlib_one() {
    let x = Lazy::from(values(&[3, 6], 40, -1.0, 1.0));
    let seed = Lazy::from(values(&[3], 41, -1.0, 1.0));
    let hand = ovl::backward(&[(&ops::sum(&x, 1), &seed)], &[&x]).unwrap();
    let auto = ovl::backward(&[(&row_sum_op(&x), &seed)], &[&x]).unwrap();
    for (name, options) in targets() {
        let h = ovl::evaluate_with(&hand.of(&x).unwrap(), &options).unwrap();
        let a = ovl::evaluate_with(&auto.of(&x).unwrap(), &options).unwrap();
        assert_close(&format!("row sum on {name}"), &a, &h, 0.0);
    }
}

#[operator]
fn tanh_op(x: Tensor<f64>) -> Tensor<f64> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = tanh(x[[i]]);
    out
}

/// The derived gradient operators are operators like any other: differentiating them again
/// gives second derivatives.
#[test]
fn second_derivatives() {
    let xv = values(&[5], 42, -1.5, 1.5);
    let sv = values(&[5], 43, -1.0, 1.0);
    let (x, seed) = (Lazy::from(xv.clone()), Lazy::from(sv.clone()));
    let y = tanh_op(&x);
    let g = ovl::backward(&[(&y, &seed)], &[&x])
        .unwrap()
        .of(&x)
        .unwrap();
    let ones = Lazy::from(ArrayD::from_elem(IxDyn(&[5]), 1.0));
    let gg = ovl::backward(&[(&g, &ones)], &[&x, &seed]).unwrap();
    // g = s (1 - t^2): dg/dx = -2 s t (1 - t^2), dg/ds = 1 - t^2.
    let t = xv.mapv(f64::tanh);
    let want_x = (&sv * &t * &t.mapv(|v| 1.0 - v * v)).mapv(|v| -2.0 * v);
    let want_s = t.mapv(|v| 1.0 - v * v);
    for (name, options) in targets() {
        let gx = ovl::evaluate_with(&gg.of(&x).unwrap(), &options).unwrap();
        let gs = ovl::evaluate_with(&gg.of(&seed).unwrap(), &options).unwrap();
        assert_close(&format!("d2/dx2 on {name}"), &gx, &want_x, 1e-12);
        assert_close(&format!("d2/dx ds on {name}"), &gs, &want_s, 1e-12);
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

/// Second derivatives through gathered gradients (broadcast, transpose, stencil) and loops.
#[test]
fn second_derivatives_through_gathers_and_loops() {
    check(
        "gradient of transpose_bias",
        &gradient_of(&|xs| vec![transpose_bias(&xs[0], &xs[1], &xs[2])]),
        vec![
            values(&[2, 3], 50, -1.0, 1.0),
            values(&[3, 2], 51, -1.0, 1.0),
            values(&[3], 52, -1.0, 1.0),
        ],
    );
    check(
        "gradient of stencil",
        &gradient_of(&|xs| vec![stencil(&xs[0])]),
        vec![values(&[6], 53, -1.5, 1.5)],
    );
    check(
        "gradient of centered_tanh",
        &gradient_of(&|xs| vec![centered_tanh(&xs[0])]),
        vec![values(&[2, 4], 54, -1.5, 1.5)],
    );
}

// ---------------------------------------------------------------- errors

#[operator]
fn row_products(x: Tensor<f64>) -> Tensor<f64> {
    let [rows, cols] = x.dims::<2>();
    let r = position_in([rows])[0];
    let out = output([rows]);
    let mut p = variable(1.0f64);
    for j in 0..cols {
        p = p * x[[r, j]];
    }
    out[[r]] = p;
    out
}

#[operator]
fn row_product(x: Tensor<f64>) -> Tensor<f64> {
    let [rows, cols] = x.dims::<2>();
    let r = position_in([rows])[0];
    let out = output([rows]);
    let mut p = product_of(1.0f64);
    for j in 0..cols {
        p *= x[[r, j]];
    }
    out[[r]] = p;
    out
}

#[operator]
fn halve_until_small(x: Tensor<f64>) -> Tensor<f64> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    let mut v = variable(x[[i]]);
    while v > 1.0 {
        v = v * 0.5;
    }
    out[[i]] = v;
    out
}

#[operator]
fn gather_rows(table: Tensor<f64>, idx: Tensor<i64>) -> Tensor<f64> {
    let [n] = idx.dims::<1>();
    let i = position_in([n])[0];
    let out = output([n]);
    out[[i]] = table[[idx[[i]]]] * 2.0;
    out
}

#[operator]
fn scatter(x: Tensor<f64>, idx: Tensor<i64>) -> Tensor<f64> {
    let [n] = x.dims::<1>();
    let i = position_in([n])[0];
    let out = output([n]);
    out[[idx[[i]]]] = x[[i]];
    out
}

fn underivable(err: GradError) -> ovl::DeriveError {
    match err {
        GradError::Underivable(e) => e,
        other => panic!("expected an underivable operator, got {other}"),
    }
}

#[test]
fn constructs_that_are_not_differentiated_are_errors_naming_the_operator_and_line() {
    let x = Lazy::from(values(&[3, 4], 20, 0.5, 3.0));
    let seed = Lazy::from(values(&[3], 21, -1.0, 1.0));
    let y = row_products(&x);
    let e = underivable(ovl::backward(&[(&y, &seed)], &[&x]).unwrap_err());
    assert_eq!(e.construct, Construct::LoopCarried);
    assert_eq!(e.operator, "row_products");
    let msg = e.to_string();
    assert!(
        msg.contains("row_products")
            && msg.contains("autodiff_derived.rs:")
            && msg.contains("loop"),
        "{msg}"
    );
    let y = row_product(&x);
    let e = underivable(ovl::backward(&[(&y, &seed)], &[&x]).unwrap_err());
    assert_eq!(
        e.construct,
        Construct::Reduction {
            combiner: "product"
        }
    );

    let v = Lazy::from(values(&[3], 22, 0.5, 3.0));
    let y = halve_until_small(&v);
    let e = underivable(ovl::backward(&[(&y, &seed)], &[&v]).unwrap_err());
    assert_eq!(e.construct, Construct::WhileLoop);

    let table = Lazy::from(values(&[5], 23, -1.0, 1.0));
    let idx = Lazy::from(ndarray::array![4i64, 0, 2].into_dyn());
    let y = gather_rows(&table, &idx);
    let e = underivable(ovl::backward(&[(&y, &seed)], &[&table]).unwrap_err());
    assert_eq!(e.construct, Construct::DataDependentRead { input: 0 });

    let y = scatter(&v, &idx);
    let e = underivable(ovl::backward(&[(&y, &seed)], &[&v]).unwrap_err());
    assert_eq!(e.construct, Construct::DataDependentWrite { output: 0 });
}

/// Integer inputs get no gradient, and an operator whose float path does not reach an input
/// gives it none either.
#[operator]
fn scaled_by_count(x: Tensor<f64>, n: Tensor<i64>) -> Tensor<f64> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = x[[i]] * n[[i]].cast::<f64>();
    out
}

#[test]
fn integer_inputs_get_no_gradient() {
    let x = Lazy::from(ArrayD::from_shape_vec(IxDyn(&[3]), vec![1.0, 2.0, 3.0]).unwrap());
    let n = Lazy::from(ndarray::array![2i64, -1, 4].into_dyn());
    let ones = Lazy::from(ArrayD::from_elem(IxDyn(&[3]), 1.0));
    let y = scaled_by_count(&x, &n);
    let g = ovl::backward(&[(&y, &ones)], &[&x]).unwrap();
    let g = ovl::evaluate(&g.of(&x).unwrap()).unwrap();
    assert_eq!(g.as_slice().unwrap(), &[2.0, -1.0, 4.0]);
}

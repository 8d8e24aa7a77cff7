//! Counted loops, sum and min/max reductions, a convolution.

use super::*;

/// A counted loop summing into a variable: `sum_j sin(x[r, j]) * w[j]`.
#[operator]
pub fn row_sums(x: Tensor<f64>, w: Tensor<f64>) -> Tensor<f64> {
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
pub fn centered_tanh(x: Tensor<f64>) -> Tensor<f64> {
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
    // Each worker owns its row: the gradient sums it in a local buffer on the forward's
    // workgroup, so forward and backward fuse.
    let x = Lazy::from(values(&[3, 5], 37, -1.5, 1.5));
    let seed = Lazy::from(values(&[3, 5], 38, -1.0, 1.0));
    let y = centered_tanh(&x);
    let g = ovl::backward(&[(&y, &seed)], &[&x])
        .unwrap()
        .of(&x)
        .unwrap();
    let fusion = ovl::fusion((&y, &g), 3).unwrap();
    println!("{}", fusion.report);
    assert_eq!(
        (fusion.report.kernels_before, fusion.report.kernels_after),
        (2, 1),
        "{}",
        fusion.report
    );
}

/// A max reduction (the row's first element as the initial value) and a min one.
#[operator]
pub fn row_max_min(x: Tensor<f64>) -> Tensor<f64> {
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

/// A softmax whose exponentials live in a worker-local row buffer (`zeros`), written in one
/// loop and read in the next.
#[operator]
fn softmax_local(x: Tensor<f64>) -> Tensor<f64> {
    let [rows, cols] = x.dims::<2>();
    let r = position_in([rows])[0];
    let out = output([rows, cols]);
    let e = zeros::<f64>([cols]);
    let mut total = variable(0.0f64);
    for j in 0..cols {
        e[[j]] = exp(x[[r, j]]);
        total += e[[j]];
    }
    for j in 0..cols {
        out[[r, j]] = e[[j]] / total;
    }
    out
}

#[test]
fn a_local_tensor_written_in_one_loop_and_read_in_the_next() {
    check(
        "softmax_local",
        &|xs| vec![softmax_local(&xs[0])],
        vec![values(&[3, 5], 39, -1.5, 1.5)],
    );
}

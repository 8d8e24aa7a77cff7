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

/// An embedding lookup: row `idx[i]` of `table`, through `tanh`.
#[operator]
fn embed(table: Tensor<f64>, idx: Tensor<i64>) -> Tensor<f64> {
    let [n] = idx.dims::<1>();
    let [_, width] = table.dims::<2>();
    let p = position_in([n, width]);
    let out = output([n, width]);
    out[[p[0], p[1]]] = tanh(table[[idx[[p[0]]], p[1]]]);
    out
}

/// A 1-D gather read twice per worker, once at a data index and once at the worker's own
/// element: `x[idx[i]] * x[i]`.
#[operator]
fn gather_times_own(x: Tensor<f64>, idx: Tensor<i64>) -> Tensor<f64> {
    let [n] = idx.dims::<1>();
    let i = position_in([n])[0];
    let out = output([n]);
    out[[i]] = x[[idx[[i]]]] * x[[i]];
    out
}

/// A gather inside a loop: `sum_j w[j] * x[idx[i, j]]`.
#[operator]
fn gathered_sums(x: Tensor<f64>, idx: Tensor<i64>, w: Tensor<f64>) -> Tensor<f64> {
    let [n, k] = idx.dims::<2>();
    let i = position_in([n])[0];
    let out = output([n]);
    let mut s = sum_of(0.0f64);
    for j in 0..k {
        s += w[[j]] * x[[idx[[i, j]]]];
    }
    out[[i]] = s;
    out
}

/// Nearest-neighbour upsampling by 2, `sin(x[i / 2])`: an index that is not affine (a
/// division), so the gradient is a scatter-add too.
#[operator]
fn upsample2(x: Tensor<f64>) -> Tensor<f64> {
    let [n] = x.dims::<1>();
    let i = position_in([2 * n])[0];
    let out = output([2 * n]);
    out[[i]] = sin(x[[i / 2]]);
    out
}

/// Gathers (reads at indices computed from data) get their gradient by a scatter-add in a
/// defined order: repeated indices sum, elements never read get 0, the same on every backend
/// and within rounding of a scatter-add computed here.
#[test]
fn gathers_are_differentiated_by_a_scatter_add() {
    let table = values(&[6, 5], 60, -1.5, 1.5);
    let rows = ndarray::array![4i64, 0, 4, 2, 4, 0, 1];
    let seed = values(&[7, 5], 61, -1.0, 1.0);
    let mut want = ArrayD::<f64>::zeros(IxDyn(&[6, 5]));
    for (i, &r) in rows.iter().enumerate() {
        for j in 0..5 {
            let t = table[[r as usize, j]].tanh();
            want[[r as usize, j]] += seed[[i, j]] * (1.0 - t * t);
        }
    }
    let (t, s) = (Lazy::from(table.clone()), Lazy::from(seed.clone()));
    let y = embed(&t, Lazy::from(rows.clone().into_dyn()));
    let g = ovl::backward(&[(&y, &s)], &[&t]).unwrap();
    let mut results = Vec::new();
    for (name, options) in targets() {
        let got = ovl::evaluate_with(&g.of(&t).unwrap(), &options).unwrap();
        assert_close(&format!("embed on {name}"), &got, &want, 1e-12);
        assert_eq!(got[[3, 2]], 0.0, "row 3 is never read");
        results.push(got);
    }
    for r in &results[1..] {
        assert_eq!(r, &results[0], "every backend sums in the same order");
    }

    // Two reads of one input, one gathered.
    let x = values(&[6], 62, -1.0, 1.0);
    let idx = ndarray::array![5i64, 5, 0, 3, 5, 1];
    let seed = values(&[6], 63, -1.0, 1.0);
    let mut want = ArrayD::<f64>::zeros(IxDyn(&[6]));
    for (i, &k) in idx.iter().enumerate() {
        want[[k as usize]] += seed[[i]] * x[[i]];
        want[[i]] += seed[[i]] * x[[k as usize]];
    }
    let (xl, sl) = (Lazy::from(x.clone()), Lazy::from(seed.clone()));
    let y = gather_times_own(&xl, Lazy::from(idx.into_dyn()));
    let g = ovl::backward(&[(&y, &sl)], &[&xl]).unwrap();
    for (name, options) in targets() {
        let got = ovl::evaluate_with(&g.of(&xl).unwrap(), &options).unwrap();
        assert_close(&format!("gather_times_own on {name}"), &got, &want, 1e-12);
    }

    // An index computed by a division.
    check(
        "upsample2",
        &|xs| vec![upsample2(&xs[0])],
        vec![values(&[5], 66, -1.0, 1.0)],
    );

    // A gather in a loop, and the loop's weights (read at affine indices) beside it.
    check(
        "gathered_sums",
        &|xs| {
            let idx = Lazy::from(
                ndarray::array![[1i64, 3, 3], [0, 2, 1], [3, 3, 3], [2, 0, 1]].into_dyn(),
            );
            vec![gathered_sums(&xs[0], &idx, &xs[1])]
        },
        vec![values(&[4], 64, -1.0, 1.0), values(&[3], 65, -1.0, 1.0)],
    );
}

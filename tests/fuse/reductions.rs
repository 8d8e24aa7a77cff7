//! Accumulators (`sum_of`, `product_of`, `min_of`, `max_of`): reductions over a staged loop in
//! the order `proto/ovl.proto` defines (16 lanes, iteration t into lane t % 16, lanes folded
//! pairwise, then combined into the accumulator). Every backend must give exactly the values of
//! that order, computed here independently in plain Rust.

use ndarray::{Array1, Array2};
use ovl::prelude::*;

/// The reference: `init ⊕ fold(lanes)` with lane l holding the values of iterations l, l+16, ...
fn lane_order<T: Copy>(init: T, identity: T, values: &[T], op: impl Fn(T, T) -> T) -> T {
    lanes_order(16, init, identity, values, op)
}

/// [`lane_order`] over `count` lanes (the CUDA order of a row kernel, `ovl_ir::cooperative`).
fn lanes_order<T: Copy>(
    count: usize,
    init: T,
    identity: T,
    values: &[T],
    op: impl Fn(T, T) -> T,
) -> T {
    if values.is_empty() {
        return init;
    }
    let mut lanes = vec![identity; count];
    for (t, &v) in values.iter().enumerate() {
        lanes[t % count] = op(lanes[t % count], v);
    }
    let mut level: Vec<T> = lanes.to_vec();
    while level.len() > 1 {
        level = level.chunks(2).map(|p| op(p[0], p[1])).collect();
    }
    op(init, level[0])
}

#[operator]
fn row_stats(x: Tensor<f32>) -> (Tensor<f32>, Tensor<f32>, Tensor<f32>, Tensor<f32>) {
    let [rows, cols] = x.dims::<2>();
    let r = position_in([rows])[0];
    let sum = output::<f32>([rows]);
    let prod = output::<f32>([rows]);
    let lo = output::<f32>([rows]);
    let hi = output::<f32>([rows]);
    let mut s = sum_of(0.0f32);
    let mut p = product_of(1.0f32);
    let mut mn = min_of(f32::INFINITY);
    let mut mx = max_of(f32::NEG_INFINITY);
    for j in 0..cols {
        let v = x[[r, j]];
        s += v;
        p *= v;
        mn.update(v);
        mx.update(v);
    }
    sum[[r]] = s;
    prod[[r]] = p;
    lo[[r]] = mn;
    hi[[r]] = mx;
    (sum, prod, lo, hi)
}

fn targets() -> Vec<(&'static str, Options)> {
    vec![
        ("interpreter", Options::interpreter()),
        ("cpu", Options::cpu()),
    ]
}

fn data(rows: usize, cols: usize) -> Array2<f32> {
    Array2::from_shape_fn((rows, cols), |(r, c)| {
        let k = (r * 131 + c * 17) % 97;
        (k as f32 - 48.0) * 0.37 + 1.0 / (c as f32 + 1.0)
    })
}

#[test]
fn float_sums_products_minima_and_maxima_follow_the_lane_order_exactly() {
    // Rows of 0, 1, 7, 8, 9, 15, 16, 17, 33 and 1000 elements: empty, partial and many blocks of
    // lanes.
    for cols in [0usize, 1, 7, 8, 9, 15, 16, 17, 33, 1000] {
        let x = data(3, cols);
        for (name, options) in targets() {
            let (s, p, lo, hi) = ovl::evaluate_with(row_stats(&x), &options)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            for r in 0..3 {
                let row: Vec<f32> = x.row(r).to_vec();
                let want_s = lane_order(0.0f32, 0.0, &row, |a, b| a + b);
                let want_p = lane_order(1.0f32, 1.0, &row, |a, b| a * b);
                let want_lo = lane_order(f32::INFINITY, f32::INFINITY, &row, f32::min);
                let want_hi = lane_order(f32::NEG_INFINITY, f32::NEG_INFINITY, &row, f32::max);
                assert_eq!(
                    s[[r]].to_bits(),
                    want_s.to_bits(),
                    "{name} sum, {cols} cols"
                );
                assert_eq!(
                    p[[r]].to_bits(),
                    want_p.to_bits(),
                    "{name} product, {cols} cols"
                );
                assert_eq!(
                    lo[[r]].to_bits(),
                    want_lo.to_bits(),
                    "{name} min, {cols} cols"
                );
                assert_eq!(
                    hi[[r]].to_bits(),
                    want_hi.to_bits(),
                    "{name} max, {cols} cols"
                );
            }
        }
    }
}

#[test]
fn nan_propagates_through_sums_and_never_wins_a_min_or_max() {
    let mut x = data(2, 20);
    x[[0, 5]] = f32::NAN;
    for (name, options) in targets() {
        let (s, p, lo, hi) = ovl::evaluate_with(row_stats(&x), &options).unwrap();
        assert!(s[[0]].is_nan() && p[[0]].is_nan(), "{name}");
        let row: Vec<f32> = x.row(0).to_vec();
        let finite: Vec<f32> = row.iter().copied().filter(|v| !v.is_nan()).collect();
        let fmin = finite.iter().copied().fold(f32::INFINITY, f32::min);
        let fmax = finite.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        assert_eq!((lo[[0]], hi[[0]]), (fmin, fmax), "{name}");
        assert!(!s[[1]].is_nan(), "{name}");
    }
}

#[operator]
fn wrapping_sum(x: Tensor<i8>, start: i64, step: i64) -> Tensor<i8> {
    let [rows, cols] = x.dims::<2>();
    let r = position_in([rows])[0];
    let out = output::<i8>([rows]);
    let mut s = sum_of(x[[r, 0]]);
    for j in (start..cols as i64).step_by(step as usize) {
        s += x[[r, j]];
    }
    out[[r]] = s;
    out
}

#[test]
fn integer_sums_wrap_and_strided_loops_use_their_own_iterations() {
    let x = Array2::from_shape_fn((4, 50), |(r, c)| ((r * 37 + c * 11) % 251) as i8);
    for (start, step) in [(0i64, 1i64), (1, 3), (5, 7)] {
        for (name, options) in targets() {
            let got = ovl::evaluate_with(&wrapping_sum(&x, start, step), &options).unwrap();
            for r in 0..4 {
                let values: Vec<i8> = (start as usize..50)
                    .step_by(step as usize)
                    .map(|c| x[[r, c]])
                    .collect();
                let want = lane_order(x[[r, 0]], 0, &values, i8::wrapping_add);
                assert_eq!(got[[r]], want, "{name} start {start} step {step} row {r}");
            }
        }
    }
}

/// Mean and variance of each row in one pass (two accumulators in one loop).
#[operator]
fn mean_var(x: Tensor<f64>) -> (Tensor<f64>, Tensor<f64>) {
    let [rows, cols] = x.dims::<2>();
    let r = position_in([rows])[0];
    let mean = output::<f64>([rows]);
    let var = output::<f64>([rows]);
    let mut s = sum_of(0.0f64);
    let mut sq = sum_of(0.0f64);
    for j in 0..cols {
        let v = x[[r, j]];
        s += v;
        sq += v * v;
    }
    let m = s / cols as f64;
    mean[[r]] = m;
    var[[r]] = sq / cols as f64 - m * m;
    (mean, var)
}

#[test]
fn several_accumulators_share_one_loop() {
    let x = Array2::from_shape_fn((5, 37), |(r, c)| (r as f64 - c as f64 * 0.25).sin());
    for (name, options) in targets() {
        let (mean, var) = ovl::evaluate_with(mean_var(&x), &options).unwrap();
        for r in 0..5 {
            let row: Vec<f64> = x.row(r).to_vec();
            let s = lane_order(0.0, 0.0, &row, |a, b| a + b);
            let sqs: Vec<f64> = row.iter().map(|v| v * v).collect();
            let sq = lane_order(0.0, 0.0, &sqs, |a, b| a + b);
            let m = s / 37.0;
            assert_eq!(mean[[r]], m, "{name}");
            assert_eq!(var[[r]], sq / 37.0 - m * m, "{name}");
        }
    }
}

#[operator]
fn update_outside_a_loop(x: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    let mut s = sum_of(0.0f32);
    s += x[[i]];
    out[[i]] = s;
    out
}

#[operator]
fn read_inside_the_loop(x: Tensor<f32>) -> Tensor<f32> {
    let [rows, cols] = x.dims::<2>();
    let r = position_in([rows])[0];
    let out = output_like(&x);
    let mut s = sum_of(0.0f32);
    for j in 0..cols {
        s += x[[r, j]];
        out[[r, j]] = s;
    }
    out
}

#[operator]
fn multiply_into_a_sum(x: Tensor<f32>) -> Tensor<f32> {
    let [rows, cols] = x.dims::<2>();
    let r = position_in([rows])[0];
    let out = output::<f32>([rows]);
    let mut s = sum_of(0.0f32);
    for j in 0..cols {
        s *= x[[r, j]];
    }
    out[[r]] = s;
    out
}

fn trace_error_of<T: ovl::prelude::Scalar>(y: Lazy<T>) -> String {
    let e = ovl::evaluate(&y).expect_err("a misuse of an accumulator");
    let m = e.to_string();
    assert!(
        m.contains("tests/fuse/reductions.rs:"),
        "names the line: {m}"
    );
    m
}

#[test]
fn misuses_are_errors_naming_the_line() {
    let v = Array1::from(vec![1.0f32, 2.0]);
    let m = trace_error_of(update_outside_a_loop(&v));
    assert!(m.contains("inside a staged `for` loop"), "{m}");
    let x = Array2::<f32>::ones((2, 3));
    let m = trace_error_of(read_inside_the_loop(&x));
    assert!(m.contains("read inside the loop that updates it"), "{m}");
    let m = trace_error_of(multiply_into_a_sum(&x));
    assert!(m.contains("`*=` on a sum accumulator"), "{m}");
}

#[test]
fn the_cuda_backend_compiles_reductions() {
    let x = data(3, 40);
    match ovl::cuda::nvrtc_status() {
        Ok(_) => {
            // Values in the CUDA order: a row of 40 is reduced by a warp (32 lanes).
            let (s, ..) = ovl::evaluate_with(row_stats(&x), &Options::cuda_validate())
                .unwrap_or_else(|e| panic!("{e}"));
            let want = lanes_order(32, 0.0f32, 0.0, &x.row(0).to_vec(), |a, b| a + b);
            assert_eq!(s[[0]].to_bits(), want.to_bits());
            let lanes = lane_order(0.0f32, 0.0, &x.row(0).to_vec(), |a, b| a + b);
            let (c, ..) = ovl::evaluate_with(row_stats(&x), &Options::interpreter()).unwrap();
            assert_eq!(c[[0]].to_bits(), lanes.to_bits());
        }
        Err(e) => eprintln!("reductions: the CUDA compile check DID NOT RUN (no NVRTC): {e}"),
    }
}

#[test]
fn the_ir_text_names_the_combiner() {
    let x = data(2, 4);
    let graph = ovl::graph(row_stats(&x).0).unwrap();
    let text = ovl::ir_tools::to_text(&graph.dag.operators[0]);
    assert!(text.contains("accumulator sum from"), "{text}");
    assert!(text.contains("accumulator max from"), "{text}");
    assert!(text.contains("accumulate %"), "{text}");
}

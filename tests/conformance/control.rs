//! Control flow, variables, local tensors, workgroups, multiple outputs, data-dependent indices.

use super::support::eval;
use ndarray::{Array1, Array2, Array3};
use ovl::prelude::*;

/// if / else if / else on staged conditions, with `&&`, `||` and `!`.
#[operator]
pub fn classify(x: Tensor<f64>) -> Tensor<i32> {
    let i = position_in(x.shape())[0];
    let out = output(x.shape());
    let v = x[[i]];
    if isnan(v) {
        out[[i]] = -1;
    } else if v < 0.0 && v > -10.0 {
        out[[i]] = 1;
    } else if v == 0.0 || !(v < 100.0) {
        out[[i]] = 2;
    } else {
        out[[i]] = 3;
    }
    out
}

pub fn if_else_chain(options: &Options) {
    let xs = vec![
        f64::NAN,
        -5.0,
        -10.0,
        0.0,
        -0.0,
        100.0,
        5.0,
        f64::INFINITY,
        -20.0,
    ];
    let got = eval(&classify(Array1::from(xs.clone())), options);
    let expected: Vec<i32> = xs
        .iter()
        .map(|&v| {
            if v.is_nan() {
                -1
            } else if v < 0.0 && v > -10.0 {
                1
            } else if v == 0.0 || v >= 100.0 {
                2
            } else {
                3
            }
        })
        .collect();
    assert_eq!(got.iter().copied().collect::<Vec<_>>(), expected);
}

/// Comparisons on every integer dtype yield bool tensors.
#[operator]
#[allow(clippy::type_complexity)]
pub fn compare_all<T: Num>(
    a: Tensor<T>,
    b: Tensor<T>,
) -> (
    Tensor<bool>,
    Tensor<bool>,
    Tensor<bool>,
    Tensor<bool>,
    Tensor<bool>,
    Tensor<bool>,
) {
    let i = position_in(a.shape())[0];
    let n = a.shape();
    let o = (
        output(n),
        output(n),
        output(n),
        output(n),
        output(n),
        output(n),
    );
    let (x, y) = (a[[i]], b[[i]]);
    o.0[[i]] = x < y;
    o.1[[i]] = x <= y;
    o.2[[i]] = x > y;
    o.3[[i]] = x >= y;
    o.4[[i]] = x == y;
    o.5[[i]] = x != y;
    o
}

pub fn comparisons<T: super::support::Reference + Num + PartialOrd>(options: &Options) {
    let (a, b) = super::support::pairs::<T>();
    let o = compare_all(Array1::from(a.clone()), Array1::from(b.clone()));
    let r = ovl::evaluate_with((&o.0, &o.1, &o.2, &o.3, &o.4, &o.5), options).unwrap();
    for i in 0..a.len() {
        let (x, y) = (a[i], b[i]);
        let expected = [x < y, x <= y, x > y, x >= y, x == y, x != y];
        let got = [r.0[[i]], r.1[[i]], r.2[[i]], r.3[[i]], r.4[[i]], r.5[[i]]];
        assert_eq!(got, expected, "comparisons of {x:?} and {y:?}");
    }
}

/// Logic on bool tensors.
#[operator]
pub fn logic(
    a: Tensor<bool>,
    b: Tensor<bool>,
) -> (Tensor<bool>, Tensor<bool>, Tensor<bool>, Tensor<bool>) {
    let i = position_in(a.shape())[0];
    let o = (
        output_like(&a),
        output_like(&a),
        output_like(&a),
        output_like(&a),
    );
    o.0[[i]] = a[[i]] && b[[i]];
    o.1[[i]] = a[[i]] || b[[i]];
    o.2[[i]] = !a[[i]];
    o.3[[i]] = select(a[[i]], b[[i]], !b[[i]]);
    o
}

pub fn bool_logic(options: &Options) {
    let a = vec![false, false, true, true];
    let b = vec![false, true, false, true];
    let o = logic(Array1::from(a.clone()), Array1::from(b.clone()));
    let r = ovl::evaluate_with((&o.0, &o.1, &o.2, &o.3), options).unwrap();
    for i in 0..4 {
        assert_eq!(r.0[[i]], a[i] && b[i]);
        assert_eq!(r.1[[i]], a[i] || b[i]);
        assert_eq!(r.2[[i]], !a[i]);
        assert_eq!(r.3[[i]], if a[i] { b[i] } else { !b[i] });
    }
}

/// Running sum and product along rows: staged `for` with static bounds, variables, `+=`, `*=`.
#[operator]
pub fn cumsum_cumprod(x: Tensor<f64>) -> (Tensor<f64>, Tensor<f64>) {
    let [rows, cols] = x.dims::<2>();
    let row = position_in([rows])[0];
    let sum = output_like(&x);
    let prod = output_like(&x);
    let mut s = variable(0.0f64);
    let mut p = variable(1.0f64);
    for j in 0..cols {
        s += x[[row, j]];
        p *= x[[row, j]];
        sum[[row, j]] = s;
        prod[[row, j]] = p;
    }
    (sum, prod)
}

pub fn cumsum_and_cumprod(options: &Options) {
    let x = Array2::from_shape_fn((5, 7), |(r, c)| 0.5 + (r * 7 + c) as f64 * 0.25);
    let o = cumsum_cumprod(&x);
    let (sum, prod) = ovl::evaluate_with((&o.0, &o.1), options).unwrap();
    for r in 0..5 {
        let (mut s, mut p) = (0.0, 1.0);
        for c in 0..7 {
            s += x[[r, c]];
            p *= x[[r, c]];
            assert_eq!(sum[[r, c]], s);
            assert_eq!(prod[[r, c]], p);
        }
    }
}

/// Staged bounds (read from data), `step_by`, inclusive ranges, `-=`, `/=`, `%=`.
#[operator]
pub fn loops(counts: Tensor<i64>) -> (Tensor<i64>, Tensor<i64>, Tensor<i64>) {
    let i = position_in(counts.shape())[0];
    let a = output_like(&counts);
    let b = output_like(&counts);
    let c = output_like(&counts);
    let n = counts[[i]];
    let mut sum = variable(0i64);
    for k in 0..n {
        sum += k;
    }
    a[[i]] = sum;
    let mut stepped = variable(1000i64);
    for k in (3..n).step_by(4) {
        stepped -= k;
    }
    b[[i]] = stepped;
    let mut v = variable(1i64 << 40);
    for _k in 1..=n {
        v /= 2;
        v %= 1_000_003;
    }
    c[[i]] = v;
    (a, b, c)
}

pub fn loop_forms(options: &Options) {
    let counts = vec![0i64, 1, 2, 5, 10, 17, -3];
    let o = loops(Array1::from(counts.clone()));
    let (a, b, c) = ovl::evaluate_with((&o.0, &o.1, &o.2), options).unwrap();
    for (i, &n) in counts.iter().enumerate() {
        assert_eq!(a[[i]], (0..n.max(0)).sum::<i64>(), "sum below {n}");
        assert_eq!(
            b[[i]],
            1000 - (3..n.max(3)).step_by(4).sum::<i64>(),
            "stepped below {n}"
        );
        let mut v = 1i64 << 40;
        for _ in 1..=n {
            v /= 2;
            v %= 1_000_003;
        }
        assert_eq!(c[[i]], v, "halvings of {n}");
    }
}

/// `while` on a staged condition, with nested `if`/`else` and plain assignment.
#[operator]
pub fn collatz(x: Tensor<u32>) -> Tensor<u32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    let mut n = variable(x[[i]]);
    let mut steps = variable(0u32);
    while n > 1 {
        if n % 2 == 0 {
            n = n / 2;
        } else {
            n = 3 * n + 1;
        }
        steps += 1;
    }
    out[[i]] = steps;
    out
}

pub fn while_loop(options: &Options) {
    let xs: Vec<u32> = vec![1, 2, 3, 6, 7, 27, 97, 871];
    let got = eval(&collatz(Array1::from(xs.clone())), options);
    for (i, &x) in xs.iter().enumerate() {
        let (mut n, mut steps) = (x, 0);
        while n > 1 {
            n = if n % 2 == 0 { n / 2 } else { 3 * n + 1 };
            steps += 1;
        }
        assert_eq!(got[[i]], steps, "collatz({x})");
    }
}

/// Trace-time loops and conditions: a plain `while`, a `#[unroll]` range, `if` on a plain bool.
#[operator]
pub fn unrolled(x: Tensor<f32>, taps: usize, scale: bool) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    let mut acc = variable(0.0f32);
    #[unroll]
    for t in 0..taps {
        acc += x[[i]] * (t + 1) as f32;
    }
    let mut k = 0;
    while k < 2 {
        acc += 1.0;
        k += 1;
    }
    if scale {
        acc *= 10.0;
    }
    out[[i]] = acc;
    out
}

pub fn trace_time_control(options: &Options) {
    let x = Array1::from(vec![1.0f32, -2.0, 0.5]);
    let got = eval(&unrolled(&x, 3, true), options);
    let plain = eval(&unrolled(&x, 4, false), options);
    for i in 0..3 {
        assert_eq!(
            got[[i]],
            (x[i] * 1.0 + x[i] * 2.0 + x[i] * 3.0 + 2.0) * 10.0
        );
        assert_eq!(
            plain[[i]],
            x[i] * 1.0 + x[i] * 2.0 + x[i] * 3.0 + x[i] * 4.0 + 2.0
        );
    }
    // The unrolled operator has no RANGE in its IR.
    let ir = unrolled(&x, 3, true);
    let dag = ir.operator_ir().unwrap();
    assert!(!dag
        .expressions
        .iter()
        .any(|e| e.code == ovl::ir::Op::Range as i32));
}

/// Local tensors: a per-worker histogram in `zeros`, a `ones` mask.
#[operator]
pub fn local_histogram(x: Tensor<u8>) -> Tensor<i32> {
    let [rows, cols] = x.dims::<2>();
    let r = position_in([rows])[0];
    let out = output([rows, 4]);
    let hist = zeros::<i32>([4]);
    let mask = ones::<i32>([4]);
    for c in 0..cols {
        let bin = x[[r, c]] % 4;
        hist[[bin]] += mask[[bin]];
    }
    mask[[0]] = 0;
    for b in 0..4 {
        out[[r, b]] = hist[[b]] * 10 + mask[[b]];
    }
    out
}

pub fn local_tensors(options: &Options) {
    let x = Array2::from_shape_fn((3, 9), |(r, c)| ((r * 5 + c * 3) % 11) as u8);
    let got = eval(&local_histogram(&x), options);
    for r in 0..3 {
        let mut hist = [0; 4];
        for c in 0..9 {
            hist[(x[[r, c]] % 4) as usize] += 1;
        }
        let mask = [0, 1, 1, 1];
        for b in 0..4 {
            assert_eq!(got[[r, b]], hist[b] * 10 + mask[b]);
        }
    }
}

/// A 3-D workgroup, position components, a whole-position index and a transposed write.
#[operator]
pub fn transpose_3d(x: Tensor<i16>) -> (Tensor<i16>, Tensor<i64>) {
    let [a, b, c] = x.dims::<3>();
    let pos = position_in([a, b, c]);
    let out = output([c, b, a]);
    let flat = output([a, b, c]);
    out[[pos[2], pos[1], pos[0]]] = x[pos.clone()];
    flat[pos.clone()] = (pos[0] * b as i64 + pos[1]) * c as i64 + pos[2];
    (out, flat)
}

pub fn multi_dim_workgroup(options: &Options) {
    let x = Array3::from_shape_fn((2, 3, 4), |(i, j, k)| (i * 100 + j * 10 + k) as i16);
    let o = transpose_3d(&x);
    let (t, flat) = ovl::evaluate_with((&o.0, &o.1), options).unwrap();
    for i in 0..2 {
        for j in 0..3 {
            for k in 0..4 {
                assert_eq!(t[[k, j, i]], x[[i, j, k]]);
                assert_eq!(flat[[i, j, k]], ((i * 3 + j) * 4 + k) as i64);
            }
        }
    }
}

/// Data-dependent indices: a gather through an index tensor.
#[operator]
pub fn gather(values: Tensor<f32>, idx: Tensor<u16>) -> Tensor<f32> {
    let i = position_in(idx.shape())[0];
    let out = output(idx.shape());
    out[[i]] = values[[idx[[i]]]];
    out
}

pub fn data_dependent_index(options: &Options) {
    let values = Array1::from_shape_fn(10, |i| i as f32 * 1.5);
    let idx = Array1::from(vec![9u16, 0, 3, 3, 7]);
    let got = eval(&gather(&values, &idx), options);
    assert_eq!(
        got.iter().copied().collect::<Vec<_>>(),
        idx.iter().map(|&i| values[i as usize]).collect::<Vec<_>>()
    );
}

pub fn out_of_bounds_is_an_error(options: &Options) {
    let values = Array1::from_shape_fn(10, |i| i as f32);
    let idx = Array1::from(vec![1u16, 10, 2]);
    let err = ovl::evaluate_with(&gather(&values, &idx), options).expect_err("index 10 of 10");
    let msg = err.to_string();
    assert!(msg.contains("10") && msg.contains("bounds"), "{msg}");
}

/// Constants as non-tensor parameters and a `#[helper]` function.
#[helper]
pub fn clamp_to<T: Num>(v: Expr<T>, lo: T, hi: T) -> Expr<T> {
    let mut r = variable(v);
    if v < lo {
        r = lo;
    }
    if v > hi {
        r = hi;
    }
    r.get()
}

#[operator]
pub fn clamp(x: Tensor<f32>, lo: f32, hi: f32) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = clamp_to(x[[i]], lo, hi);
    out
}

pub fn helpers_and_constants(options: &Options) {
    let x = Array1::from(vec![-3.0f32, 0.5, 9.0]);
    assert_eq!(
        eval(&clamp(&x, -1.0, 1.0), options)
            .iter()
            .copied()
            .collect::<Vec<_>>(),
        vec![-1.0, 0.5, 1.0]
    );
    assert_eq!(
        eval(&clamp(&x, 0.0, 5.0), options)
            .iter()
            .copied()
            .collect::<Vec<_>>(),
        vec![0.0, 0.5, 5.0]
    );
}

/// Chained operators: the output of one is the input of the next.
pub fn chained_operators(options: &Options) {
    let x = Array2::from_shape_fn((3, 4), |(r, c)| (r + c) as f64);
    let once = cumsum_cumprod(&x).0;
    let twice = cumsum_cumprod(&once).0;
    let got = eval(&twice, options);
    for r in 0..3 {
        let mut s1 = 0.0;
        let mut s2 = 0.0;
        for c in 0..4 {
            s1 += x[[r, c]];
            s2 += s1;
            assert_eq!(got[[r, c]], s2);
        }
    }
}

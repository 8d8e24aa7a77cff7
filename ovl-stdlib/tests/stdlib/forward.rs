//! Every stdlib operator against an independent computation with ndarray / std, on the
//! interpreter and on the C++ backend.

use ndarray::{array, Array, ArrayD, Axis, IxDyn};
use ovl::{Lazy, Options};
use ovl_stdlib as ops;

fn targets() -> [Options; 2] {
    [Options::interpreter(), Options::cpu()]
}

fn eval<T: ovl::Scalar>(y: &Lazy<T>, o: &Options) -> ArrayD<T> {
    ovl::evaluate_with(y, o).unwrap_or_else(|e| panic!("{e}"))
}

fn same_f64(a: &ArrayD<f64>, b: &ArrayD<f64>) {
    assert_eq!(a.shape(), b.shape());
    for (x, y) in a.iter().zip(b) {
        assert!(
            (x.is_nan() && y.is_nan()) || x == y || (x - y).abs() <= 1e-12 * y.abs().max(1.0),
            "{a} != {b}"
        );
    }
}

fn edges() -> ArrayD<f64> {
    array![
        -2.5,
        -1.0,
        -0.0,
        0.0,
        0.25,
        1.0,
        3.5,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN
    ]
    .into_dyn()
}

#[test]
fn unary_functions_on_edge_values() {
    type Op = fn(Lazy<f64>) -> Lazy<f64>;
    type F = fn(f64) -> f64;
    let cases: [(&str, Op, F); 11] = [
        ("neg", |x| ops::neg(x), |v| -v),
        ("abs", |x| ops::abs(x), f64::abs),
        (
            "relu",
            |x| ops::relu(x),
            |v| if v > 0.0 || v.is_nan() { v } else { 0.0 },
        ),
        ("tanh", |x| ops::tanh(x), f64::tanh),
        ("sigmoid", |x| ops::sigmoid(x), |v| 1.0 / (1.0 + (-v).exp())),
        ("sin", |x| ops::sin(x), f64::sin),
        ("cos", |x| ops::cos(x), f64::cos),
        ("tan", |x| ops::tan(x), f64::tan),
        ("exp", |x| ops::exp(x), f64::exp),
        ("log", |x| ops::log(x), f64::ln),
        ("sqrt", |x| ops::sqrt(x), f64::sqrt),
    ];
    for o in targets() {
        for (name, op, reference) in cases {
            let got = eval(&op(Lazy::from(edges())), &o);
            let want = edges().mapv(reference);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                let ok = (g.is_nan() && w.is_nan())
                    || g == w
                    || (g - w).abs() <= 4.0 * f64::EPSILON * w.abs().max(1.0);
                assert!(
                    ok,
                    "{name}({}) = {g}, want {w} ({:?})",
                    edges()[i],
                    o.target
                );
            }
        }
    }
}

#[test]
fn binary_operators_broadcast_like_numpy() {
    let a = array![[1.0f64, -2.0, 3.0], [4.0, 5.0, -6.0]].into_dyn();
    let row = array![0.5f64, -1.0, 2.0].into_dyn();
    let col = array![[10.0f64], [-3.0]].into_dyn();
    type Bin = fn(Lazy<f64>, Lazy<f64>) -> Lazy<f64>;
    type Ref = fn(f64, f64) -> f64;
    let cases: [(&str, Bin, Ref); 7] = [
        ("add", |a, b| ops::add(a, b), |x, y| x + y),
        ("sub", |a, b| ops::sub(a, b), |x, y| x - y),
        ("mul", |a, b| ops::mul(a, b), |x, y| x * y),
        ("div", |a, b| ops::div(a, b), |x, y| x / y),
        ("pow", |a, b| ops::pow(a, b), f64::powf),
        ("minimum", |a, b| ops::minimum(a, b), f64::min),
        ("maximum", |a, b| ops::maximum(a, b), f64::max),
    ];
    for o in targets() {
        for (name, op, reference) in cases {
            for other in [&row, &col] {
                let got = eval(&op(Lazy::from(a.clone()), Lazy::from(other.clone())), &o);
                let b = other.broadcast(a.shape()).expect("broadcasts").to_owned();
                let want = Array::from_shape_fn(a.raw_dim(), |i| reference(a[&i], b[&i]));
                same_f64(&got, &want);
                // And the other way round: the small operand first.
                let got = eval(&op(Lazy::from(other.clone()), Lazy::from(a.clone())), &o);
                let want = Array::from_shape_fn(a.raw_dim(), |i| reference(b[&i], a[&i]));
                assert_eq!(got.shape(), a.shape(), "{name}");
                same_f64(&got, &want);
            }
        }
        // [2, 1] with [3] broadcasts to [2, 3].
        let got = eval(
            &ops::add(Lazy::from(col.clone()), Lazy::from(row.clone())),
            &o,
        );
        assert_eq!(
            got,
            array![[10.5, 9.0, 12.0], [-2.5, -4.0, -1.0]].into_dyn()
        );
    }
}

#[test]
fn integer_division_and_remainder_follow_rust() {
    let a = array![7i32, -7, 7, -7, 5, i32::MIN].into_dyn();
    let b = array![2i32, 2, -2, -2, 0, -1].into_dyn();
    for o in targets() {
        let q = eval(&ops::div(Lazy::from(a.clone()), Lazy::from(b.clone())), &o);
        let r = eval(&ops::rem(Lazy::from(a.clone()), Lazy::from(b.clone())), &o);
        let want_q: Vec<i32> = a
            .iter()
            .zip(&b)
            .map(|(&x, &y)| if y == 0 { 0 } else { x.wrapping_div(y) })
            .collect();
        let want_r: Vec<i32> = a
            .iter()
            .zip(&b)
            .map(|(&x, &y)| if y == 0 { 0 } else { x.wrapping_rem(y) })
            .collect();
        assert_eq!(q.iter().copied().collect::<Vec<_>>(), want_q);
        assert_eq!(r.iter().copied().collect::<Vec<_>>(), want_r);
    }
}

#[test]
fn comparisons_select_cast_and_clip() {
    let a = array![1.0f32, f32::NAN, 3.0, -0.0].into_dyn();
    let b = array![2.0f32, 1.0, 3.0, 0.0].into_dyn();
    for o in targets() {
        let la = || Lazy::from(a.clone());
        let lb = || Lazy::from(b.clone());
        let v = |x: ArrayD<bool>| x.iter().copied().collect::<Vec<_>>();
        assert_eq!(
            v(eval(&ops::equal(la(), lb()), &o)),
            [false, false, true, true]
        );
        assert_eq!(
            v(eval(&ops::not_equal(la(), lb()), &o)),
            [true, true, false, false]
        );
        assert_eq!(
            v(eval(&ops::less(la(), lb()), &o)),
            [true, false, false, false]
        );
        assert_eq!(
            v(eval(&ops::less_equal(la(), lb()), &o)),
            [true, false, true, true]
        );
        assert_eq!(
            v(eval(&ops::greater(la(), lb()), &o)),
            [false, false, false, false]
        );
        assert_eq!(
            v(eval(&ops::greater_equal(la(), lb()), &o)),
            [false, false, true, true]
        );

        let c = ops::less(la(), lb());
        let s = eval(&ops::select(&c, la(), lb()), &o);
        assert_eq!(
            s.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            [1.0f32, 1.0, 3.0, 0.0].map(f32::to_bits)
        );

        let big = array![-1e10f64, -3.7, 0.5, 3.99, 300.0, f64::NAN].into_dyn();
        let casted = eval(&ops::cast::<f64, u8>(Lazy::from(big.clone())), &o);
        assert_eq!(
            casted.iter().copied().collect::<Vec<_>>(),
            big.iter().map(|&x| x as u8).collect::<Vec<_>>()
        );
        let clipped = eval(&ops::clip(Lazy::from(big.clone()), -1.0, 1.0), &o);
        for (g, x) in clipped.iter().zip(&big) {
            let want = x.clamp(-1.0, 1.0);
            assert!(
                (g.is_nan() && want.is_nan()) || *g == want,
                "clip({x}) = {g}"
            );
        }
    }
}

#[test]
fn shapes_transpose_split_concat() {
    let x = Array::from_shape_fn((2, 3, 4), |(i, j, k)| (i * 100 + j * 10 + k) as f32).into_dyn();
    for o in targets() {
        let t = eval(&ops::transpose(Lazy::from(x.clone()), &[2, 0, 1]), &o);
        assert_eq!(
            t,
            x.clone()
                .permuted_axes(vec![2, 0, 1])
                .as_standard_layout()
                .to_owned()
        );
        let parts = ops::split(Lazy::from(x.clone()), 2, 2);
        assert_eq!(parts.len(), 2);
        for (n, part) in parts.iter().enumerate() {
            let got = eval(part, &o);
            let want = x.slice_axis(Axis(2), (n * 2..n * 2 + 2).into()).to_owned();
            assert_eq!(got, want);
        }
        let joined = eval(&ops::concat(&parts, 2), &o);
        assert_eq!(joined, x);
        let stacked = eval(&ops::concat(&parts, 0), &o);
        assert_eq!(stacked.shape(), &[4, 3, 2]);
        assert_eq!(stacked[[3, 2, 1]], x[[1, 2, 3]]);
    }
}

#[test]
fn reductions_and_scans() {
    let x = array![[1.0f64, -2.0, 3.5], [4.0, 0.5, -6.0]].into_dyn();
    for o in targets() {
        let l = || Lazy::from(x.clone());
        for axis in 0..2 {
            same_f64(&eval(&ops::sum(l(), axis), &o), &x.sum_axis(Axis(axis)));
            same_f64(
                &eval(&ops::mean(l(), axis), &o),
                &x.mean_axis(Axis(axis)).unwrap(),
            );
            let mx = x.map_axis(Axis(axis), |v| v.iter().copied().fold(f64::MIN, f64::max));
            let mn = x.map_axis(Axis(axis), |v| v.iter().copied().fold(f64::MAX, f64::min));
            same_f64(&eval(&ops::max(l(), axis), &o), &mx);
            same_f64(&eval(&ops::min(l(), axis), &o), &mn);
            let mut cs = x.clone();
            cs.accumulate_axis_inplace(Axis(axis), |&prev, cur| *cur += prev);
            same_f64(&eval(&ops::cumsum(l(), axis), &o), &cs);
            let mut cp = x.clone();
            cp.accumulate_axis_inplace(Axis(axis), |&prev, cur| *cur *= prev);
            same_f64(&eval(&ops::cumprod(l(), axis), &o), &cp);
        }
        // A 1-D sum is a scalar.
        let total = eval(
            &ops::sum(Lazy::from(array![1.5f64, 2.0, -0.5].into_dyn()), 0),
            &o,
        );
        assert_eq!(total, ndarray::arr0(3.0).into_dyn());
        let ints = eval(
            &ops::sum(Lazy::from(array![[250u8, 10], [1, 2]].into_dyn()), 0),
            &o,
        );
        assert_eq!(ints, array![251u8, 12].into_dyn());
    }
}

#[test]
fn matmul_and_softmax() {
    let a = Array::from_shape_fn((3, 4), |(i, j)| (i as f64 - 1.0) * 0.5 + j as f64).into_dyn();
    let b = Array::from_shape_fn((4, 2), |(i, j)| (i * 2 + j) as f64 * 0.25 - 1.0).into_dyn();
    let a2 = a.clone().into_dimensionality::<ndarray::Ix2>().unwrap();
    let b2 = b.clone().into_dimensionality::<ndarray::Ix2>().unwrap();
    let x = array![[1.0f64, 2.0, 3.0], [-1000.0, 0.0, 1000.0]].into_dyn();
    for o in targets() {
        same_f64(
            &eval(
                &ops::matmul(Lazy::from(a.clone()), Lazy::from(b.clone())),
                &o,
            ),
            &a2.dot(&b2).into_dyn(),
        );
        let s = eval(&ops::softmax(Lazy::from(x.clone())), &o);
        for r in 0..2 {
            let row: Vec<f64> = (0..3).map(|c| x[[r, c]]).collect();
            let m = row.iter().copied().fold(f64::MIN, f64::max);
            let z: f64 = row.iter().map(|v| (v - m).exp()).sum();
            for c in 0..3 {
                let want = (row[c] - m).exp() / z;
                assert!(
                    (s[[r, c]] - want).abs() < 1e-15,
                    "softmax[{r},{c}] = {}",
                    s[[r, c]]
                );
            }
        }
    }
}

#[test]
fn logsumexp_layernorm_and_rmsnorm() {
    let x = Array::from_shape_fn((4, 37), |(r, c)| {
        ((r * 37 + c) % 11) as f64 * 0.7 - 3.0 + r as f64
    })
    .into_dyn();
    let eps = 1e-5;
    for o in targets() {
        let l = eval(&ops::logsumexp(Lazy::from(x.clone())), &o);
        let ln = eval(&ops::layernorm(Lazy::from(x.clone()), eps), &o);
        let rms = eval(&ops::rmsnorm(Lazy::from(x.clone()), eps), &o);
        assert_eq!(l.shape(), &[4]);
        for r in 0..4 {
            let row: Vec<f64> = (0..37).map(|c| x[[r, c]]).collect();
            let m = row.iter().copied().fold(f64::MIN, f64::max);
            let want = m + row.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
            assert!(
                (l[[r]] - want).abs() < 1e-12,
                "logsumexp[{r}] = {} vs {want}",
                l[[r]]
            );
            let mean = row.iter().sum::<f64>() / 37.0;
            let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / 37.0;
            let ms = row.iter().map(|v| v * v).sum::<f64>() / 37.0;
            for c in 0..37 {
                let want = (row[c] - mean) / (var + eps).sqrt();
                assert!((ln[[r, c]] - want).abs() < 1e-9, "layernorm[{r},{c}]");
                let want = row[c] / (ms + eps).sqrt();
                assert!((rms[[r, c]] - want).abs() < 1e-12, "rmsnorm[{r},{c}]");
            }
        }
    }
    // One operator forward; the gradient is two operators, the row statistics and one
    // elementwise operator that spreads them back, which runs as a loop in each row's worker
    // of the statistics: one kernel (on the C++ backend).
    let xl = Lazy::from(x.clone());
    let y = ops::layernorm(&xl, eps);
    let (_, profile) = ovl::profile(&y, &Options::default(), 1).unwrap();
    assert_eq!(profile.kernel_count(), 1);
    let dy = Lazy::from(ArrayD::<f64>::ones(IxDyn(&[4, 37])));
    let grads = ovl::backward(&[(&y, &dy)], &[&xl]).unwrap();
    let (_, profile) = ovl::profile(grads.of(&xl).unwrap(), &Options::default(), 1).unwrap();
    assert_eq!(profile.kernel_count(), 1);
    // An empty axis is an error naming the operator.
    let empty = Lazy::from(ArrayD::<f64>::zeros(IxDyn(&[2, 0])));
    let e = ovl::evaluate(&ops::layernorm(&empty, eps)).unwrap_err();
    assert!(
        e.to_string().contains("`layernorm` of an empty axis"),
        "{e}"
    );
    let e = ovl::evaluate(&ops::logsumexp(&empty)).unwrap_err();
    assert!(
        e.to_string().contains("`logsumexp` of an empty axis"),
        "{e}"
    );
}

#[test]
fn bad_arguments_are_errors_not_panics() {
    let a = Lazy::from(ArrayD::<f32>::zeros(IxDyn(&[2, 3])));
    let b = Lazy::from(ArrayD::<f32>::zeros(IxDyn(&[4])));
    let err = ovl::evaluate(&ops::add(&a, &b)).unwrap_err().to_string();
    assert!(
        err.contains("[2, 3]") && err.contains("[4]") && err.contains("broadcast"),
        "{err}"
    );
    let err = ovl::evaluate(&ops::sum(&a, 2)).unwrap_err().to_string();
    assert!(err.contains("axis 2") && err.contains("[2, 3]"), "{err}");
    let err = ovl::evaluate(&ops::matmul(&a, &a)).unwrap_err().to_string();
    assert!(err.contains("matmul") && err.contains("[2, 3]"), "{err}");
    let err = ovl::evaluate(&ops::split(&a, 1, 2)[0])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("3 elements") && err.contains("2 equal parts"),
        "{err}"
    );
    let err = ovl::evaluate(&ops::transpose(&a, &[0, 0]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("not a permutation"), "{err}");
}

/// Reference arithmetic per dtype: wrapping for integers, IEEE for floats.
trait Reference: ovl::Scalar + ovl::prelude::Num + std::fmt::Debug {
    fn from_u8(v: u8) -> Self;
    fn add(a: Self, b: Self) -> Self;
    fn sub(a: Self, b: Self) -> Self;
    fn mul(a: Self, b: Self) -> Self;
    fn div(a: Self, b: Self) -> Self;
    fn min(a: Self, b: Self) -> Self;
    fn max(a: Self, b: Self) -> Self;
}

macro_rules! int_reference {
    ($($t:ty),*) => {$(
        impl Reference for $t {
            fn from_u8(v: u8) -> Self { v as $t }
            fn add(a: Self, b: Self) -> Self { a.wrapping_add(b) }
            fn sub(a: Self, b: Self) -> Self { a.wrapping_sub(b) }
            fn mul(a: Self, b: Self) -> Self { a.wrapping_mul(b) }
            fn div(a: Self, b: Self) -> Self { if b == 0 { 0 } else { a.wrapping_div(b) } }
            fn min(a: Self, b: Self) -> Self { Ord::min(a, b) }
            fn max(a: Self, b: Self) -> Self { Ord::max(a, b) }
        }
    )*};
}
int_reference!(i8, i16, i32, i64, u8, u16, u32, u64);

macro_rules! float_reference {
    ($($t:ty),*) => {$(
        impl Reference for $t {
            fn from_u8(v: u8) -> Self { v as $t }
            fn add(a: Self, b: Self) -> Self { a + b }
            fn sub(a: Self, b: Self) -> Self { a - b }
            fn mul(a: Self, b: Self) -> Self { a * b }
            fn div(a: Self, b: Self) -> Self { a / b }
            fn min(a: Self, b: Self) -> Self { a.min(b) }
            fn max(a: Self, b: Self) -> Self { a.max(b) }
        }
    )*};
}
float_reference!(f32, f64);

fn sweep<T: Reference>(o: &Options) {
    let a: Vec<T> = [0u8, 1, 2, 3, 5, 7, 100, 200].map(T::from_u8).to_vec();
    let b: Vec<T> = [1u8, 2, 3, 1, 2, 4, 100, 3].map(T::from_u8).to_vec();
    let la = || Lazy::from(Array::from_shape_vec((2, 4), a.clone()).unwrap());
    let lb = || Lazy::from(Array::from_shape_vec((2, 4), b.clone()).unwrap());
    let flat = |x: ArrayD<T>| x.iter().copied().collect::<Vec<_>>();
    let each = |f: fn(T, T) -> T| a.iter().zip(&b).map(|(&x, &y)| f(x, y)).collect::<Vec<_>>();
    let name = std::any::type_name::<T>();
    assert_eq!(
        flat(eval(&ops::add(la(), lb()), o)),
        each(T::add),
        "add {name}"
    );
    assert_eq!(
        flat(eval(&ops::sub(la(), lb()), o)),
        each(T::sub),
        "sub {name}"
    );
    assert_eq!(
        flat(eval(&ops::mul(la(), lb()), o)),
        each(T::mul),
        "mul {name}"
    );
    assert_eq!(
        flat(eval(&ops::div(la(), lb()), o)),
        each(T::div),
        "div {name}"
    );
    assert_eq!(
        flat(eval(&ops::minimum(la(), lb()), o)),
        each(T::min),
        "minimum {name}"
    );
    assert_eq!(
        flat(eval(&ops::maximum(la(), lb()), o)),
        each(T::max),
        "maximum {name}"
    );
    let row_sums: Vec<T> = a
        .chunks(4)
        .map(|r| r.iter().fold(T::from_u8(0), |s, &v| T::add(s, v)))
        .collect();
    assert_eq!(flat(eval(&ops::sum(la(), 1), o)), row_sums, "sum {name}");
    let scanned: Vec<T> = a
        .chunks(4)
        .flat_map(|r| {
            r.iter()
                .scan(T::from_u8(0), |s, &v| {
                    *s = T::add(*s, v);
                    Some(*s)
                })
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(
        flat(eval(&ops::cumsum(la(), 1), o)),
        scanned,
        "cumsum {name}"
    );
    let t = ops::transpose(lb(), &[1, 0]);
    let product = flat(eval(&ops::matmul(la(), &t), o));
    for r in 0..2 {
        for c in 0..2 {
            let want = (0..4).fold(T::from_u8(0), |s, k| {
                T::add(s, T::mul(a[r * 4 + k], b[c * 4 + k]))
            });
            assert_eq!(product[r * 2 + c], want, "matmul {name}");
        }
    }
    let m = flat(eval(&ops::max(la(), 0), o));
    assert_eq!(
        m,
        (0..4).map(|k| T::max(a[k], a[4 + k])).collect::<Vec<_>>(),
        "max {name}"
    );
}

#[test]
fn every_numeric_dtype() {
    for o in targets() {
        sweep::<f32>(&o);
        sweep::<f64>(&o);
        sweep::<i8>(&o);
        sweep::<i16>(&o);
        sweep::<i32>(&o);
        sweep::<i64>(&o);
        sweep::<u8>(&o);
        sweep::<u16>(&o);
        sweep::<u32>(&o);
        sweep::<u64>(&o);
    }
}

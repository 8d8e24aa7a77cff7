//! The reductions along an axis (`sum`, `mean`, `prod`, `max`, `min`, `var` and their
//! `_keepdim` forms) and the shape functions (`expand_dims`, `squeeze`, `reshape`,
//! `broadcast_to`) against plain ndarray, on the interpreter and the C++ backend; their bad
//! input (axes out of range, empty axes, size mismatches), NaN and integer wrapping, identical on
//! every backend; and the structure that lets their graphs fuse.

use ndarray::{array, Array, ArrayD, Axis, Dimension, IxDyn};
use ovl::prelude::*;
use ovl::{Lazy, Options};
use ovl_stdlib as ops;

fn targets() -> [Options; 2] {
    [Options::interpreter(), Options::cpu()]
}

fn eval<T: ovl::Scalar>(y: &Lazy<T>, o: &Options) -> ArrayD<T> {
    ovl::evaluate_with(y, o).unwrap_or_else(|e| panic!("{e}"))
}

fn close(got: &ArrayD<f64>, want: &ArrayD<f64>, what: &str) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g.is_nan() && w.is_nan()) || (g - w).abs() <= 1e-12 * w.abs().max(1.0),
            "{what}: {got} != {want}"
        );
    }
}

/// Bit-for-bit equality of floats (NaN included).
fn same_bits(a: &ArrayD<f64>, b: &ArrayD<f64>, what: &str) {
    assert_eq!(a.shape(), b.shape(), "{what}: shape");
    for (x, y) in a.iter().zip(b) {
        assert_eq!(x.to_bits(), y.to_bits(), "{what}: {a} vs {b}");
    }
}

fn cube() -> ArrayD<f64> {
    Array::from_shape_fn((3, 4, 5), |(i, j, k)| {
        ((i * 20 + j * 5 + k) % 7) as f64 * 0.75 - 2.0 + 0.1 * i as f64
    })
    .into_dyn()
}

/// numpy's `keepdims=True`: the reduced axis put back with size 1.
fn keep(a: ArrayD<f64>, axis: usize) -> ArrayD<f64> {
    a.insert_axis(Axis(axis))
}

#[test]
fn reductions_match_ndarray_along_every_axis() {
    let x = cube();
    for o in targets() {
        let l = || Lazy::from(x.clone());
        for axis in 0..3 {
            let ax = Axis(axis);
            let sum = x.sum_axis(ax);
            let mean = x.mean_axis(ax).unwrap();
            let prod = x.map_axis(ax, |v| v.iter().product::<f64>());
            let max = x.map_axis(ax, |v| v.iter().copied().fold(f64::MIN, f64::max));
            let min = x.map_axis(ax, |v| v.iter().copied().fold(f64::MAX, f64::min));
            // Population variance, two-pass in plain Rust.
            let var = x.map_axis(ax, |v| {
                let m = v.iter().sum::<f64>() / v.len() as f64;
                v.iter().map(|e| (e - m) * (e - m)).sum::<f64>() / v.len() as f64
            });
            let cases: [(&str, Lazy<f64>, &ArrayD<f64>); 6] = [
                ("sum", ops::sum(l(), axis), &sum),
                ("mean", ops::mean(l(), axis), &mean),
                ("prod", ops::prod(l(), axis), &prod),
                ("max", ops::max(l(), axis), &max),
                ("min", ops::min(l(), axis), &min),
                ("var", ops::var(l(), axis), &var),
            ];
            for (name, y, want) in cases {
                close(&eval(&y, &o), want, &format!("{name} along {axis}"));
            }
            let kept: [(&str, Lazy<f64>, &ArrayD<f64>); 6] = [
                ("sum_keepdim", ops::sum_keepdim(l(), axis), &sum),
                ("mean_keepdim", ops::mean_keepdim(l(), axis), &mean),
                ("prod_keepdim", ops::prod_keepdim(l(), axis), &prod),
                ("max_keepdim", ops::max_keepdim(l(), axis), &max),
                ("min_keepdim", ops::min_keepdim(l(), axis), &min),
                ("var_keepdim", ops::var_keepdim(l(), axis), &var),
            ];
            for (name, y, want) in kept {
                let want = keep(want.clone(), axis);
                assert_eq!(y.shape(), want.shape(), "{name}: lazy shape");
                close(&eval(&y, &o), &want, &format!("{name} along {axis}"));
            }
        }
        // A 1-D reduction is 0-d; integer sums and products of any dtype.
        let v = Lazy::from(array![1.5f64, 2.0, -0.5].into_dyn());
        assert_eq!(eval(&ops::var(&v, 0), &o).shape(), &[] as &[usize]);
        assert_eq!(eval(&ops::prod_keepdim(&v, 0), &o), array![-1.5].into_dyn());
        let ints = Lazy::from(array![[3i32, -2, 5], [4, 1, -1]].into_dyn());
        assert_eq!(eval(&ops::prod(&ints, 1), &o), array![-30, -4].into_dyn());
        assert_eq!(
            eval(&ops::max_keepdim(&ints, 0), &o),
            array![[4, 1, 5]].into_dyn()
        );
    }
}

#[test]
fn var_is_two_pass_and_survives_a_large_offset() {
    // With E[x²] - E[x]² in f32 the offset 1e4 would cancel the variance (0.6667) away.
    let x = array![[10_000.0f32, 10_001.0, 10_002.0]].into_dyn();
    for o in targets() {
        let v = eval(&ops::var(Lazy::from(x.clone()), 1), &o);
        assert!((v[[0]] - 2.0 / 3.0).abs() < 1e-4, "{v}");
    }
}

#[test]
fn keepdim_statistics_broadcast_back_softmax_from_ops() {
    let x = array![[1.0f64, 2.0, 3.0, -1.0], [-1000.0, 0.0, 1000.0, 999.0]].into_dyn();
    for o in targets() {
        let l = Lazy::from(x.clone());
        // Softmax written from ops: row statistics kept as [2, 1] broadcast against [2, 4].
        let e = ops::exp(ops::sub(&l, ops::max_keepdim(&l, 1)));
        let s = ops::div(&e, ops::sum_keepdim(&e, 1));
        close(
            &eval(&s, &o),
            &eval(&ops::softmax(&l), &o),
            "softmax from ops",
        );
        // Layer norm from ops against the stdlib's.
        let centered = ops::sub(&l, ops::mean_keepdim(&l, 1));
        let ln = ops::div(
            &centered,
            ops::sqrt(ops::add(
                ops::var_keepdim(&l, 1),
                Lazy::from(ndarray::arr0(1e-5)),
            )),
        );
        let want = eval(&ops::layernorm(&l, 1e-5), &o);
        for (g, w) in eval(&ln, &o).iter().zip(&want) {
            assert!((g - w).abs() < 1e-9, "layernorm from ops {g} vs {w}");
        }
    }
}

#[test]
fn shape_functions_move_elements_in_row_major_order() {
    let x = cube();
    let flat: Vec<f64> = x.iter().copied().collect();
    for o in targets() {
        let l = || Lazy::from(x.clone());
        for shape in [
            vec![60],
            vec![12, 5],
            vec![3, 20],
            vec![6, 10],
            vec![5, 4, 3],
            vec![3, 2, 2, 5],
            vec![1, 60, 1],
            vec![2, 5, 6],
            vec![3, 4, 5],
        ] {
            let y = eval(&ops::reshape(l(), &shape), &o);
            let want = ArrayD::from_shape_vec(IxDyn(&shape), flat.clone()).unwrap();
            assert_eq!(y, want, "reshape to {shape:?}");
        }
        for axis in 0..=3 {
            let y = eval(&ops::expand_dims(l(), axis), &o);
            assert_eq!(y, x.clone().insert_axis(Axis(axis)), "expand_dims {axis}");
            let back = eval(&ops::squeeze(ops::expand_dims(l(), axis), axis), &o);
            assert_eq!(back, x, "squeeze {axis}");
        }
        let bcast = eval(&ops::broadcast_to(array![[1.0f64], [2.0]], &[3, 2, 4]), &o);
        assert_eq!(
            bcast,
            Array::from_shape_fn((3, 2, 4), |(_, j, _)| j as f64 + 1.0).into_dyn()
        );
        // 0-d and empty tensors.
        let scalar = Lazy::from(ndarray::arr0(7i64).into_dyn());
        assert_eq!(
            eval(&ops::reshape(&scalar, &[1, 1]), &o),
            array![[7i64]].into_dyn()
        );
        assert_eq!(
            eval(&ops::expand_dims(&scalar, 0), &o),
            array![7i64].into_dyn()
        );
        let one = Lazy::from(array![[5u8]].into_dyn());
        assert_eq!(
            eval(&ops::reshape(&one, &[]), &o),
            ndarray::arr0(5u8).into_dyn()
        );
        assert_eq!(eval(&ops::squeeze(&one, 0), &o), array![5u8].into_dyn());
        let empty = Lazy::from(ArrayD::<f32>::zeros(IxDyn(&[0, 3])));
        assert_eq!(
            eval(&ops::reshape(&empty, &[3, 0, 2]), &o).shape(),
            &[3, 0, 2]
        );
        assert_eq!(eval(&ops::expand_dims(&empty, 2), &o).shape(), &[0, 3, 1]);
    }
}

/// The message of the error `evaluate` returns for `y`.
fn error_of<T: ovl::Scalar + std::fmt::Debug>(y: &Lazy<T>) -> String {
    match ovl::evaluate_with(y, &Options::interpreter()) {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e.to_string(),
    }
}

/// Asserts that `err` names `function`, this file and the line of the call, and all of `parts`.
fn names(err: &str, function: &str, line: u32, parts: &[&str]) {
    let at = format!("`ovl_stdlib::{function}` called at {}:{line}:", file!());
    assert!(err.contains(&at), "expected {at:?} in: {err}");
    for p in parts {
        assert!(err.contains(p), "expected {p:?} in: {err}");
    }
}

#[test]
fn an_axis_out_of_range_is_an_error_naming_the_function_the_axis_and_the_rank() {
    let x = Lazy::from(ArrayD::<f64>::zeros(IxDyn(&[2, 3])));
    let range = ["axis 2", "shape [2, 3]", "rank 2", "pass an axis in 0..2"];
    let (y, line) = (ops::sum(&x, 2), line!());
    names(&error_of(&y), "sum", line, &range);
    let (y, line) = (ops::sum_keepdim(&x, 2), line!());
    names(&error_of(&y), "sum_keepdim", line, &range);
    let (y, line) = (ops::mean(&x, 2), line!());
    names(&error_of(&y), "mean", line, &range);
    let (y, line) = (ops::mean_keepdim(&x, 2), line!());
    names(&error_of(&y), "mean_keepdim", line, &range);
    let (y, line) = (ops::prod(&x, 2), line!());
    names(&error_of(&y), "prod", line, &range);
    let (y, line) = (ops::max(&x, 2), line!());
    names(&error_of(&y), "max", line, &range);
    let (y, line) = (ops::min_keepdim(&x, 2), line!());
    names(&error_of(&y), "min_keepdim", line, &range);
    let (y, line) = (ops::var(&x, 2), line!());
    names(&error_of(&y), "var", line, &range);
    let (y, line) = (ops::var_keepdim(&x, 7), line!());
    names(&error_of(&y), "var_keepdim", line, &["axis 7", "0..2"]);
    let (y, line) = (ops::cumsum(&x, 2), line!());
    names(&error_of(&y), "cumsum", line, &range);
    let (y, line) = (ops::cumprod(&x, 9), line!());
    names(&error_of(&y), "cumprod", line, &["axis 9", "0..2"]);
    let (y, line) = (ops::squeeze(&x, 2), line!());
    names(&error_of(&y), "squeeze", line, &range);
    let (y, line) = (ops::squeeze(&x, 1), line!());
    names(&error_of(&y), "squeeze", line, &["size 3, not 1"]);
    let (y, line) = (ops::expand_dims(&x, 3), line!());
    names(&error_of(&y), "expand_dims", line, &["axis 3", "0..=2"]);
    let scalar = Lazy::from(ndarray::arr0(1.0f64).into_dyn());
    let (y, line) = (ops::sum(&scalar, 0), line!());
    names(
        &error_of(&y),
        "sum",
        line,
        &["0-d tensor", "no axes", "reshape"],
    );
    let (y, line) = (ops::softmax(&scalar), line!());
    names(&error_of(&y), "softmax", line, &["last axis", "0-d tensor"]);
    let (y, line) = (ops::logsumexp(&scalar), line!());
    names(&error_of(&y), "logsumexp", line, &["0-d tensor"]);
    let rows = Lazy::from(ArrayD::<f64>::zeros(IxDyn(&[2, 0])));
    let (y, line) = (ops::layernorm(&rows, 1e-5), line!());
    names(
        &error_of(&y),
        "layernorm",
        line,
        &["`layernorm` of an empty axis"],
    );
    let (y, line) = (ops::rmsnorm(&rows, 1e-5), line!());
    names(
        &error_of(&y),
        "rmsnorm",
        line,
        &["`rmsnorm` of an empty axis"],
    );
    let (y, line) = (ops::logsumexp(&rows), line!());
    names(
        &error_of(&y),
        "logsumexp",
        line,
        &["`logsumexp` of an empty axis"],
    );
    assert_eq!(eval(&ops::softmax(&rows), &Options::cpu()).shape(), &[2, 0]);
    // The gradient of a bad call reports the same error (backward itself succeeds).
    let y = ops::max(&x, 5);
    let seed = Lazy::from(ArrayD::<f64>::zeros(IxDyn(y.shape())));
    let grads = ovl::backward(&[(&y, &seed)], &[&x]).unwrap();
    let err = error_of(&grads.of(&x).unwrap());
    assert!(
        err.contains("`ovl_stdlib::max`") && err.contains("axis 5"),
        "{err}"
    );
}

#[test]
fn reshape_and_broadcast_to_with_a_size_mismatch_are_errors() {
    let x = Lazy::from(ArrayD::<f32>::zeros(IxDyn(&[2, 3])));
    let (y, line) = (ops::reshape(&x, &[4, 2]), line!());
    names(
        &error_of(&y),
        "reshape",
        line,
        &["[2, 3] (6 elements)", "[4, 2] (8 elements)"],
    );
    assert_eq!(y.shape(), &[4, 2]);
    let (y, line) = (ops::reshape(&x, &[usize::MAX, 2]), line!());
    names(&error_of(&y), "reshape", line, &["too many elements"]);
    let (y, line) = (ops::broadcast_to(&x, &[2, 4]), line!());
    names(
        &error_of(&y),
        "broadcast_to",
        line,
        &["[2, 3] does not broadcast to [2, 4]"],
    );
}

#[test]
fn empty_axes_sum_to_0_multiply_to_1_average_to_nan_and_have_no_max() {
    let x = Lazy::from(ArrayD::<f64>::zeros(IxDyn(&[3, 0])));
    let ints = Lazy::from(ArrayD::<i32>::zeros(IxDyn(&[0, 2])));
    for o in targets() {
        assert_eq!(
            eval(&ops::sum(&x, 1), &o),
            ArrayD::<f64>::zeros(IxDyn(&[3]))
        );
        assert_eq!(
            eval(&ops::sum_keepdim(&x, 1), &o),
            ArrayD::<f64>::zeros(IxDyn(&[3, 1]))
        );
        assert_eq!(
            eval(&ops::prod(&x, 1), &o),
            ArrayD::<f64>::ones(IxDyn(&[3]))
        );
        assert_eq!(eval(&ops::sum(&ints, 0), &o), array![0, 0].into_dyn());
        assert_eq!(
            eval(&ops::prod_keepdim(&ints, 0), &o),
            array![[1, 1]].into_dyn()
        );
        assert!(eval(&ops::mean(&x, 1), &o).iter().all(|v| v.is_nan()));
        assert!(eval(&ops::var_keepdim(&x, 1), &o)
            .iter()
            .all(|v| v.is_nan()));
        // Reducing the other axis of an empty tensor gives an empty result; so does an empty
        // axis of a tensor with no rows.
        assert_eq!(eval(&ops::max(&x, 0), &o).shape(), &[0]);
        let none = Lazy::from(ArrayD::<f64>::zeros(IxDyn(&[0, 0])));
        assert_eq!(eval(&ops::max(&none, 1), &o).shape(), &[0]);
        assert_eq!(eval(&ops::min_keepdim(&none, 0), &o).shape(), &[1, 0]);
        assert_eq!(eval(&ops::logsumexp(&none), &o).shape(), &[0]);
        assert_eq!(eval(&ops::layernorm(&none, 1e-5), &o).shape(), &[0, 0]);
    }
    let empty_max = "of an empty axis (axis 1 of a [3, 0] tensor) has no value";
    let (y, line) = (ops::max(&x, 1), line!());
    names(&error_of(&y), "max", line, &[&format!("`max` {empty_max}")]);
    let (y, line) = (ops::min_keepdim(&x, 1), line!());
    names(
        &error_of(&y),
        "min_keepdim",
        line,
        &[&format!("`min_keepdim` {empty_max}")],
    );
    let (y, line) = (ops::max(&ints, 0), line!());
    names(&error_of(&y), "max", line, &["axis 0 of a [0, 2] tensor"]);
}

/// `max_of` over a staged loop that runs no iteration: the accumulator keeps its initial value
/// (`proto/ovl.proto`: "An empty loop leaves it unchanged").
#[operator]
fn row_max_or(x: Tensor<f32>, start: usize) -> Tensor<f32> {
    let [rows, cols] = x.dims::<2>();
    let row = position_in([rows])[0];
    let out = output([rows]);
    let mut top = max_of(f32::NEG_INFINITY);
    let mut low = min_of(7.5f32);
    for j in start..cols {
        top.update(x[[row, j]]);
        low.update(x[[row, j]]);
    }
    out[[row]] = top + low;
    out
}

#[test]
fn an_accumulator_over_an_empty_loop_keeps_its_initial_value_on_every_backend() {
    let x = array![[1.0f32, 2.0], [3.0, -4.0]];
    for o in [
        Options::interpreter(),
        Options::cpu(),
        Options::cuda_validate(),
    ] {
        let y = ovl::evaluate_with(&row_max_or(&x, 2), &o).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(y, array![f32::NEG_INFINITY, f32::NEG_INFINITY].into_dyn());
        let y = ovl::evaluate_with(&row_max_or(&x, 0), &o).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(y, array![3.0f32, -1.0].into_dyn());
    }
}

#[test]
fn nan_propagates_through_sums_and_is_ignored_by_max_and_min_on_every_backend() {
    let nan = f64::NAN;
    let x = array![
        [1.0, nan, 3.0, 2.0],
        [nan, nan, nan, nan],
        [0.5, -1.0, 4.0, 2.5]
    ]
    .into_dyn();
    let all = [
        Options::interpreter(),
        Options::cpu(),
        Options::cuda_validate(),
    ];
    let mut results: Vec<Vec<ArrayD<f64>>> = Vec::new();
    for o in &all {
        let l = Lazy::from(x.clone());
        let ys = [
            ops::sum(&l, 1),
            ops::mean(&l, 1),
            ops::prod(&l, 1),
            ops::var(&l, 1),
            ops::softmax(&l),
            ops::logsumexp(&l),
            ops::max(&l, 1),
            ops::min_keepdim(&l, 1),
        ];
        results.push(ys.iter().map(|y| eval(y, o)).collect());
    }
    let r = &results[0];
    // A row with a NaN: NaN in every sum-like result, NaN-free rows unaffected.
    for (name, y) in [
        ("sum", &r[0]),
        ("mean", &r[1]),
        ("prod", &r[2]),
        ("var", &r[3]),
    ] {
        assert!(
            y[[0]].is_nan() && y[[1]].is_nan() && !y[[2]].is_nan(),
            "{name}: {y}"
        );
    }
    assert!(
        r[4].index_axis(Axis(0), 0).iter().all(|v| v.is_nan()),
        "softmax: {}",
        r[4]
    );
    assert!(
        r[4].index_axis(Axis(0), 2).iter().all(|v| !v.is_nan()),
        "softmax: {}",
        r[4]
    );
    assert!(
        r[5][[0]].is_nan() && !r[5][[2]].is_nan(),
        "logsumexp: {}",
        r[5]
    );
    // max/min: a NaN never wins; only an all-NaN row is NaN.
    assert_eq!(r[6][[0]], 3.0);
    assert!(r[6][[1]].is_nan());
    assert_eq!(r[6][[2]], 4.0);
    assert_eq!(r[7][[0, 0]], 1.0);
    assert!(r[7][[1, 0]].is_nan());
    assert_eq!(r[7][[2, 0]], -1.0);
    for (o, rs) in all.iter().zip(&results).skip(1) {
        for (i, (a, b)) in results[0].iter().zip(rs).enumerate() {
            same_bits(a, b, &format!("result {i} on {:?}", o.target));
        }
    }
}

#[test]
fn integer_sums_and_products_wrap_identically_on_every_backend() {
    let bytes = Array::from_shape_fn((3, 40), |(i, j)| (i * 37 + j * 11) as u8 ^ 0xA5).into_dyn();
    let signed = Array::from_shape_fn((2, 33), |(i, j)| {
        i32::MAX - (i as i32 * 1000) - j as i32 * 7
    })
    .into_dyn();
    let smalls = Array::from_shape_fn((2, 21), |(i, j)| (i + j) as i8 - 9).into_dyn();
    let want_bytes = bytes.map_axis(Axis(1), |r| r.iter().fold(0u8, |a, &b| a.wrapping_add(b)));
    let want_signed = signed.map_axis(Axis(1), |r| r.iter().fold(0i32, |a, &b| a.wrapping_add(b)));
    let want_prod = smalls.map_axis(Axis(1), |r| r.iter().fold(1i8, |a, &b| a.wrapping_mul(b)));
    for o in [
        Options::interpreter(),
        Options::cpu(),
        Options::cuda_validate(),
    ] {
        assert_eq!(
            eval(&ops::sum(bytes.clone(), 1), &o),
            want_bytes,
            "{:?}",
            o.target
        );
        assert_eq!(
            eval(&ops::sum(signed.clone(), 1), &o),
            want_signed,
            "{:?}",
            o.target
        );
        assert_eq!(
            eval(&ops::prod_keepdim(smalls.clone(), 1), &o),
            want_prod.clone().insert_axis(Axis(1)),
            "{:?}",
            o.target
        );
    }
}

/// The kernels `profile` ran for `y` on the C++ backend.
fn kernels<T: ovl::Scalar>(y: &Lazy<T>) -> usize {
    let (_, profile) = ovl::profile(y, &Options::cpu(), 1).unwrap_or_else(|e| panic!("{e}"));
    profile.kernel_count()
}

#[test]
fn reductions_and_shape_functions_fuse_with_their_elementwise_neighbours() {
    let x = Lazy::from(cube());
    // One operator each (mean no longer divides in a second kernel).
    assert_eq!(kernels(&ops::mean(&x, 2)), 1);
    assert_eq!(kernels(&ops::var_keepdim(&x, 1)), 1);
    // A keepdim reduction writes its own element: an elementwise consumer over the kept shape
    // merges into it.
    let scaled = ops::mul(ops::sum_keepdim(&x, 2), ops::sum_keepdim(&x, 2));
    assert_eq!(kernels(&scaled), 1);
    // reshape / expand_dims / squeeze are elementwise producers.
    assert_eq!(kernels(&ops::tanh(ops::reshape(&x, &[12, 5]))), 1);
    assert_eq!(kernels(&ops::exp(ops::expand_dims(&x, 1))), 1);
    let column = Lazy::from(ArrayD::<f64>::ones(IxDyn(&[3, 4, 5, 1])));
    assert_eq!(kernels(&ops::neg(ops::squeeze(&column, 3))), 1);
    // Gradients: the spread of a row's gradient is one elementwise operator that merges with
    // the elementwise gradient operators around it.
    let y = ops::tanh(ops::sum_keepdim(ops::exp(&x), 2));
    let seed = Lazy::from(ArrayD::<f64>::ones(IxDyn(&[3, 4, 1])));
    let grads = ovl::backward(&[(&y, &seed)], &[&x]).unwrap();
    let dx = grads.of(&x).unwrap();
    let report = ovl::fusion(&dx, 3).unwrap().report.to_string();
    assert!(
        report.contains("merged `spread` (#4) into `exp_grad` (#5)"),
        "{report}"
    );
    // The keepdim sum merges with its elementwise consumers, forward and backward.
    assert!(
        report.contains("merged `sum` (#1) into {`tanh` #2, `tanh_grad` #3}"),
        "{report}"
    );
}

/// Every operator behind these functions and their gradients, on the C++ backend and through
/// NVRTC + ptxas (`cuda_validate`, no GPU needed), against the interpreter: C++ within rounding,
/// `cuda_validate`'s values are the interpreter's.
#[test]
fn every_new_operator_and_gradient_compiles_for_cpu_and_cuda() {
    let x = Lazy::from(cube());
    let mut outputs: Vec<Lazy<f64>> = Vec::new();
    for axis in 0..3 {
        for y in [
            ops::sum_keepdim(&x, axis),
            ops::mean(&x, axis),
            ops::prod_keepdim(&x, axis),
            ops::max_keepdim(&x, axis),
            ops::min(&x, axis),
            ops::var_keepdim(&x, axis),
            ops::var(&x, axis),
        ] {
            let seed = Lazy::from(ArrayD::<f64>::ones(IxDyn(y.shape())));
            let grads = ovl::backward(&[(&y, &seed)], &[&x]).unwrap();
            outputs.push(grads.of(&x).unwrap());
            outputs.push(y);
        }
    }
    let rows = ops::reshape(&x, &[12, 5]);
    for y in [
        ops::expand_dims(&rows, 1),
        ops::squeeze(ops::expand_dims(&rows, 2), 2),
        ops::broadcast_to(ops::sum_keepdim(&rows, 1), &[2, 12, 5]),
        ops::softmax(&rows),
        ops::layernorm(&rows, 1e-5),
        ops::rmsnorm(&rows, 1e-5),
    ] {
        let seed = Lazy::from(ArrayD::<f64>::ones(IxDyn(y.shape())));
        let grads = ovl::backward(&[(&y, &seed)], &[&x]).unwrap();
        outputs.push(grads.of(&x).unwrap());
        outputs.push(y);
    }
    let want = ovl::evaluate_with(&outputs, &Options::interpreter()).unwrap();
    let cpu = ovl::evaluate_with(&outputs, &Options::cpu()).unwrap();
    let cuda =
        ovl::evaluate_with(&outputs, &Options::cuda_validate()).unwrap_or_else(|e| panic!("{e}"));
    for (i, w) in want.iter().enumerate() {
        close(&cpu[i], w, &format!("output {i} on the C++ backend"));
        same_bits(&cuda[i], w, &format!("output {i} through cuda_validate"));
    }
}

/// Softmax names `e = exp(x - max)` in two loops; row reuse keeps it in a worker-local buffer
/// (`exp` once per element) for rows of up to 256 KiB on the CPU, and a longer row (or
/// opt_level 0) computes `exp` again; both multiply by the reciprocal of the row's sum. Each
/// path, on the interpreter and C++ (whose f32 `exp` differ by up to an ulp), within a few ulp
/// of the f64 softmax.
#[test]
fn softmax_short_and_long_rows_match_f64_on_every_backend() {
    // 65536 f32 is the longest buffered row on the CPU; 65537 takes the other path; 7 leaves
    // a partial block of lanes.
    for cols in [7usize, 4097, 65536, 65537] {
        let x = Array::from_shape_fn((2, cols), |(r, c)| {
            ((c * 37 + r * 11) % 101) as f32 * 0.17 - 8.0 + r as f32 * 30.0
        })
        .into_dyn();
        let y = ops::softmax(Lazy::from(x.clone()));
        let kept = ovl::fusion(&y, 3).unwrap().report.row_buffers;
        if cols <= 65536 {
            assert_eq!(kept.len(), 1, "cols {cols}: {kept:?}");
            assert_eq!(kept[0].value, "exp");
            assert_eq!(kept[0].buffer, format!("f32[{cols}]"));
        } else {
            assert!(kept.is_empty(), "cols {cols}: {kept:?}");
        }
        for o in targets() {
            for level in [0u8, 3] {
                let got = eval(&y, &o.clone().with_opt_level(level));
                for r in 0..2 {
                    let row: Vec<f64> = (0..cols).map(|c| x[[r, c]] as f64).collect();
                    let top = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let total: f64 = row.iter().map(|v| (v - top).exp()).sum();
                    for c in 0..cols {
                        let want = (row[c] - top).exp() / total;
                        let g = got[[r, c]] as f64;
                        // f32 exp (1 ulp), the sum's rounding, the reciprocal and the product.
                        assert!(
                            (g - want).abs() <= 1e-5 * want,
                            "{:?} at opt_level {level}, cols {cols}: softmax[{r},{c}] = {g}, \
                             want {want}",
                            o.target
                        );
                    }
                }
            }
        }
    }
}

/// Softmax's row buffer has the row's length, not the batch's: a softmax exported for any
/// batch size (the batch symbolic) unifies and runs like the direct evaluation.
#[test]
fn softmax_exports_for_any_batch_size() {
    let bundle = ovl::as_tensorflow_polymorphic(|batch| {
        let x = ovl::placeholder::<f32>("x", &[batch, 5]);
        ovl::as_tensorflow(&x, ops::softmax(&x)).options(&Options::interpreter())
    })
    .build()
    .unwrap_or_else(|e| panic!("{e}"));
    for batch in [1usize, 4] {
        let x = Array::from_shape_fn((batch, 5), |(r, c)| (r * 5 + c) as f32 * 0.3 - 1.0);
        let host = ovl::HostTensor::from_vec(&[batch, 5], x.iter().copied().collect()).unwrap();
        let got = ovl::program::run_program(&bundle.program, vec![host], &Options::interpreter())
            .unwrap_or_else(|e| panic!("{e}"));
        let want = eval(
            &ops::softmax(Lazy::from(x.into_dyn())),
            &Options::interpreter(),
        );
        let want = ovl::HostTensor::from_vec(&[batch, 5], want.iter().copied().collect()).unwrap();
        assert_eq!(got[0], want, "batch {batch}");
    }
}

/// The row buffer is private to each worker, so softmax batched by `vmap` is the softmax of
/// each example, bit for bit.
#[test]
fn softmax_under_vmap_is_the_softmax_of_each_example() {
    let x = Array::from_shape_fn((3, 2, 9), |(b, r, c)| {
        ((b * 31 + r * 7 + c * 5) % 13) as f32 * 0.4 - 2.0
    })
    .into_dyn();
    let xl = Lazy::from(x.clone());
    let (y,) = ovl::vmap(
        |(x,): (Lazy<f32>,)| (ops::softmax(&x),),
        (ovl::Batched(&xl),),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    for o in targets() {
        let got = eval(&y, &o);
        for b in 0..3 {
            let one = x.index_axis(Axis(0), b).to_owned();
            let want = eval(&ops::softmax(Lazy::from(one)), &o);
            for (g, w) in got.index_axis(Axis(0), b).iter().zip(want.iter()) {
                assert_eq!(g.to_bits(), w.to_bits(), "{:?} example {b}", o.target);
            }
        }
    }
}

/// Reductions over a leading axis (a worker per column, reading down the column) run on the
/// CPU in blocks of 64 neighbouring workers in lockstep, then the rest one by one: the same
/// bits as the interpreter, NaN included, for every reduction, at widths with and without a
/// partial block, and split over threads in the middle of a block (3000 columns).
#[test]
fn column_reductions_match_the_interpreter_bit_for_bit() {
    for (shape, axis) in [
        (vec![11usize, 150], 0usize),
        (vec![5, 3, 70], 0),
        (vec![5, 3, 70], 1),
        (vec![2, 64], 0),
        (vec![40, 3000], 0),
    ] {
        let n: usize = shape.iter().product();
        let x = Array::from_shape_fn(IxDyn(&shape), |i: IxDyn| {
            let k = (0..i.ndim()).fold(0usize, |a, d| a * 131 + i[d]);
            if k % 97 == 13 {
                f64::NAN
            } else {
                ((k * 37) % 29) as f64 * 0.31 - 4.0
            }
        });
        assert_eq!(x.len(), n);
        let l = || Lazy::from(x.clone());
        let cases: [(&str, Lazy<f64>); 6] = [
            ("sum", ops::sum(l(), axis)),
            ("mean", ops::mean(l(), axis)),
            ("var", ops::var_keepdim(l(), axis)),
            ("prod", ops::prod(l(), axis)),
            ("max", ops::max(l(), axis)),
            ("min", ops::min_keepdim(l(), axis)),
        ];
        for (name, y) in cases {
            let want = eval(&y, &Options::interpreter());
            let got = eval(&y, &Options::cpu());
            same_bits(&got, &want, &format!("{name} along {axis} of {shape:?}"));
        }
        let xf = x.mapv(|v| v as f32);
        let yf = ops::sum(Lazy::from(xf.clone()), axis);
        let (a, b) = (
            eval(&yf, &Options::interpreter()),
            eval(&yf, &Options::cpu()),
        );
        assert!(
            a.iter().zip(&b).all(|(p, q)| p.to_bits() == q.to_bits()),
            "f32 sum along {axis} of {shape:?}"
        );
        let xi = x.mapv(|v| {
            if v.is_nan() {
                7i32
            } else {
                (v * 1000.0) as i32
            }
        });
        let yi = ops::prod(Lazy::from(xi), axis);
        assert_eq!(
            eval(&yi, &Options::interpreter()),
            eval(&yi, &Options::cpu())
        );
    }
}

/// A matrix product written as an operator, one worker per element folding into a variable
/// (what `ops::matmul` was before it became a library call).
#[ovl::operator]
fn fold_matmul(a: Tensor<f32>, b: Tensor<f32>) -> Tensor<f32> {
    let (m, k, n) = (a.dim(0), a.dim(1), b.dim(1));
    let pos = position_in([m, n]);
    let (i, j) = (pos[0], pos[1]);
    let out = output([m, n]);
    let mut acc = variable(0.0f32);
    for t in 0..k {
        acc += a[[i, t]] * b[[t, j]];
    }
    out[[i, j]] = acc;
    out
}

/// Folds into a variable run blocked too (a worker per output column): a matrix product and
/// `cumsum` down the columns give the interpreter's bits, with and without a partial block.
#[test]
fn column_folds_and_scans_match_the_interpreter_bit_for_bit() {
    for n in [64usize, 150] {
        let a = Array::from_shape_fn((5, 33), |(i, j)| ((i * 33 + j) % 17) as f32 * 0.37 - 3.0);
        let b = Array::from_shape_fn((33, n), |(i, j)| ((i * 7 + j * 3) % 23) as f32 * 0.21 - 2.0);
        let y = fold_matmul(Lazy::from(a.into_dyn()), Lazy::from(b.into_dyn()));
        let (want, got) = (eval(&y, &Options::interpreter()), eval(&y, &Options::cpu()));
        assert!(
            want.iter()
                .zip(&got)
                .all(|(p, q)| p.to_bits() == q.to_bits()),
            "matmul [5, 33] x [33, {n}]"
        );
        let x = Array::from_shape_fn((9, n), |(i, j)| ((i * 5 + j) % 19) as f64 * 0.7 - 6.0);
        let y = ops::cumsum(Lazy::from(x.into_dyn()), 0);
        same_bits(
            &eval(&y, &Options::cpu()),
            &eval(&y, &Options::interpreter()),
            &format!("cumsum down [9, {n}]"),
        );
        let xi = Array::from_shape_fn((9, n), |(i, j)| (i * 1_000_003 + j * 7919) as i32);
        let y = ops::cumsum(Lazy::from(xi.into_dyn()), 0);
        assert_eq!(eval(&y, &Options::cpu()), eval(&y, &Options::interpreter()));
    }
}

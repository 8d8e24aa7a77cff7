//! Issue 18, DSL ergonomics: each friction met by porting opveclib's tests, with a run test
//! here (the compile-time ones are in `tests/compile_fail/`).

use ndarray::{array, ArrayD};
use ovl::prelude::*;

fn interp() -> Options {
    Options::interpreter()
}

// ---------------------------------------------------------------------------------------------
// Item 4: `#[operator(gradient = ..)]`.

/// Clips to `[lo, hi]`; its gradient is attached to every call.
#[operator(gradient = clip_grad)]
fn clip(x: Tensor<f64>, lo: f64, hi: f64) -> Tensor<f64> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = min(max(x[[i]], lo), hi);
    out
}

/// The same operator without the attribute, for the manual `set_gradient` version.
#[operator]
fn clip_plain(x: Tensor<f64>, lo: f64, hi: f64) -> Tensor<f64> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = min(max(x[[i]], lo), hi);
    out
}

/// Called as `clip_grad(x, dy, lo, hi)`: inputs, output gradients, constants.
#[operator]
fn clip_grad(x: Tensor<f64>, dy: Tensor<f64>, lo: f64, hi: f64) -> Tensor<f64> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = select(x[[i]] > lo && x[[i]] < hi, dy[[i]], 0.0);
    out
}

/// Two inputs, two outputs: `(a * b, a + b)`.
#[operator(gradient = mul_add_grad)]
fn mul_add(a: Tensor<f64>, b: Tensor<f64>) -> (Tensor<f64>, Tensor<f64>) {
    let i = position_in(a.shape())[0];
    let p = output_like(&a);
    let s = output_like(&a);
    p[[i]] = a[[i]] * b[[i]];
    s[[i]] = a[[i]] + b[[i]];
    (p, s)
}

#[operator]
fn mul_add_grad(
    a: Tensor<f64>,
    b: Tensor<f64>,
    dp: Tensor<f64>,
    ds: Tensor<f64>,
) -> (Tensor<f64>, Tensor<f64>) {
    let i = position_in(a.shape())[0];
    let da = output_like(&a);
    let db = output_like(&a);
    da[[i]] = dp[[i]] * b[[i]] + ds[[i]];
    db[[i]] = dp[[i]] * a[[i]] + ds[[i]];
    (da, db)
}

/// A plain function may be the gradient too, and say `None` for an input without one.
#[operator(gradient = scale_rows_grad)]
fn scale_rows(x: Tensor<f64>, rows: Tensor<i32>) -> Tensor<f64> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = x[[i]] * (rows[[i]] as f64);
    out
}

fn scale_rows_grad(
    _x: Lazy<f64>,
    rows: Lazy<i32>,
    dy: Lazy<f64>,
) -> (Lazy<f64>, Option<Lazy<i32>>) {
    (
        clip_grad(&dy, &dy, f64::MIN, f64::MAX) * &to_f64(&rows),
        None,
    )
}

#[operator]
fn to_f64(x: Tensor<i32>) -> Tensor<f64> {
    let i = position_in(x.shape())[0];
    let out = output(x.shape());
    out[[i]] = x[[i]] as f64;
    out
}

#[test]
fn gradient_attribute_matches_set_gradient() {
    let x = Lazy::from(array![-1.0f64, 0.05, 0.5, 0.7, 2.0]);
    let dy = Lazy::from(array![1.0f64, 2.0, 3.0, 4.0, 5.0]);

    let y = clip(&x, 0.1, 0.9);
    let auto = ovl::backward(&[(&y, &dy)], &[&x]).unwrap();
    let auto = ovl::evaluate_with(&auto.of(&x).unwrap(), &interp()).unwrap();

    let y2 = clip_plain(&x, 0.1, 0.9);
    assert!(ovl::set_gradient(&y2, |c| {
        vec![Some(
            clip_grad(c.input::<f64>(0), c.output_grad::<f64>(0), 0.1, 0.9).into_untyped(),
        )]
    }));
    let manual = ovl::backward(&[(&y2, &dy)], &[&x]).unwrap();
    let manual = ovl::evaluate_with(&manual.of(&x).unwrap(), &interp()).unwrap();

    // Independently: dy where 0.1 < x < 0.9, else 0.
    let expected = array![0.0f64, 0.0, 3.0, 4.0, 0.0].into_dyn();
    assert_eq!(auto, expected);
    assert_eq!(manual, expected);
    // The attribute's gradient is already set: a second one is refused.
    assert!(!ovl::set_gradient(&y, |_| vec![None]));
    // And the C++ backend agrees.
    let y3 = clip(&x, 0.1, 0.9);
    let g = ovl::backward(&[(&y3, &dy)], &[&x]).unwrap();
    assert_eq!(ovl::evaluate(&g.of(&x).unwrap()).unwrap(), expected);
}

#[test]
fn gradient_attribute_several_inputs_and_outputs() {
    let a = Lazy::from(array![1.0f64, 2.0, -3.0]);
    let b = Lazy::from(array![4.0f64, 0.5, 2.0]);
    let (p, s) = mul_add(&a, &b);
    let dp = Lazy::from(array![1.0f64, 1.0, 2.0]);
    // Only the product is seeded: the sum's gradient is zeros.
    let g = ovl::backward(&[(&p, &dp)], &[&a, &b]).unwrap();
    let da = ovl::evaluate_with(&g.of(&a).unwrap(), &interp()).unwrap();
    let db = ovl::evaluate_with(&g.of(&b).unwrap(), &interp()).unwrap();
    assert_eq!(da, array![4.0, 0.5, 4.0].into_dyn());
    assert_eq!(db, array![1.0, 2.0, -6.0].into_dyn());
    // Both seeded: d/da = dp * b + ds.
    let ds = Lazy::from(array![10.0f64, 20.0, 30.0]);
    let g = ovl::backward(&[(&p, &dp), (&s, &ds)], &[&a]).unwrap();
    let da = ovl::evaluate_with(&g.of(&a).unwrap(), &interp()).unwrap();
    assert_eq!(da, array![14.0, 20.5, 34.0].into_dyn());
}

#[test]
fn gradient_attribute_plain_function_and_no_gradient_input() {
    let x = Lazy::from(array![1.0f64, 2.0, 3.0]);
    let rows = Lazy::from(array![2i32, -1, 3]);
    let y = scale_rows(&x, &rows);
    let dy = Lazy::from(array![1.0f64, 1.0, 0.5]);
    let g = ovl::backward(&[(&y, &dy)], &[&x]).unwrap();
    let dx: ArrayD<f64> = ovl::evaluate_with(&g.of(&x).unwrap(), &interp()).unwrap();
    assert_eq!(dx, array![2.0, -1.0, 1.5].into_dyn());
}

// ---------------------------------------------------------------------------------------------
// Item 1: descending and negative-step staged loops.

/// Reversed cumulative sums along each row with `(0..cols).rev()`, and every other element
/// from the end with `(0..cols).step_by(2).rev()`, and `arange` both ways.
#[operator]
fn descending(x: Tensor<f64>, lo: i64) -> (Tensor<f64>, Tensor<f64>, Tensor<f64>, Tensor<f64>) {
    let [rows, cols] = x.dims::<2>();
    let row = position_in([rows])[0];
    let suffix = output_like(&x);
    let every_other = output([rows, cols]);
    let down = output([rows, cols]);
    let up = output([rows, cols]);
    let mut acc = variable(0.0f64);
    for k in (0..cols).rev() {
        acc += x[[row, k]];
        suffix[[row, k]] = acc;
    }
    // Order matters: a running value records the visiting order.
    let mut step = variable(0.0f64);
    for k in (0..cols).step_by(2).rev() {
        step = step * 10.0 + x[[row, k]];
        every_other[[row, k]] = step;
    }
    let mut t = variable(0.0f64);
    for k in arange(cols as i64 - 1, lo, -2) {
        t = t * 10.0 + x[[row, k]];
        down[[row, k]] = t;
    }
    let mut u = variable(0.0f64);
    let end = x.dim(1) as i64;
    for k in arange(lo + 1, end, 3) {
        u = u * 10.0 + x[[row, k]];
        up[[row, k]] = u;
    }
    (suffix, every_other, down, up)
}

/// The staged-bound forms: the bounds come from a tensor.
#[operator]
fn descending_staged(x: Tensor<f64>, b: Tensor<i64>) -> (Tensor<f64>, Tensor<f64>) {
    let n = x.len();
    let i = position_in([1])[0];
    let a = output([n]);
    let c = output([n]);
    let mut s = variable(0.0f64);
    // b = [lo, hi, step]
    for k in ((b[[0]])..=(b[[1]])).step_by(b[[2]]).rev() {
        s = s * 10.0 + x[[k]];
        a[[k]] = s;
    }
    let mut t = variable(0.0f64);
    for k in arange(b[[1]], b[[0]] - 1, -b[[2]]) {
        t = t * 10.0 + x[[k]];
        c[[k + i]] = t;
    }
    (a, c)
}

/// What the loops visit, in plain Rust: each visited element folded as `acc * 10 + x`.
fn fold_visits(x: &[f64], order: impl Iterator<Item = i64>) -> Vec<f64> {
    let mut out = vec![0.0; x.len()];
    let mut acc = 0.0;
    for k in order {
        acc = acc * 10.0 + x[k as usize];
        out[k as usize] = acc;
    }
    out
}

fn python_range(start: i64, stop: i64, step: i64) -> Vec<i64> {
    let mut v = Vec::new();
    let mut k = start;
    while (step > 0 && k < stop) || (step < 0 && k > stop) {
        v.push(k);
        k += step;
    }
    v
}

#[test]
fn descending_loops_interpreter_and_cpp() {
    let x = array![[1.0f64, 2.0, 3.0, 4.0, 5.0], [6.0, 7.0, 8.0, 9.0, 1.0]];
    for options in [interp(), Options::cpu()] {
        for lo in [-1i64, 1, 7] {
            let (s, e, d, u) = descending(&x, lo);
            let (g0, g1, g2, g3) = ovl::evaluate_with((&s, &e, &d, &u), &options).unwrap();
            let got: Vec<ndarray::Array2<f64>> = [g0, g1, g2, g3]
                .into_iter()
                .map(|g| g.into_dimensionality().unwrap())
                .collect();
            for r in 0..2 {
                let row: Vec<f64> = x.row(r).to_vec();
                let mut suffix = [0.0; 5];
                let mut acc = 0.0;
                for k in (0..5).rev() {
                    acc += row[k];
                    suffix[k] = acc;
                }
                assert_eq!(got[0].row(r).to_vec()[..], suffix[..]);
                let every = fold_visits(&row, [4i64, 2, 0].into_iter());
                assert_eq!(got[1].row(r).to_vec(), every);
                let down = fold_visits(&row, python_range(4, lo, -2).into_iter());
                assert_eq!(got[2].row(r).to_vec(), down, "lo {lo}");
                let up = fold_visits(&row, python_range(lo + 1, 5, 3).into_iter());
                assert_eq!(got[3].row(r).to_vec(), up, "lo {lo}");
            }
        }
        let xs: Vec<f64> = (1..=9).map(|v| v as f64).collect();
        let x1 = ndarray::Array1::from(xs.clone());
        for (lo, hi, st) in [(0i64, 8i64, 3i64), (2, 7, 2), (5, 4, 1), (3, 3, 5)] {
            let (a, c) = descending_staged(&x1, &array![lo, hi, st]);
            let (g0, g1) = ovl::evaluate_with((&a, &c), &options).unwrap();
            let got = [g0, g1];
            let asc: Vec<i64> = (lo..=hi).step_by(st as usize).collect();
            let a_exp = fold_visits(&xs, asc.into_iter().rev());
            let c_exp = fold_visits(&xs, python_range(hi, lo - 1, -st).into_iter());
            assert_eq!(got[0].as_slice().unwrap(), &a_exp[..], "{lo} {hi} {st}");
            assert_eq!(got[1].as_slice().unwrap(), &c_exp[..], "{lo} {hi} {st}");
        }
    }
}

#[operator]
fn zero_step(x: Tensor<f64>) -> Tensor<f64> {
    let i = position_in([1])[0];
    let out = output_like(&x);
    for k in arange(0, 3, 0) {
        out[[k + i]] = 1.0;
    }
    out
}

#[test]
fn arange_zero_step_is_a_trace_error() {
    let err = ovl::evaluate_with(&zero_step(array![1.0f64, 2.0, 3.0]), &interp()).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("the step of `arange` must not be zero"),
        "{msg}"
    );
    assert!(msg.contains("zero_step"), "{msg}");
}

/// A descending loop is one RANGE, however many iterations: the IR does not grow with n.
#[test]
fn descending_loop_is_staged_not_unrolled() {
    let small = descending(ndarray::Array2::<f64>::zeros((1, 3)), -1);
    let large = descending(ndarray::Array2::<f64>::zeros((1, 300)), -1);
    let n_small = small.0.operator_ir().unwrap().expressions.len();
    let n_large = large.0.operator_ir().unwrap().expressions.len();
    assert_eq!(n_small, n_large);
}

// ---------------------------------------------------------------------------------------------
// Item 2: shape comparisons inside an operator run at trace time.

#[operator]
fn add_same_shape(a: Tensor<f32>, b: Tensor<f32>) -> Tensor<f32> {
    if a.shape() != b.shape() {
        trace_error(format!(
            "add_same_shape: shapes {:?} and {:?} differ",
            a.shape(),
            b.shape()
        ));
    }
    if a.dims::<2>() == [0, 0] || a.shape() < &[1, 1] || a.shape().to_vec() != b.shape().to_vec() {
        trace_error("empty");
    }
    let p = position_in(a.shape());
    let (i, j) = (p[0], p[1]);
    let out = output_like(&a);
    out[[i, j]] = a[[i, j]] + b[[i, j]];
    out
}

#[test]
fn shape_comparisons_at_trace_time() {
    let a = array![[1.0f32, 2.0], [3.0, 4.0]];
    let y = ovl::evaluate_with(&add_same_shape(&a, &a), &interp()).unwrap();
    assert_eq!(y, array![[2.0f32, 4.0], [6.0, 8.0]].into_dyn());
    let err =
        ovl::evaluate_with(&add_same_shape(&a, array![[1.0f32, 2.0]]), &interp()).unwrap_err();
    assert!(
        err.to_string().contains("shapes [2, 2] and [1, 2] differ"),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------------
// Item 9: unary `-` only on signed types (compile-fail: negate_unsigned); `wrapping_neg` says
// the wrap is meant.

#[operator]
fn negate_both<T: Signed>(x: Tensor<T>, y: Tensor<u8>) -> (Tensor<T>, Tensor<u8>) {
    let i = position_in(x.shape())[0];
    let a = output_like(&x);
    let b = output_like(&y);
    a[[i]] = -x[[i]];
    b[[i]] = wrapping_neg(y[[i]]);
    (a, b)
}

#[test]
fn negation_signed_and_wrapping() {
    let (a, b) = negate_both(array![1i32, -2, 0], array![2u8, 0, 255]);
    let (a, b) = ovl::evaluate_with((&a, &b), &interp()).unwrap();
    assert_eq!(a, array![-1i32, 2, 0].into_dyn());
    assert_eq!(b, array![254u8, 0, 1].into_dyn());
    let f = -&Lazy::from(array![1.5f32, -2.0]);
    assert_eq!(
        ovl::evaluate_with(&f, &interp()).unwrap(),
        array![-1.5f32, 2.0].into_dyn()
    );
}

// ---------------------------------------------------------------------------------------------
// Item 5: generic operators: literals coerce to `T: Num`, `One`/`Zero` are in the prelude.

#[operator]
fn is_zero_indicator<T: Num>(x: Tensor<T>) -> (Tensor<T>, Tensor<T>) {
    let i = position_in(x.shape())[0];
    let flags = output_like(&x);
    let shifted = output_like(&x);
    flags[[i]] = select(x[[i]] == 0, 1, 0);
    shifted[[i]] = x[[i]] * 2 + T::ONE - T::ZERO;
    let _ones: Tensor<T> = ones::<T>([1]);
    (flags, shifted)
}

fn first_one<T: One + Zero + Copy>() -> (T, T) {
    (T::ONE, T::ZERO)
}

#[test]
fn generic_literals_and_one_zero() {
    let (f, s) = is_zero_indicator(array![0i32, 3, -2]);
    let (flags, shifted) = ovl::evaluate_with((&f, &s), &interp()).unwrap();
    assert_eq!(flags, array![1i32, 0, 0].into_dyn());
    assert_eq!(shifted, array![1i32, 7, -3].into_dyn());
    let (f, s) = is_zero_indicator(array![0.0f64, 0.5]);
    let (f, s) = ovl::evaluate_with((&f, &s), &interp()).unwrap();
    assert_eq!(f, array![1.0f64, 0.0].into_dyn());
    assert_eq!(s, array![1.0f64, 2.0].into_dyn());
    let (f, _) = is_zero_indicator(array![0u8, 9]);
    assert_eq!(
        ovl::evaluate_with(&f, &interp()).unwrap(),
        array![1u8, 0].into_dyn()
    );
    assert_eq!(first_one::<u16>(), (1, 0));
}

// ---------------------------------------------------------------------------------------------
// Item 8: views by value, UnwindSafe handles, `evaluate_into` with any dimensionality.

#[operator]
fn double2(x: Tensor<f32>) -> Tensor<f32> {
    let [r, c] = x.dims::<2>();
    let p = position_in([r, c]);
    let out = output_like(&x);
    out[[p[0], p[1]]] = 2.0 * x[[p[0], p[1]]];
    out
}

#[test]
fn views_by_value_unwind_safe_and_typed_outputs() {
    let m = array![[1.0f32, 2.0, 3.0], [4.0, 5.0, 6.0]];
    let by_value = double2(m.t());
    #[allow(clippy::needless_borrows_for_generic_args)] // by reference, on purpose
    let by_ref = double2(&m.t());
    let expected = array![[2.0f32, 8.0], [4.0, 10.0], [6.0, 12.0]];
    assert_eq!(
        ovl::evaluate_with(&by_value, &interp()).unwrap(),
        expected.clone().into_dyn()
    );
    assert_eq!(
        ovl::evaluate_with(&by_ref, &interp()).unwrap(),
        expected.clone().into_dyn()
    );

    fn unwind_safe<T: std::panic::UnwindSafe + std::panic::RefUnwindSafe>(_: &T) {}
    unwind_safe(&by_value);
    let y = by_value.clone();
    let caught = std::panic::catch_unwind(|| y.shape().to_vec()).unwrap();
    assert_eq!(caught, vec![3, 2]);

    let mut out = ndarray::Array2::<f32>::zeros((3, 2));
    ovl::evaluate_into(&by_value, &mut out, &interp()).unwrap();
    assert_eq!(out, expected);
    let mut wrong_rank = ndarray::Array1::<f32>::zeros(6);
    let err = ovl::evaluate_into(&by_value, &mut wrong_rank, &interp()).unwrap_err();
    assert!(
        err.to_string().contains("[6]") && err.to_string().contains("[3, 2]"),
        "{err}"
    );
    assert_eq!(wrong_rank.len(), 6);
    let mut wrong_shape = ndarray::Array2::<f32>::zeros((2, 3));
    assert!(ovl::evaluate_into(&by_value, &mut wrong_shape, &interp()).is_err());
    assert_eq!(wrong_shape.shape(), &[2, 3]);
}

// ---------------------------------------------------------------------------------------------
// Item 3: empty tensors and 0-d inputs.

#[operator]
fn plus_one(x: Tensor<f32>) -> Tensor<f32> {
    let p = position_in(x.shape());
    let out = output_like(&x);
    out[&p] = x[&p] + 1.0;
    out
}

/// A row sum: the workgroup is the rows, the loop runs over the (maybe empty) columns.
#[operator]
fn row_sums(x: Tensor<f32>) -> (Tensor<f32>, Tensor<f32>) {
    let [rows, cols] = x.dims::<2>();
    let r = position_in([rows])[0];
    let out = output([rows]);
    let untouched = output([4]);
    let mut acc = variable(0.0f32);
    for j in 0..cols {
        acc += x[[r, j]];
    }
    out[[r]] = acc;
    untouched[[r % 4]] = 7.0;
    (out, untouched)
}

#[test]
fn empty_and_zero_d_inputs() {
    for options in [interp(), Options::cpu()] {
        for shape in [vec![0usize], vec![3, 0], vec![0, 2]] {
            let x = ArrayD::<f32>::zeros(ndarray::IxDyn(&shape));
            let y = ovl::evaluate_with(&plus_one(&x), &options).unwrap();
            assert_eq!(y.shape(), &shape[..]);
            // Chained with a non-empty consumer of the empty result.
            let z = ovl::evaluate_with(&plus_one(plus_one(&x)), &options).unwrap();
            assert_eq!(z.shape(), &shape[..]);
        }
        // Three rows of nothing: sums are 0; no row at all: the other output is zeros.
        let (s, u) = row_sums(ndarray::Array2::<f32>::zeros((3, 0)));
        let (s, u) = ovl::evaluate_with((&s, &u), &options).unwrap();
        assert_eq!(s, array![0.0f32, 0.0, 0.0].into_dyn());
        assert_eq!(u, array![7.0f32, 7.0, 7.0, 0.0].into_dyn());
        let (s, u) = row_sums(ndarray::Array2::<f32>::zeros((0, 5)));
        let (s, u) = ovl::evaluate_with((&s, &u), &options).unwrap();
        assert_eq!(s.shape(), &[0]);
        assert_eq!(u, array![0.0f32, 0.0, 0.0, 0.0].into_dyn());
        // A 0-d input: one worker.
        let x0 = ndarray::arr0(41.0f32).into_dyn();
        let y0 = ovl::evaluate_with(&plus_one(&x0), &options).unwrap();
        assert_eq!(y0, ndarray::arr0(42.0f32).into_dyn());
        // And the stdlib agrees on the empty case.
        let e = ovl::evaluate_with(
            &ovl_stdlib::sum(ArrayD::<f32>::zeros(ndarray::IxDyn(&[3, 0])), 1),
            &options,
        )
        .unwrap();
        assert_eq!(e, array![0.0f32, 0.0, 0.0].into_dyn());
    }
}

#[test]
fn handle_arithmetic_on_empty_tensors() {
    let e = Lazy::from(ArrayD::<f32>::zeros(ndarray::IxDyn(&[2, 0])));
    let y = ovl::evaluate_with(&(&e + &e), &interp()).unwrap();
    assert_eq!(y.shape(), &[2, 0]);
}

// ---------------------------------------------------------------------------------------------
// Item 7: handle arithmetic broadcasts like ovl_stdlib, and has `%` and comparisons.

#[test]
fn handle_arithmetic_broadcasts_like_the_stdlib() {
    let a = Lazy::from(array![[1.0f32, 2.0, 3.0], [4.0, 5.0, 6.0]]);
    let row = Lazy::from(array![10.0f32, 20.0, 30.0]);
    let col = Lazy::from(array![[100.0f32], [200.0]]);
    for options in [interp(), Options::cpu()] {
        let sum = ovl::evaluate_with(&(&a + &row), &options).unwrap();
        let expected = array![[11.0f32, 22.0, 33.0], [14.0, 25.0, 36.0]].into_dyn();
        assert_eq!(sum, expected);
        let stdlib = ovl::evaluate_with(&ovl_stdlib::add(&a, &row), &options).unwrap();
        assert_eq!(stdlib, expected);
        let outer = ovl::evaluate_with(&(&col - &row), &options).unwrap();
        assert_eq!(
            outer,
            array![[90.0f32, 80.0, 70.0], [190.0, 180.0, 170.0]].into_dyn()
        );
        let m = Lazy::from(array![7i32, -7, 9]);
        let r = ovl::evaluate_with(&(&m % 4), &options).unwrap();
        assert_eq!(r, array![7 % 4, -7 % 4, 9 % 4].into_dyn());
        let r2 = ovl::evaluate_with(&(&m % &Lazy::from(ndarray::arr0(5i32))), &options).unwrap();
        assert_eq!(r2, array![2, -2, 4].into_dyn());
        let less =
            ovl::evaluate_with(&a.less(Lazy::from(array![2.0f32, 2.0, 7.0])), &options).unwrap();
        assert_eq!(
            less,
            array![[true, false, true], [false, false, true]].into_dyn()
        );
        let eq = ovl::evaluate_with(&a.equal(5.0), &options).unwrap();
        assert_eq!(
            eq,
            array![[false, false, false], [false, true, false]].into_dyn()
        );
        let ge = ovl::evaluate_with(&row.greater_equal(&col), &options).unwrap();
        let ge_std = ovl::evaluate_with(&ovl_stdlib::greater_equal(&row, &col), &options).unwrap();
        assert_eq!(ge, ge_std);
    }
    // Shapes that do not broadcast: the same message as the stdlib's.
    let bad = &a + &Lazy::from(array![1.0f32, 2.0]);
    let err = ovl::evaluate_with(&bad, &interp()).unwrap_err();
    assert!(
        err.to_string()
            .contains("shapes [2, 3] and [2] do not broadcast"),
        "{err}"
    );
    let err = ovl::evaluate_with(&ovl_stdlib::add(&a, array![1.0f32, 2.0]), &interp()).unwrap_err();
    assert!(
        err.to_string()
            .contains("shapes [2, 3] and [2] do not broadcast"),
        "{err}"
    );
}

/// Item 6: names of the prelude. A module's own items named like prelude functions, called with
/// a path inside an operator, are theirs; the prelude's are reached by path too. (A bare call of
/// such a name is the compile error `tests/compile_fail/prelude_name_clash.rs` shows.)
mod own_names {
    use ovl::prelude::*;

    /// The user's own `sigmoid` (a steeper one), and a trace-time `max` of their own.
    #[helper]
    fn sigmoid(v: Expr<f64>) -> Expr<f64> {
        ovl::prelude::sigmoid(v * 2.0)
    }

    fn max(a: usize, b: usize) -> usize {
        if a > b {
            a
        } else {
            b
        }
    }

    #[operator]
    pub fn steep(x: Tensor<f64>) -> Tensor<f64> {
        let n = self::max(x.dim(0), 1);
        let i = position_in([n])[0];
        let out = output([n]);
        out[[i]] = self::sigmoid(x[[i]]) + ovl::prelude::max(x[[i]], 0.0);
        out
    }
}

#[test]
fn own_items_named_like_prelude_functions_by_path() {
    let x = array![-1.0f64, 0.5, 2.0];
    let want: Vec<f64> = x
        .iter()
        .map(|v| 1.0 / (1.0 + (-2.0 * v).exp()) + v.max(0.0))
        .collect();
    for options in [interp(), Options::default()] {
        let got = ovl::evaluate_with(&own_names::steep(&x), &options).unwrap();
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 1e-12, "{g} vs {w}");
        }
    }
}

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
    (clip_grad(&dy, &dy, f64::MIN, f64::MAX) * &to_f64(&rows), None)
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
            clip_grad(&c.input::<f64>(0), &c.output_grad::<f64>(0), 0.1, 0.9).into_untyped(),
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

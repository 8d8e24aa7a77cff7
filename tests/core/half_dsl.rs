//! The half types in the DSL: operators on `Tensor<f16>` and `Tensor<bf16>` with literals and
//! casts, on the interpreter and the C++ backend against values computed here; a literal that
//! does not fit is a trace error at its line; a half tensor fed where an f32 is expected is an
//! error naming both dtypes.

use ndarray::{array, Array1, ArrayD, IxDyn};
use ovl::half::{bf16, f16};
use ovl::prelude::*;

#[operator]
fn scale_shift<T: Float>(x: Tensor<T>) -> (Tensor<T>, Tensor<f32>) {
    let i = position_in(x.shape())[0];
    let y = output_like(&x);
    let wide = output(x.shape());
    y[[i]] = x[[i]] * 0.1 + 3.0;
    wide[[i]] = x[[i]].cast::<f32>() * 0.1;
    (y, wide)
}

fn scale_shift_on<T: Float>(values: &[f32], from: fn(f32) -> T, to: fn(T) -> f32) {
    let x: Vec<T> = values.iter().map(|&v| from(v)).collect();
    for options in [Options::interpreter(), Options::cpu()] {
        let (y, wide) = scale_shift(Array1::from(x.clone()));
        let (y, wide) = ovl::evaluate_with((&y, &wide), &options).unwrap();
        let tenth = to(from(0.1)); // the literal, rounded into T
        let three = to(from(3.0));
        for (k, &xk) in x.iter().enumerate() {
            // Each operation in f32, rounded once into T.
            let want = to(from(to(from(to(xk) * tenth)) + three));
            assert_eq!(to(y[[k]]), want, "{:?} element {k}", options.target);
            assert_eq!(
                wide[[k]],
                to(xk) * 0.1f32,
                "{:?} element {k}",
                options.target
            );
        }
    }
}

#[test]
fn operators_on_half_tensors_round_every_operation() {
    let values = [0.0, -0.0, 1.0, 2.5, -7.75, 1000.0, 6e-5, 65504.0];
    scale_shift_on(&values, f16::from_f32, f16::to_f32);
    scale_shift_on(&values, bf16::from_f32, bf16::to_f32);
}

#[operator]
fn too_big(x: Tensor<f16>) -> Tensor<f16> {
    let i = position_in(x.shape())[0];
    let y = output_like(&x);
    y[[i]] = x[[i]] * 1e5; // error: too_big
    y
}

#[test]
fn a_literal_that_does_not_fit_is_a_trace_error_at_its_line() {
    let line = include_str!("half_dsl.rs")
        .lines()
        .position(|l| l.ends_with("// error: too_big"))
        .unwrap()
        + 1;
    let y = too_big(array![f16::ONE]);
    let err = ovl::evaluate(&y).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, ovl::Error::Trace(_)), "{err:?}");
    assert!(msg.contains(&format!("half_dsl.rs:{line}:")), "{msg}");
    assert!(
        msg.contains("100000") && msg.contains("does not fit in f16"),
        "{msg}"
    );
}

#[operator]
fn negate(x: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let y = output_like(&x);
    y[[i]] = -x[[i]];
    y
}

#[test]
fn a_half_tensor_where_f32_is_expected_names_both_dtypes() {
    let x = ovl::placeholder::<f32>("x", &[2]);
    let step = ovl::compile(&x, negate(&x), &Options::cpu()).unwrap();
    let mut out = vec![ArrayD::<f32>::zeros(IxDyn(&[2]))];
    let halves = Lazy::from(array![bf16::ONE, bf16::ZERO]);
    let err = step.run_into(&halves, &mut out).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("bf16[2]") && msg.contains("f32[2]"), "{msg}");
}

//! The C++ backend's own f32 `exp`, `tanh` and `sigmoid` (vectorizable, see
//! `ovl-codegen/src/cpp/prelude.rs`) over a dense sweep of the f32 line: `exp` at most 1 ulp and
//! `tanh` (a rational approximation) at most 6 ulp from the correctly rounded values, `sigmoid` at
//! most 4 ulp from the f32 formula.
//! The conformance suite checks every math function on edge values; this checks these two
//! everywhere in between.

use ndarray::Array1;
use ovl::prelude::*;
use ovl_core::ir::Op;
use ovl_core::{accuracy, DType};

#[operator]
fn exp_tanh_sigmoid(x: Tensor<f32>) -> (Tensor<f32>, Tensor<f32>, Tensor<f32>) {
    let i = position_in(x.shape())[0];
    let e = output_like(&x);
    let t = output_like(&x);
    let s = output_like(&x);
    e[[i]] = exp(x[[i]]);
    t[[i]] = tanh(x[[i]]);
    s[[i]] = sigmoid(x[[i]]);
    (e, t, s)
}

/// The distance in representable f32 values (NaN matches NaN).
fn ulps(a: f32, b: f32) -> u64 {
    if a.is_nan() && b.is_nan() {
        return 0;
    }
    let key = |f: f32| {
        let i = f.to_bits() as i32;
        if i < 0 {
            i64::from(i32::MIN) - i64::from(i)
        } else {
            i64::from(i)
        }
    };
    key(a).abs_diff(key(b))
}

#[test]
fn exp_tanh_and_sigmoid_within_their_documented_bounds() {
    // Every 4099th bit pattern: about a million values of both signs, every exponent,
    // subnormals, infinities and NaNs.
    let xs: Vec<f32> = (0..=u32::MAX).step_by(4099).map(f32::from_bits).collect();
    let (e, t, s) = exp_tanh_sigmoid(Array1::from(xs.clone()));
    let (e, t, s) = evaluate_with((&e, &t, &s), &Options::cpu()).expect("evaluate");
    let mut worst = [(0u64, 0f32); 3];
    for (k, &x) in xs.iter().enumerate() {
        let want = [
            (x as f64).exp() as f32,
            (x as f64).tanh() as f32,
            1.0 / (1.0 + (-x).exp()),
        ];
        for (f, got) in [e[k], t[k], s[k]].into_iter().enumerate() {
            let d = ulps(got, want[f]);
            if d > worst[f].0 {
                worst[f] = (d, x);
            }
        }
    }
    println!(
        "largest errors (ulp, at): exp {:?}, tanh {:?}, sigmoid {:?}",
        worst[0], worst[1], worst[2]
    );
    // The bounds are the math contract's (`ovl_ir::accuracy`), which the backend tests use.
    let bound = |op| u64::from(accuracy::ulps(op, DType::F32, accuracy::MathBackend::Cpp));
    assert!(
        worst[0].0 <= bound(Op::Exp),
        "exp: {} ulp at {:e}",
        worst[0].0,
        worst[0].1
    );
    assert!(
        worst[1].0 <= bound(Op::Tanh),
        "tanh: {} ulp at {:e}",
        worst[1].0,
        worst[1].1
    );
    // sigmoid against the f32 formula with Rust's expf (the interpreter's definition).
    assert!(
        worst[2].0 <= bound(Op::Sigmoid),
        "sigmoid: {} ulp at {:e}",
        worst[2].0,
        worst[2].1
    );
}

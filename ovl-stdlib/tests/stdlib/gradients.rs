//! Every differentiable operator against central differences in f64, on the interpreter.

use ndarray::{Array, ArrayD, IxDyn};
use ovl::{Lazy, Options};
use ovl_stdlib as ops;

/// Deterministic values in [lo, hi), different for each `seed`.
fn values(shape: &[usize], seed: u64, lo: f64, hi: f64) -> ArrayD<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    Array::from_shape_simple_fn(IxDyn(shape), || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        lo + (hi - lo) * ((s >> 11) as f64 / (1u64 << 53) as f64)
    })
}

fn eval(y: &Lazy<f64>) -> ArrayD<f64> {
    ovl::evaluate_with(y, &Options::interpreter()).unwrap_or_else(|e| panic!("{e}"))
}

/// Checks the gradient of `sum(f(xs) * w)` against central differences.
fn check(name: &str, inputs: Vec<ArrayD<f64>>, f: impl Fn(&[Lazy<f64>]) -> Lazy<f64>) {
    let lazies: Vec<Lazy<f64>> = inputs.iter().cloned().map(Lazy::from).collect();
    let y = f(&lazies);
    let w = values(y.shape(), 99, -1.0, 1.0);
    let refs: Vec<&Lazy<f64>> = lazies.iter().collect();
    let grads = ovl::backward(&[(&y, &Lazy::from(w.clone()))], &refs)
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let loss = |xs: &[ArrayD<f64>]| -> f64 {
        let ls: Vec<Lazy<f64>> = xs.iter().cloned().map(Lazy::from).collect();
        (eval(&f(&ls)) * &w).sum()
    };
    for (i, x) in lazies.iter().enumerate() {
        let analytic = eval(&grads.of_or_zeros(x));
        assert_eq!(
            analytic.shape(),
            inputs[i].shape(),
            "{name}: gradient shape of input {i}"
        );
        for j in 0..inputs[i].len() {
            let h = 1e-6;
            let mut plus = inputs.clone();
            plus[i].as_slice_mut().expect("standard layout")[j] += h;
            let mut minus = inputs.clone();
            minus[i].as_slice_mut().expect("standard layout")[j] -= h;
            let numeric = (loss(&plus) - loss(&minus)) / (2.0 * h);
            let got = analytic.as_slice().expect("standard layout")[j];
            assert!(
                (got - numeric).abs() <= 1e-6 * numeric.abs().max(1.0),
                "{name}: d/dx{i}[{j}] = {got}, central difference {numeric}"
            );
        }
    }
}

#[test]
fn unary_gradients() {
    let x = || vec![values(&[2, 3], 1, -2.0, 2.0)];
    let pos = || vec![values(&[2, 3], 2, 0.2, 3.0)];
    check("neg", x(), |v| ops::neg(&v[0]));
    check("abs", x(), |v| ops::abs(&v[0]));
    check("relu", x(), |v| ops::relu(&v[0]));
    check("tanh", x(), |v| ops::tanh(&v[0]));
    check("sigmoid", x(), |v| ops::sigmoid(&v[0]));
    check("sin", x(), |v| ops::sin(&v[0]));
    check("cos", x(), |v| ops::cos(&v[0]));
    check("tan", vec![values(&[2, 3], 3, -1.0, 1.0)], |v| {
        ops::tan(&v[0])
    });
    check("exp", x(), |v| ops::exp(&v[0]));
    check("log", pos(), |v| ops::log(&v[0]));
    check("sqrt", pos(), |v| ops::sqrt(&v[0]));
    check("clip", x(), |v| ops::clip(&v[0], -1.0, 1.0));
}

/// Through an f32 round trip central differences are too coarse: the gradient of a cast is the
/// output gradient cast back, checked directly.
#[test]
fn cast_gradient_is_the_gradient_cast_back() {
    let x = Lazy::from(values(&[5], 21, -2.0, 2.0));
    let y = ops::cast::<f32, f64>(ops::cast::<f64, f32>(&x));
    let w = values(&[5], 22, -1.0, 1.0);
    let grads = ovl::backward(&[(&y, &Lazy::from(w.clone()))], &[&x]).unwrap();
    let dx = eval(&grads.of(&x).unwrap());
    assert_eq!(dx, w.mapv(|v| v as f32 as f64));
    // Through an integer cast, nothing flows.
    let i = ops::cast::<f64, i32>(&x);
    let z = ops::cast::<i32, f64>(&i);
    let grads = ovl::backward(&[(&z, &Lazy::from(w))], &[&x]).unwrap();
    assert!(grads.of(&x).is_none());
}

#[test]
fn binary_gradients_with_broadcasting() {
    let shapes: [(&[usize], &[usize]); 3] =
        [(&[2, 3], &[2, 3]), (&[2, 3], &[3]), (&[2, 1], &[1, 3])];
    for (sa, sb) in shapes {
        let ab = || vec![values(sa, 4, -2.0, 2.0), values(sb, 5, 0.5, 2.0)];
        check("add", ab(), |v| ops::add(&v[0], &v[1]));
        check("sub", ab(), |v| ops::sub(&v[0], &v[1]));
        check("mul", ab(), |v| ops::mul(&v[0], &v[1]));
        check("div", ab(), |v| ops::div(&v[0], &v[1]));
        check("minimum", ab(), |v| ops::minimum(&v[0], &v[1]));
        check("maximum", ab(), |v| ops::maximum(&v[0], &v[1]));
        let positive = vec![values(sa, 6, 0.5, 2.0), values(sb, 7, -1.5, 1.5)];
        check("pow", positive, |v| ops::pow(&v[0], &v[1]));
    }
    let c = Lazy::from(values(&[2, 3], 8, -1.0, 1.0).mapv(|v| v > 0.0));
    check(
        "select",
        vec![values(&[2, 3], 9, -1.0, 1.0), values(&[3], 10, -1.0, 1.0)],
        |v| ops::select(&c, &v[0], &v[1]),
    );
}

#[test]
fn shape_reduction_and_network_gradients() {
    let x = || vec![values(&[2, 3, 4], 11, -1.0, 1.0)];
    check("transpose", x(), |v| ops::transpose(&v[0], &[2, 0, 1]));
    check("split", x(), |v| {
        let parts = ops::split(&v[0], 2, 2);
        ops::mul(&parts[0], &parts[1])
    });
    check(
        "concat",
        vec![
            values(&[2, 3], 12, -1.0, 1.0),
            values(&[2, 3], 13, -1.0, 1.0),
        ],
        |v| ops::concat(&[v[0].clone(), v[1].clone()], 1),
    );
    for axis in 0..3 {
        check("sum", x(), |v| ops::sum(&v[0], axis));
        check("mean", x(), |v| ops::mean(&v[0], axis));
        check("max", x(), |v| ops::max(&v[0], axis));
        check("min", x(), |v| ops::min(&v[0], axis));
        check("cumsum", x(), |v| ops::cumsum(&v[0], axis));
        check("cumprod", vec![values(&[2, 3, 4], 14, 0.5, 1.5)], |v| {
            ops::cumprod(&v[0], axis)
        });
    }
    check(
        "matmul",
        vec![
            values(&[3, 4], 15, -1.0, 1.0),
            values(&[4, 2], 16, -1.0, 1.0),
        ],
        |v| ops::matmul(&v[0], &v[1]),
    );
    check("softmax", vec![values(&[3, 5], 17, -2.0, 2.0)], |v| {
        ops::softmax(&v[0])
    });
    check("logsumexp", vec![values(&[3, 5], 19, -2.0, 2.0)], |v| {
        ops::logsumexp(&v[0])
    });
    check("layernorm", vec![values(&[3, 11], 20, -2.0, 2.0)], |v| {
        ops::layernorm(&v[0], 1e-5)
    });
    check("rmsnorm", vec![values(&[2, 3, 9], 21, -2.0, 2.0)], |v| {
        ops::rmsnorm(&v[0], 1e-5)
    });
    // A value used twice: the contributions add up.
    check("x * tanh(x) + x", vec![values(&[4], 18, -2.0, 2.0)], |v| {
        ops::add(ops::mul(&v[0], ops::tanh(&v[0])), &v[0])
    });
}

#[test]
fn keepdim_reduction_and_shape_function_gradients() {
    let x = || vec![values(&[2, 3, 4], 25, -1.0, 1.0)];
    for axis in 0..3 {
        check("sum_keepdim", x(), |v| ops::sum_keepdim(&v[0], axis));
        check("mean_keepdim", x(), |v| ops::mean_keepdim(&v[0], axis));
        check("max_keepdim", x(), |v| ops::max_keepdim(&v[0], axis));
        check("min_keepdim", x(), |v| ops::min_keepdim(&v[0], axis));
        check("var", x(), |v| ops::var(&v[0], axis));
        check("var_keepdim", x(), |v| ops::var_keepdim(&v[0], axis));
        check("prod", x(), |v| ops::prod(&v[0], axis));
        check("prod_keepdim", x(), |v| ops::prod_keepdim(&v[0], axis));
        check("squeeze", vec![values(&[2, 1, 3], 26, -1.0, 1.0)], |v| {
            ops::squeeze(&v[0], 1)
        });
    }
    // A product with zeros: one zero gets the product of the others, two zeros none.
    let mut zeros = values(&[3, 4], 27, 0.5, 1.5);
    zeros[[1, 2]] = 0.0;
    zeros[[2, 0]] = 0.0;
    zeros[[2, 3]] = 0.0;
    check("prod with zeros", vec![zeros.clone()], |v| {
        ops::prod(&v[0], 1)
    });
    check("prod_keepdim with zeros", vec![zeros], |v| {
        ops::prod_keepdim(&v[0], 1)
    });
    for axis in 0..=3 {
        check("expand_dims", x(), |v| ops::expand_dims(&v[0], axis));
    }
    for shape in [&[24][..], &[6, 4], &[4, 3, 2], &[2, 12], &[1, 24, 1]] {
        check("reshape", x(), |v| ops::reshape(&v[0], shape));
    }
    check(
        "reshape of a 0-d tensor",
        vec![values(&[], 28, -1.0, 1.0)],
        |v| ops::reshape(&v[0], &[1, 1]),
    );
    check("broadcast_to", vec![values(&[3, 1], 29, -1.0, 1.0)], |v| {
        ops::broadcast_to(&v[0], &[2, 3, 4])
    });
    // Softmax and layer norm written from keepdim statistics.
    check(
        "softmax from ops",
        vec![values(&[3, 5], 30, -2.0, 2.0)],
        |v| {
            let e = ops::exp(ops::sub(&v[0], ops::max_keepdim(&v[0], 1)));
            ops::div(&e, ops::sum_keepdim(&e, 1))
        },
    );
    check(
        "layernorm from ops",
        vec![values(&[3, 6], 31, -2.0, 2.0)],
        |v| {
            let c = ops::sub(&v[0], ops::mean_keepdim(&v[0], 1));
            ops::div(&c, ops::sqrt(ops::var_keepdim(&v[0], 1)))
        },
    );
}

#[test]
fn missing_gradients_and_bad_seeds_are_errors() {
    let x = Lazy::from(values(&[3], 19, -1.0, 1.0));
    let y = ops::tanh(&x);
    let wrong = Lazy::from(values(&[4], 20, -1.0, 1.0));
    let err = ovl::backward(&[(&y, &wrong)], &[&x])
        .unwrap_err()
        .to_string();
    assert!(err.contains("[3]") && err.contains("[4]"), "{err}");
}

/// `2 x`, written here without a gradient (derived from its IR).
#[ovl::operator]
fn double(x: ovl::Tensor<f64>) -> ovl::Tensor<f64> {
    use ovl::prelude::*;
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = 2.0 * x[[i]];
    out
}

#[test]
fn derived_or_broken_gradient_functions() {
    let x = Lazy::from(values(&[3], 23, -1.0, 1.0));
    let seed = Lazy::from(values(&[3], 24, -1.0, 1.0));
    // Without a gradient function, the gradient is derived from the operator's IR: 2 dy.
    let y = double(&x);
    let g = ovl::backward(&[(&y, &seed)], &[&x]).unwrap();
    let g = ovl::evaluate_with(&g.of(&x).unwrap(), &Options::interpreter()).unwrap();
    let s = ovl::evaluate_with(&seed, &Options::interpreter()).unwrap();
    assert_eq!(g, s.mapv(|v| 2.0 * v));

    // A gradient function that asks for the wrong dtype panics inside; `backward` reports it.
    let y = double(&x);
    assert!(ovl::set_gradient(&y, |c| vec![Some(
        c.input::<f32>(0).into_untyped()
    )]));
    assert!(
        !ovl::set_gradient(&y, |_| vec![None]),
        "a call has one gradient"
    );
    let err = ovl::backward(&[(&y, &seed)], &[&x])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`double`") && err.contains("panicked"),
        "{err}"
    );
}

/// Arithmetic on handles (`&a * &b`, `x / 2.0`, `-x`, ...) has gradients, broadcasting
/// operands included, and they match `ovl_stdlib`'s functions of the same arithmetic.
#[test]
fn arithmetic_on_handles() {
    let (a, b) = (values(&[2, 3], 11, -2.0, 2.0), values(&[3], 12, 0.5, 2.0));
    let pair = || vec![a.clone(), b.clone()];
    check("&a + &b", pair(), |x| &x[0] + &x[1]);
    check("&a - &b", pair(), |x| &x[0] - &x[1]);
    check("&a * &b", pair(), |x| &x[0] * &x[1]);
    check("&a / &b", pair(), |x| &x[0] / &x[1]);
    check(
        "&b / &a (b broadcast)",
        vec![b.clone(), values(&[2, 3], 13, 0.5, 2.0)],
        |x| &x[0] / &x[1],
    );
    check("scalars", vec![a.clone()], |x| {
        let y = 3.0 * &x[0] - 1.5;
        (2.0 - &y) / 4.0 * &x[0]
    });
    // `%` has a gradient for its dividend only (as `ops::rem`).
    check("neg and rem", pair(), |x| -(&x[0] % 1.75) * &x[1]);
    check("a chain", pair(), |x| {
        let y = &x[0] * &x[1] + &x[1];
        &y * &y / (&x[1] + 1.0)
    });
    // The same values as the stdlib's functions.
    let (la, lb) = (Lazy::from(a.clone()), Lazy::from(b.clone()));
    let seed = Lazy::from(values(&[2, 3], 14, -1.0, 1.0));
    let handles = ovl::backward(&[(&(&la * &lb), &seed)], &[&la, &lb]).unwrap();
    let stdlib = ovl::backward(&[(&ops::mul(&la, &lb), &seed)], &[&la, &lb]).unwrap();
    for x in [&la, &lb] {
        let (h, s) = (eval(&handles.of_or_zeros(x)), eval(&stdlib.of_or_zeros(x)));
        for (p, q) in h.iter().zip(&s) {
            assert!((p - q).abs() <= 1e-12 * q.abs().max(1.0), "{p} against {q}");
        }
    }
}

/// A gradient the user attaches to arithmetic on handles replaces the built-in one.
#[test]
fn an_attached_gradient_replaces_the_built_in_one() {
    let x = Lazy::from(values(&[4], 21, -1.0, 1.0));
    let y = &x * 3.0;
    assert!(ovl::set_gradient(&y, |c| {
        vec![Some((c.output_grad::<f64>(0) * 5.0).into_untyped())]
    }));
    let seed = Lazy::from(ndarray::Array1::from_elem(4, 1.0f64).into_dyn());
    let g = ovl::backward(&[(&y, &seed)], &[&x]).unwrap();
    assert!(eval(&g.of_or_zeros(&x)).iter().all(|&v| v == 5.0));
    // A second attached gradient is refused, as for any call.
    assert!(!ovl::set_gradient(&y, |_| vec![None]));
}

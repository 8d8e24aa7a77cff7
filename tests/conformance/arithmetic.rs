//! Arithmetic, min/max, negation and absolute value on every numeric dtype, over all pairs of
//! edge values (integer overflow, division by zero, MIN / -1, negative modulo, NaN, infinities).

use super::support::{assert_all_same, eval, pairs, Reference};
use ndarray::Array1;
use ovl::prelude::*;

/// Every binary arithmetic operator at once: one kernel, seven outputs.
#[operator]
#[allow(clippy::type_complexity)]
pub fn binary_ops<T: Num>(
    a: Tensor<T>,
    b: Tensor<T>,
) -> (
    Tensor<T>,
    Tensor<T>,
    Tensor<T>,
    Tensor<T>,
    Tensor<T>,
    Tensor<T>,
    Tensor<T>,
) {
    let i = position_in(a.shape())[0];
    let outs = (
        output_like(&a),
        output_like(&a),
        output_like(&a),
        output_like(&a),
        output_like(&a),
        output_like(&a),
        output_like(&a),
    );
    let (x, y) = (a[[i]], b[[i]]);
    outs.0[[i]] = x + y;
    outs.1[[i]] = x - y;
    outs.2[[i]] = x * y;
    outs.3[[i]] = x / y;
    outs.4[[i]] = x % y;
    outs.5[[i]] = min(x, y);
    outs.6[[i]] = max(x, y);
    outs
}

#[operator]
pub fn unary_ops<T: Num>(a: Tensor<T>) -> (Tensor<T>, Tensor<T>) {
    let i = position_in(a.shape())[0];
    let neg = output_like(&a);
    let absolute = output_like(&a);
    neg[[i]] = wrapping_neg(a[[i]]); // NEG of every dtype; `-` is for signed ones
    absolute[[i]] = abs(a[[i]]);
    (neg, absolute)
}

pub fn check<T: Reference + Num>(options: &Options) {
    let (a, b) = pairs::<T>();
    let show = |i: usize| format!("a = {:?}, b = {:?}", a[i], b[i]);
    let outs = binary_ops(Array1::from(a.clone()), Array1::from(b.clone()));
    let (sum, diff, prod, quot, rem, lo, hi) = ovl::evaluate_with(
        (
            &outs.0, &outs.1, &outs.2, &outs.3, &outs.4, &outs.5, &outs.6,
        ),
        options,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let expect = |f: fn(T, T) -> T| a.iter().zip(&b).map(|(&x, &y)| f(x, y)).collect::<Vec<T>>();
    assert_all_same("a + b", &sum, &expect(T::add), &show);
    assert_all_same("a - b", &diff, &expect(T::sub), &show);
    assert_all_same("a * b", &prod, &expect(T::mul), &show);
    assert_all_same("a / b", &quot, &expect(T::div), &show);
    assert_all_same("a % b", &rem, &expect(T::rem), &show);
    assert_all_same("min(a, b)", &lo, &expect(T::min), &show);
    assert_all_same("max(a, b)", &hi, &expect(T::max), &show);

    let e = T::edges();
    let (neg, absolute) = unary_ops(Array1::from(e.clone()));
    let neg = eval(&neg, options);
    let absolute = eval(&absolute, options);
    let show = |i: usize| format!("a = {:?}", e[i]);
    assert_all_same(
        "-a",
        &neg,
        &e.iter().map(|&x| T::neg(x)).collect::<Vec<_>>(),
        &show,
    );
    assert_all_same(
        "abs(a)",
        &absolute,
        &e.iter().map(|&x| T::abs(x)).collect::<Vec<_>>(),
        &show,
    );
}

/// Literals mixed with staged values are converted to the staged dtype.
#[operator]
pub fn with_literals(a: Tensor<f32>, n: Tensor<i64>) -> (Tensor<f32>, Tensor<i64>) {
    let i = position_in(a.shape())[0];
    let f = output_like(&a);
    let k = output_like(&n);
    f[[i]] = 2.0 * a[[i]] + 1 - 0.5 / a[[i]];
    k[[i]] = 3 * n[[i]] + 7 - (n[[i]] % 4);
    (f, k)
}

pub fn literals(options: &Options) {
    let a = vec![1.0f32, 2.0, -4.0, 0.25];
    let n = vec![-9i64, 0, 5, 1 << 40];
    let (f, k) = with_literals(Array1::from(a.clone()), Array1::from(n.clone()));
    let (f, k) = ovl::evaluate_with((&f, &k), options).unwrap();
    for i in 0..4 {
        assert_eq!(f[[i]], 2.0 * a[i] + 1.0 - 0.5 / a[i]);
        assert_eq!(k[[i]], 3 * n[i] + 7 - (n[i] % 4));
    }
}

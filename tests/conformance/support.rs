//! Independent Rust reference semantics and edge values for the conformance suite.

use ndarray::ArrayD;
use ovl::{Lazy, Options, Scalar};

/// Evaluates `out` with `options`, panicking with the error's message on failure.
pub fn eval<T: Scalar>(out: &Lazy<T>, options: &Options) -> ArrayD<T> {
    ovl::evaluate_with(out, options).unwrap_or_else(|e| panic!("evaluation failed: {e}"))
}

/// Element types with reference semantics written with Rust's own operations.
pub trait Reference: Scalar + std::fmt::Debug {
    /// Values every test runs through: zeros, ones, extremes, NaN, infinities, ...
    fn edges() -> Vec<Self>;
    fn add(a: Self, b: Self) -> Self;
    fn sub(a: Self, b: Self) -> Self;
    fn mul(a: Self, b: Self) -> Self;
    fn div(a: Self, b: Self) -> Self;
    fn rem(a: Self, b: Self) -> Self;
    fn min(a: Self, b: Self) -> Self;
    fn max(a: Self, b: Self) -> Self;
    fn neg(a: Self) -> Self;
    fn abs(a: Self) -> Self;
    /// Bit-exact equality (NaN equals NaN, 0 differs from -0).
    fn same(a: Self, b: Self) -> bool;
}

macro_rules! signed {
    ($($t:ty),*) => {$(
        impl Reference for $t {
            fn edges() -> Vec<Self> {
                vec![0, 1, -1, 2, -2, 3, -3, 7, -7, 100, -100, <$t>::MIN, <$t>::MAX, <$t>::MIN + 1, <$t>::MAX - 1]
            }
            fn add(a: Self, b: Self) -> Self { a.wrapping_add(b) }
            fn sub(a: Self, b: Self) -> Self { a.wrapping_sub(b) }
            fn mul(a: Self, b: Self) -> Self { a.wrapping_mul(b) }
            fn div(a: Self, b: Self) -> Self { if b == 0 { 0 } else { a.wrapping_div(b) } }
            fn rem(a: Self, b: Self) -> Self { if b == 0 { 0 } else { a.wrapping_rem(b) } }
            fn min(a: Self, b: Self) -> Self { Ord::min(a, b) }
            fn max(a: Self, b: Self) -> Self { Ord::max(a, b) }
            fn neg(a: Self) -> Self { a.wrapping_neg() }
            fn abs(a: Self) -> Self { a.wrapping_abs() }
            fn same(a: Self, b: Self) -> bool { a == b }
        }
    )*};
}
signed!(i8, i16, i32, i64);

macro_rules! unsigned {
    ($($t:ty),*) => {$(
        impl Reference for $t {
            fn edges() -> Vec<Self> {
                vec![0, 1, 2, 3, 7, 100, <$t>::MAX, <$t>::MAX - 1, <$t>::MAX / 2, <$t>::MAX / 2 + 1]
            }
            fn add(a: Self, b: Self) -> Self { a.wrapping_add(b) }
            fn sub(a: Self, b: Self) -> Self { a.wrapping_sub(b) }
            fn mul(a: Self, b: Self) -> Self { a.wrapping_mul(b) }
            fn div(a: Self, b: Self) -> Self { if b == 0 { 0 } else { a / b } }
            fn rem(a: Self, b: Self) -> Self { if b == 0 { 0 } else { a % b } }
            fn min(a: Self, b: Self) -> Self { Ord::min(a, b) }
            fn max(a: Self, b: Self) -> Self { Ord::max(a, b) }
            fn neg(a: Self) -> Self { a.wrapping_neg() }
            fn abs(a: Self) -> Self { a }
            fn same(a: Self, b: Self) -> bool { a == b }
        }
    )*};
}
unsigned!(u8, u16, u32, u64);

macro_rules! float {
    ($($t:ty),*) => {$(
        impl Reference for $t {
            fn edges() -> Vec<Self> {
                vec![0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -3.25, 1e-3, 123.456, -987.5,
                     <$t>::MIN_POSITIVE, <$t>::MIN_POSITIVE / 4.0, <$t>::MAX, <$t>::MIN,
                     <$t>::EPSILON, <$t>::INFINITY, <$t>::NEG_INFINITY, <$t>::NAN]
            }
            fn add(a: Self, b: Self) -> Self { a + b }
            fn sub(a: Self, b: Self) -> Self { a - b }
            fn mul(a: Self, b: Self) -> Self { a * b }
            fn div(a: Self, b: Self) -> Self { a / b }
            fn rem(a: Self, b: Self) -> Self { a % b }
            fn min(a: Self, b: Self) -> Self { a.min(b) }
            fn max(a: Self, b: Self) -> Self { a.max(b) }
            fn neg(a: Self) -> Self { -a }
            fn abs(a: Self) -> Self { a.abs() }
            fn same(a: Self, b: Self) -> bool { (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits() }
        }
    )*};
}
float!(f32, f64);

/// The half types: each operation on the exact f32 values, rounded once (`proto/ovl.proto`,
/// "Half types"), with the `half` crate's rounding.
macro_rules! half_float {
    ($($t:ty),*) => {$(
        impl Reference for $t {
            fn edges() -> Vec<Self> {
                let mut e: Vec<Self> = [0.0f32, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -3.25, 1e-3, 123.456, -987.5]
                    .into_iter()
                    .map(<$t>::from_f32)
                    .collect();
                e.extend([<$t>::MIN_POSITIVE, <$t>::MIN_POSITIVE_SUBNORMAL, <$t>::MAX, <$t>::MIN,
                          <$t>::EPSILON, <$t>::INFINITY, <$t>::NEG_INFINITY, <$t>::NAN]);
                e
            }
            fn add(a: Self, b: Self) -> Self { <$t>::from_f32(a.to_f32() + b.to_f32()) }
            fn sub(a: Self, b: Self) -> Self { <$t>::from_f32(a.to_f32() - b.to_f32()) }
            fn mul(a: Self, b: Self) -> Self { <$t>::from_f32(a.to_f32() * b.to_f32()) }
            fn div(a: Self, b: Self) -> Self { <$t>::from_f32(a.to_f32() / b.to_f32()) }
            fn rem(a: Self, b: Self) -> Self { <$t>::from_f32(a.to_f32() % b.to_f32()) }
            fn min(a: Self, b: Self) -> Self { <$t>::from_f32(a.to_f32().min(b.to_f32())) }
            fn max(a: Self, b: Self) -> Self { <$t>::from_f32(a.to_f32().max(b.to_f32())) }
            fn neg(a: Self) -> Self { <$t>::from_f32(-a.to_f32()) }
            fn abs(a: Self) -> Self { <$t>::from_f32(a.to_f32().abs()) }
            fn same(a: Self, b: Self) -> bool { (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits() }
        }
    )*};
}
half_float!(ovl::half::f16, ovl::half::bf16);

/// All pairs of edge values, as two flat vectors.
pub fn pairs<T: Reference>() -> (Vec<T>, Vec<T>) {
    let e = T::edges();
    let mut a = Vec::new();
    let mut b = Vec::new();
    for &x in &e {
        for &y in &e {
            a.push(x);
            b.push(y);
        }
    }
    (a, b)
}

/// Asserts bit-exact agreement of `got` with `expected(inputs...)`.
pub fn assert_all_same<T: Reference>(
    what: &str,
    got: &ArrayD<T>,
    expected: &[T],
    inputs: &dyn Fn(usize) -> String,
) {
    assert_eq!(got.len(), expected.len(), "{what}: length");
    for (i, (&g, &e)) in got.iter().zip(expected).enumerate() {
        assert!(
            T::same(g, e),
            "{what} ({}) for {}: got {g:?}, expected {e:?}",
            std::any::type_name::<T>(),
            inputs(i)
        );
    }
}

/// Floats within `ulps` units in the last place (NaN matches NaN, infinities must match).
pub fn close_f64(got: f64, expected: f64, ulps: u64) -> bool {
    if got.is_nan() || expected.is_nan() {
        return got.is_nan() && expected.is_nan();
    }
    if got.is_infinite() || expected.is_infinite() {
        return got == expected;
    }
    if got == expected {
        return true;
    }
    let key = |x: f64| {
        let b = x.to_bits() as i64;
        if b < 0 {
            i64::MIN - b
        } else {
            b
        }
    };
    key(got).abs_diff(key(expected)) <= ulps
}

/// Like [`close_f64`] for f32.
pub fn close_f32(got: f32, expected: f32, ulps: u32) -> bool {
    if got.is_nan() || expected.is_nan() {
        return got.is_nan() && expected.is_nan();
    }
    if got.is_infinite() || expected.is_infinite() {
        return got == expected;
    }
    if got == expected {
        return true;
    }
    let key = |x: f32| {
        let b = x.to_bits() as i32;
        if b < 0 {
            i32::MIN - b
        } else {
            b
        }
    };
    key(got).abs_diff(key(expected)) <= ulps
}

//! Casts between every pair of dtypes, with Rust `as` semantics (float to int saturates,
//! NaN becomes 0), to bool as `x != 0`, from bool as 0/1.

use super::support::Reference;
use ndarray::Array1;
use ovl::prelude::*;

/// Casts one input to all eleven dtypes: one kernel, eleven outputs.
#[operator]
#[allow(clippy::type_complexity)]
pub fn cast_all<S: Scalar>(
    x: Tensor<S>,
) -> (
    Tensor<f32>,
    Tensor<f64>,
    Tensor<i8>,
    Tensor<i16>,
    Tensor<i32>,
    Tensor<i64>,
    Tensor<u8>,
    Tensor<u16>,
    Tensor<u32>,
    Tensor<u64>,
    Tensor<bool>,
) {
    let i = position_in(x.shape())[0];
    let n = x.shape();
    let o = (
        output(n),
        output(n),
        output(n),
        output(n),
        output(n),
        output(n),
        output(n),
        output(n),
        output(n),
        output(n),
        output(n),
    );
    let v = x[[i]];
    o.0[[i]] = v.cast::<f32>();
    o.1[[i]] = v.cast::<f64>();
    o.2[[i]] = v as i8;
    o.3[[i]] = v as i16;
    o.4[[i]] = v as i32;
    o.5[[i]] = v as i64;
    o.6[[i]] = v as u8;
    o.7[[i]] = v as u16;
    o.8[[i]] = v as u32;
    o.9[[i]] = v as u64;
    o.10[[i]] = v as bool;
    o
}

/// What Rust's `as` does, extended with `x != 0` for a cast to bool.
pub trait AsAll: Copy {
    fn as_f32(self) -> f32;
    fn as_f64(self) -> f64;
    fn as_i8(self) -> i8;
    fn as_i16(self) -> i16;
    fn as_i32(self) -> i32;
    fn as_i64(self) -> i64;
    fn as_u8(self) -> u8;
    fn as_u16(self) -> u16;
    fn as_u32(self) -> u32;
    fn as_u64(self) -> u64;
    fn as_bool(self) -> bool;
}

macro_rules! as_all {
    ($($t:ty => $zero:expr),*) => {$(
        impl AsAll for $t {
            fn as_f32(self) -> f32 { self as f32 }
            fn as_f64(self) -> f64 { self as f64 }
            fn as_i8(self) -> i8 { self as i8 }
            fn as_i16(self) -> i16 { self as i16 }
            fn as_i32(self) -> i32 { self as i32 }
            fn as_i64(self) -> i64 { self as i64 }
            fn as_u8(self) -> u8 { self as u8 }
            fn as_u16(self) -> u16 { self as u16 }
            fn as_u32(self) -> u32 { self as u32 }
            fn as_u64(self) -> u64 { self as u64 }
            #[allow(clippy::float_cmp)]
            fn as_bool(self) -> bool { self != $zero }
        }
    )*};
}
as_all!(f32 => 0.0, f64 => 0.0, i8 => 0, i16 => 0, i32 => 0, i64 => 0, u8 => 0, u16 => 0, u32 => 0, u64 => 0);

/// A half value casts as its exact f32 value.
macro_rules! as_all_half {
    ($($t:ty),*) => {$(
        impl AsAll for $t {
            fn as_f32(self) -> f32 { self.to_f32() }
            fn as_f64(self) -> f64 { self.to_f32() as f64 }
            fn as_i8(self) -> i8 { self.to_f32() as i8 }
            fn as_i16(self) -> i16 { self.to_f32() as i16 }
            fn as_i32(self) -> i32 { self.to_f32() as i32 }
            fn as_i64(self) -> i64 { self.to_f32() as i64 }
            fn as_u8(self) -> u8 { self.to_f32() as u8 }
            fn as_u16(self) -> u16 { self.to_f32() as u16 }
            fn as_u32(self) -> u32 { self.to_f32() as u32 }
            fn as_u64(self) -> u64 { self.to_f32() as u64 }
            fn as_bool(self) -> bool { self.to_f32() != 0.0 }
        }
    )*};
}
as_all_half!(ovl::half::f16, ovl::half::bf16);

impl AsAll for bool {
    fn as_f32(self) -> f32 {
        self as u8 as f32
    }
    fn as_f64(self) -> f64 {
        self as u8 as f64
    }
    fn as_i8(self) -> i8 {
        self as i8
    }
    fn as_i16(self) -> i16 {
        self as i16
    }
    fn as_i32(self) -> i32 {
        self as i32
    }
    fn as_i64(self) -> i64 {
        self as i64
    }
    fn as_u8(self) -> u8 {
        self as u8
    }
    fn as_u16(self) -> u16 {
        self as u16
    }
    fn as_u32(self) -> u32 {
        self as u32
    }
    fn as_u64(self) -> u64 {
        self as u64
    }
    fn as_bool(self) -> bool {
        self
    }
}

fn same_f32(a: f32, b: f32) -> bool {
    (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits()
}
fn same_f64(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits()
}

pub fn check_from<S: Scalar + AsAll>(values: Vec<S>, options: &Options) {
    let o = cast_all(Array1::from(values.clone()));
    let r = ovl::evaluate_with((&o.0, &o.1, &o.2, &o.3, &o.4, &o.5, &o.6, &o.7), options)
        .unwrap_or_else(|e| panic!("{e}"));
    let r2 = ovl::evaluate_with((&o.8, &o.9, &o.10), options).unwrap_or_else(|e| panic!("{e}"));
    let from = std::any::type_name::<S>();
    for (i, &v) in values.iter().enumerate() {
        assert!(
            same_f32(r.0[[i]], v.as_f32()),
            "{v:?} as f32 (from {from}): {}",
            r.0[[i]]
        );
        assert!(
            same_f64(r.1[[i]], v.as_f64()),
            "{v:?} as f64 (from {from}): {}",
            r.1[[i]]
        );
        assert_eq!(r.2[[i]], v.as_i8(), "{v:?} as i8 (from {from})");
        assert_eq!(r.3[[i]], v.as_i16(), "{v:?} as i16 (from {from})");
        assert_eq!(r.4[[i]], v.as_i32(), "{v:?} as i32 (from {from})");
        assert_eq!(r.5[[i]], v.as_i64(), "{v:?} as i64 (from {from})");
        assert_eq!(r.6[[i]], v.as_u8(), "{v:?} as u8 (from {from})");
        assert_eq!(r.7[[i]], v.as_u16(), "{v:?} as u16 (from {from})");
        assert_eq!(r2.0[[i]], v.as_u32(), "{v:?} as u32 (from {from})");
        assert_eq!(r2.1[[i]], v.as_u64(), "{v:?} as u64 (from {from})");
        assert_eq!(r2.2[[i]], v.as_bool(), "{v:?} as bool (from {from})");
    }
}

pub fn check<S: Scalar + AsAll + Reference>(options: &Options) {
    check_from(S::edges(), options);
}

pub fn check_bool(options: &Options) {
    check_from(vec![false, true, true, false], options);
}

/// Float values around the integer limits, where saturation matters.
pub fn float_limits(options: &Options) {
    check_from(
        vec![
            127.9f64,
            128.0,
            -128.9,
            -129.0,
            255.5,
            256.0,
            65535.9,
            2147483647.0,
            2147483648.0,
            -2147483649.0,
            4294967296.0,
            9.3e18,
            -9.3e18,
            1.9e19,
            -0.9,
            0.9,
            1e300,
            f64::NAN,
        ],
        options,
    );
    check_from(
        vec![2147483520.0f32, 2147483648.0, 3.0e9, -3.0e9, 1.8e19, 4.0e19],
        options,
    );
}

/// Casts one input to both half types.
#[operator]
pub fn cast_to_halves<S: Scalar>(
    x: Tensor<S>,
) -> (Tensor<ovl::half::f16>, Tensor<ovl::half::bf16>) {
    let i = position_in(x.shape())[0];
    let o = (output(x.shape()), output(x.shape()));
    let v = x[[i]];
    o.0[[i]] = v.cast::<ovl::half::f16>();
    o.1[[i]] = v.cast::<ovl::half::bf16>();
    o
}

fn check_to_halves<S: Scalar + AsAll>(values: Vec<S>, options: &Options) {
    use ovl::half::{bf16, f16};
    let o = cast_to_halves(Array1::from(values.clone()));
    let (h, b) = ovl::evaluate_with((&o.0, &o.1), options).unwrap_or_else(|e| panic!("{e}"));
    let from = std::any::type_name::<S>();
    for (i, &v) in values.iter().enumerate() {
        // A cast to a half type is a cast to f32, rounded once.
        let (eh, eb) = (f16::from_f32(v.as_f32()), bf16::from_f32(v.as_f32()));
        let same = |g: u16, e: u16, nan: bool| g == e || nan;
        assert!(
            same(
                h[[i]].to_bits(),
                eh.to_bits(),
                eh.is_nan() && h[[i]].is_nan()
            ),
            "{v:?} as f16 (from {from}): {:?}, expected {eh:?}",
            h[[i]]
        );
        assert!(
            same(
                b[[i]].to_bits(),
                eb.to_bits(),
                eb.is_nan() && b[[i]].is_nan()
            ),
            "{v:?} as bf16 (from {from}): {:?}, expected {eb:?}",
            b[[i]]
        );
    }
}

/// Every dtype into the half types: overflow to infinity, subnormals, -0, NaN, ties to even.
pub fn to_halves(options: &Options) {
    let sub = 2f32.powi(-24);
    let mut f32s = f32::edges();
    f32s.extend([
        65504.0,
        65519.0,
        65520.0,
        -1e9,
        sub * 0.5,
        sub * 1.5,
        1.0 + 2f32.powi(-11),
    ]);
    check_to_halves(f32s, options);
    check_to_halves(f64::edges(), options);
    check_to_halves(i64::edges(), options);
    check_to_halves(u64::edges(), options);
    check_to_halves(i8::edges(), options);
    check_to_halves(vec![false, true], options);
    check_to_halves(ovl::half::f16::edges(), options);
    check_to_halves(ovl::half::bf16::edges(), options);
}

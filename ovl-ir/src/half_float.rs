//! The half types' rounding, written once for every Rust reader of the IR (the interpreter,
//! literals, the code generators' constants): a value of dtype f16 or bf16 is an f32 rounded to
//! nearest even into the half type (`proto/ovl.proto`, "Half types"). Conversions are the
//! `half` crate's (re-exported as [`half`]), whose results are IEEE 754's: subnormals are kept,
//! a finite value too large becomes an infinity of its sign, a NaN stays a NaN with its sign and
//! the upper bits of its payload, quiet bit set.

pub use half;

use crate::dtype::DType;

/// `x` rounded to nearest even into half dtype `d`, as the 16 bits it is stored in; `None` if
/// `d` is not a half type.
pub fn to_bits(d: DType, x: f32) -> Option<u16> {
    match d {
        DType::F16 => Some(half::f16::from_f32(x).to_bits()),
        DType::BF16 => Some(half::bf16::from_f32(x).to_bits()),
        _ => None,
    }
}

/// The exact f32 value of the 16 bits of half dtype `d`; `None` if `d` is not a half type.
pub fn from_bits(d: DType, bits: u16) -> Option<f32> {
    match d {
        DType::F16 => Some(half::f16::from_bits(bits).to_f32()),
        DType::BF16 => Some(half::bf16::from_bits(bits).to_f32()),
        _ => None,
    }
}

/// `x` rounded to nearest even into half dtype `d`, widened back to f32 (exactly); `x` itself
/// for any other dtype.
pub fn round(d: DType, x: f32) -> f32 {
    match to_bits(d, x) {
        Some(bits) => from_bits(d, bits).unwrap_or(x),
        None => x,
    }
}

/// Every element of `bits` (half dtype `d`) widened into `out` (exactly, as [`from_bits`]);
/// `false` (nothing written) if `d` is not a half type or the lengths differ. The `half`
/// crate's slice conversion: F16C's vector instructions for f16 where the CPU has them.
pub fn widen_slice(d: DType, bits: &[u16], out: &mut [f32]) -> bool {
    use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
    if bits.len() != out.len() {
        return false;
    }
    match d {
        DType::F16 => bits
            .reinterpret_cast::<half::f16>()
            .convert_to_f32_slice(out),
        DType::BF16 => bits
            .reinterpret_cast::<half::bf16>()
            .convert_to_f32_slice(out),
        _ => return false,
    }
    true
}

/// Every element of `x` rounded into half dtype `d` (as [`to_bits`]), its bits written to
/// `bits`; `false` (nothing written) if `d` is not a half type or the lengths differ.
pub fn narrow_slice(d: DType, x: &[f32], bits: &mut [u16]) -> bool {
    use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
    if bits.len() != x.len() {
        return false;
    }
    match d {
        DType::F16 => bits
            .reinterpret_cast_mut::<half::f16>()
            .convert_from_f32_slice(x),
        DType::BF16 => bits
            .reinterpret_cast_mut::<half::bf16>()
            .convert_from_f32_slice(x),
        _ => return false,
    }
    true
}

/// The bits of a half literal: the IR's f64 `float_value` rounded to f32 and then into the half
/// type, both to nearest even: a CAST from f64 (tracing stores the literal the user wrote
/// already rounded, so the two roundings are one); `None` if `d` is not a half type.
pub fn literal_bits(d: DType, float_value: f64) -> Option<u16> {
    to_bits(d, float_value as f32)
}

/// Why a literal cannot be given a half dtype: it is finite but rounds to an infinity.
#[derive(Clone, Copy, Debug, PartialEq, thiserror::Error)]
#[error("the literal {value} does not fit {dtype} (largest finite {dtype}: {max}); it would round to infinity")]
pub struct LiteralOverflow {
    /// The literal.
    pub value: f64,
    /// The half type.
    pub dtype: DType,
    /// The half type's largest finite value.
    pub max: f64,
}

/// Checks that a finite literal stays finite in dtype `d` (any literal fits a non-half dtype
/// here; integer ranges are [`DType::int_range`]'s).
pub fn check_literal(d: DType, value: f64) -> Result<(), LiteralOverflow> {
    let Some(bits) = literal_bits(d, value) else {
        return Ok(());
    };
    let rounded = from_bits(d, bits).unwrap_or(f32::NAN);
    if value.is_finite() && rounded.is_infinite() {
        let max = match d {
            DType::F16 => half::f16::MAX.to_f64(),
            _ => half::bf16::MAX.to_f64(),
        };
        return Err(LiteralOverflow {
            value,
            dtype: d,
            max,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_at_the_edges() {
        // Round to nearest even: 1 + 2^-11 is halfway between 1 and 1 + 2^-10 in f16.
        assert_eq!(to_bits(DType::F16, 1.0 + 2f32.powi(-11)), Some(0x3c00));
        assert_eq!(
            to_bits(DType::F16, 1.0 + 3.0 * 2f32.powi(-11)),
            Some(0x3c02)
        );
        // Overflow to infinity, with the sign; the largest finite value stays.
        assert_eq!(to_bits(DType::F16, 65520.0), Some(0x7c00));
        assert_eq!(to_bits(DType::F16, -1e6), Some(0xfc00));
        assert_eq!(to_bits(DType::F16, 65504.0), Some(0x7bff));
        assert_eq!(to_bits(DType::BF16, f32::MAX), Some(0x7f80));
        // Subnormals kept; below half the smallest, zero of the sign.
        assert_eq!(to_bits(DType::F16, 2f32.powi(-24)), Some(0x0001));
        assert_eq!(to_bits(DType::F16, -(2f32.powi(-26))), Some(0x8000));
        assert_eq!(from_bits(DType::F16, 0x0001), Some(2f32.powi(-24)));
        assert_eq!(
            to_bits(DType::BF16, f32::from_bits(0x0001_0000)),
            Some(0x0001)
        );
        // -0 and NaN: sign and the payload's upper bits kept, quiet bit set.
        assert_eq!(to_bits(DType::F16, -0.0), Some(0x8000));
        assert_eq!(to_bits(DType::BF16, -0.0), Some(0x8000));
        let signalling = f32::from_bits(0xff80_4000 | 0x0012_0000);
        assert_eq!(to_bits(DType::BF16, signalling), Some(0xffd2));
        assert_eq!(to_bits(DType::F16, signalling), Some(0xfe92));
        assert_eq!(to_bits(DType::F32, 1.0), None);
    }

    #[test]
    fn literals_round_through_f32() {
        // 1 + 2^-11 + 2^-40 is just above halfway in f16, but f32 drops the 2^-40 first, and
        // the tie goes to even.
        let x = 1.0 + 2f64.powi(-11) + 2f64.powi(-40);
        assert_eq!(literal_bits(DType::F16, x), Some(0x3c00));
        assert_eq!(
            literal_bits(DType::BF16, 1.0 + 3.0 * 2f64.powi(-8)),
            Some(0x3f82)
        );
        assert!(check_literal(DType::F16, 65504.0).is_ok());
        assert!(check_literal(DType::F16, f64::INFINITY).is_ok());
        assert!(check_literal(DType::F16, f64::NAN).is_ok());
        let e = check_literal(DType::F16, 1e5).unwrap_err();
        assert_eq!(e.max, 65504.0);
        assert!(e.to_string().contains("does not fit f16"), "{e}");
        assert!(check_literal(DType::BF16, 1e38).is_ok());
        assert!(check_literal(DType::BF16, 1e39).is_err());
        assert!(check_literal(DType::F32, 1e39).is_ok());
    }
}

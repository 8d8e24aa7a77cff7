//! C++ spellings of dtypes and literal values.

use ovl_ir::DType;

/// The C++ type of a dtype's elements in memory (`bool` is one byte holding 0 or 1, like Rust's;
/// a half type is the prelude's 2-byte struct of its bits, `ovl::f16` or `ovl::bf16`, read with
/// [`load`] and written with [`store`]).
pub(crate) fn ctype(d: DType) -> &'static str {
    match d {
        DType::F16 => "ovl::f16",
        DType::BF16 => "ovl::bf16",
        DType::F32 => "float",
        DType::F64 => "double",
        DType::I8 => "int8_t",
        DType::I16 => "int16_t",
        DType::I32 => "int32_t",
        DType::I64 => "int64_t",
        DType::U8 => "uint8_t",
        DType::U16 => "uint16_t",
        DType::U32 => "uint32_t",
        DType::U64 => "uint64_t",
        DType::Bool => "bool",
    }
}

/// The C++ type of a dtype's values in the generated code: [`ctype`], except that a value of a
/// half type is a `float` holding its exact value (rounded by [`narrow`] when it is computed).
/// Keeping half values in f32 registers spares a conversion to 16 bits and back between two
/// operations, which kept GCC's vectorized loops busy packing and unpacking lanes.
pub(crate) fn vtype(d: DType) -> &'static str {
    if d.is_half() {
        "float"
    } else {
        ctype(d)
    }
}

/// `x`, a value of dtype `d`, as an expression of its compute type (`d.compute()`): a half value
/// already is its exact f32 value ([`vtype`]), so `x` itself for every dtype.
pub(crate) fn widen(_d: DType, x: &str) -> String {
    x.to_string()
}

/// `x`, an f32 expression, rounded once to nearest even to a value of half dtype `d`
/// (`proto/ovl.proto`, "Half types"), kept as the f32 holding it; `x` itself for other dtypes.
pub(crate) fn narrow(d: DType, x: &str) -> String {
    match d {
        DType::F16 => format!("ovl::round_f16({x})"),
        DType::BF16 => format!("ovl::round_bf16({x})"),
        _ => x.to_string(),
    }
}

/// `element`, an element of dtype `d` in memory (an lvalue of [`ctype`]), as a value of [`vtype`]:
/// a half element is widened from its bits (a struct copy would keep the loop from vectorizing).
pub(crate) fn load(d: DType, element: &str) -> String {
    match d {
        DType::F16 => format!("ovl::f16_value({element}.bits)"),
        DType::BF16 => format!("ovl::bf16_value({element}.bits)"),
        _ => element.to_string(),
    }
}

/// The statement storing `value` (of [`vtype`]) into `element` (an lvalue of [`ctype`]): a half
/// value, exact in the half type, is stored as its bits.
pub(crate) fn store(d: DType, element: &str, value: &str) -> String {
    match d {
        DType::F16 => format!("{element}.bits = ovl::f16_bits({value});"),
        DType::BF16 => format!("{element}.bits = ovl::bf16_bits({value});"),
        _ => format!("{element} = {value};"),
    }
}

/// A finite f64 as an exact C++ hexadecimal floating literal (without sign handling of NaN/inf).
fn hex_float(x: f64) -> String {
    let bits = x.to_bits();
    let sign = if bits >> 63 == 1 { "-" } else { "" };
    let exp = ((bits >> 52) & 0x7ff) as i64;
    let man = bits & ((1u64 << 52) - 1);
    if exp == 0 && man == 0 {
        return format!("{sign}0x0p+0");
    }
    let (lead, e) = if exp == 0 {
        (0, -1022)
    } else {
        (1, exp - 1023)
    };
    format!("{sign}0x{lead}.{man:013x}p{e:+}")
}

/// An f32 value as a C++ expression of type `float` with exactly these bits.
pub(crate) fn f32_literal(x: f32) -> String {
    if x.is_nan() {
        format!("ovl::f32_bits(0x{:08x}u)", x.to_bits())
    } else if x.is_infinite() {
        if x > 0.0 {
            "__builtin_inff()".into()
        } else {
            "(-__builtin_inff())".into()
        }
    } else {
        format!("({}f /* {x:?} */)", hex_float(x as f64))
    }
}

/// An f64 value as a C++ expression of type `double` with exactly these bits.
pub(crate) fn f64_literal(x: f64) -> String {
    if x.is_nan() {
        format!("ovl::f64_bits(0x{:016x}ull)", x.to_bits())
    } else if x.is_infinite() {
        if x > 0.0 {
            "__builtin_inf()".into()
        } else {
            "(-__builtin_inf())".into()
        }
    } else {
        format!("({} /* {x:?} */)", hex_float(x))
    }
}

/// The literal an expression holds for dtype `d`, read the way the reference interpreter reads
/// it: floats from `float_value` (f32: rounded to nearest), signed integers and bool from
/// `int_value`, unsigned integers from `uint_value`, integers converted with Rust's `as`.
pub(crate) fn literal(d: DType, float_value: f64, int_value: i64, uint_value: u64) -> String {
    let signed = |v: i64| {
        if v == i64::MIN {
            format!("({})(-0x7fffffffffffffffLL - 1)", ctype(d))
        } else {
            format!("({})({v}LL)", ctype(d))
        }
    };
    let unsigned = |v: u64| format!("({})({v}ULL)", ctype(d));
    match d {
        DType::F32 => f32_literal(float_value as f32),
        DType::F64 => f64_literal(float_value),
        DType::I8 => signed(int_value as i8 as i64),
        DType::I16 => signed(int_value as i16 as i64),
        DType::I32 => signed(int_value as i32 as i64),
        DType::I64 => signed(int_value),
        DType::U8 => unsigned(uint_value as u8 as u64),
        DType::U16 => unsigned(uint_value as u16 as u64),
        DType::U32 => unsigned(uint_value as u32 as u64),
        DType::U64 => unsigned(uint_value),
        DType::Bool => (if int_value != 0 { "true" } else { "false" }).into(),
        DType::F16 | DType::BF16 => {
            // The value ([`vtype`]): the f32 holding the half value, by its bits where it is not
            // finite (CUDA has no builtin for infinities).
            let value = half_literal_value(d, float_value);
            if value.is_finite() {
                f32_literal(value)
            } else {
                format!("ovl::f32_bits(0x{:08x}u)", value.to_bits())
            }
        }
    }
}

/// The value of a half literal of dtype `d` (rounded as the interpreter rounds it), as an f32.
fn half_literal_value(d: DType, float_value: f64) -> f32 {
    let bits = ovl_ir::half_float::literal_bits(d, float_value).unwrap_or(0);
    ovl_ir::half_float::from_bits(d, bits).unwrap_or(f32::NAN)
}

/// A literal of dtype `d` as an element in memory ([`ctype`]; the fill of a local tensor):
/// [`literal`], except that a half literal is the struct of its bits.
pub(crate) fn storage_literal(
    d: DType,
    float_value: f64,
    int_value: i64,
    uint_value: u64,
) -> String {
    if d.is_half() {
        let bits = ovl_ir::half_float::literal_bits(d, float_value).unwrap_or(0);
        let value = half_literal_value(d, float_value);
        format!("({}{{0x{bits:04x}u}} /* {value:?} */)", ctype(d))
    } else {
        literal(d, float_value, int_value, uint_value)
    }
}

/// Like [`literal`], for CUDA C++: NVRTC has no `__builtin_inf`, so infinities are spelled by
/// their bits (`ovl::f32_bits` of the CUDA prelude).
pub(crate) fn cuda_literal(d: DType, float_value: f64, int_value: i64, uint_value: u64) -> String {
    match d {
        DType::F32 if (float_value as f32).is_infinite() => {
            format!("ovl::f32_bits(0x{:08x}u)", (float_value as f32).to_bits())
        }
        DType::F64 if float_value.is_infinite() => {
            format!("ovl::f64_bits(0x{:016x}ull)", float_value.to_bits())
        }
        _ => literal(d, float_value, int_value, uint_value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_floats_are_exact() {
        assert_eq!(hex_float(1.0), "0x1.0000000000000p+0");
        assert_eq!(hex_float(-2.5), "-0x1.4000000000000p+1");
        assert_eq!(hex_float(0.0), "0x0p+0");
        assert_eq!(hex_float(-0.0), "-0x0p+0");
        assert_eq!(
            hex_float(f64::MIN_POSITIVE / 4.0),
            "0x0.4000000000000p-1022"
        );
        assert_eq!(hex_float(f64::MAX), "0x1.fffffffffffffp+1023");
    }

    #[test]
    fn integer_literals() {
        assert_eq!(
            literal(DType::I64, 0.0, i64::MIN, 0),
            "(int64_t)(-0x7fffffffffffffffLL - 1)"
        );
        assert_eq!(literal(DType::I8, 0.0, -5, 0), "(int8_t)(-5LL)");
        assert_eq!(
            literal(DType::U64, 0.0, 0, u64::MAX),
            "(uint64_t)(18446744073709551615ULL)"
        );
        assert_eq!(literal(DType::Bool, 0.0, 1, 0), "true");
        assert_eq!(
            storage_literal(DType::F16, 1.0, 0, 0),
            "(ovl::f16{0x3c00u} /* 1.0 */)"
        );
        assert_eq!(
            storage_literal(DType::BF16, -0.0, 0, 0),
            "(ovl::bf16{0x8000u} /* -0.0 */)"
        );
        assert_eq!(literal(DType::F16, 1.0, 0, 0), f32_literal(1.0));
        assert_eq!(literal(DType::BF16, -0.0, 0, 0), f32_literal(-0.0));
        assert_eq!(
            literal(DType::F16, f64::INFINITY, 0, 0),
            "ovl::f32_bits(0x7f800000u)"
        );
    }
}

//! ovl's dtypes as DLPack element types and back: floats are `kDLFloat` (f16: 16 bits),
//! bf16 is `kDLBfloat` of 16 bits, signed integers `kDLInt`, unsigned ones `kDLUInt`, `bool` is
//! `kDLBool` of 8 bits (one byte holding 0 or 1), all with one lane.

use super::error::DlpackError;
use super::ffi::{
    DLDataType, K_DL_BFLOAT, K_DL_BOOL, K_DL_COMPLEX, K_DL_FLOAT, K_DL_INT, K_DL_OPAQUE_HANDLE,
    K_DL_UINT,
};
use ovl_core::DType;

/// The DLPack element type of `dtype`.
pub fn to_dl(dtype: DType) -> DLDataType {
    let code = if dtype == DType::BF16 {
        K_DL_BFLOAT
    } else if dtype.is_float() {
        K_DL_FLOAT
    } else if dtype.is_signed_int() {
        K_DL_INT
    } else if dtype.is_unsigned_int() {
        K_DL_UINT
    } else {
        K_DL_BOOL
    };
    DLDataType {
        code,
        bits: (dtype.size() * 8) as u8,
        lanes: 1,
    }
}

/// The ovl dtype of a DLPack element type, or [`DlpackError::UnsupportedDtype`].
pub fn from_dl(dt: DLDataType) -> Result<DType, DlpackError> {
    let dtype = match (dt.code, dt.bits, dt.lanes) {
        (K_DL_FLOAT, 32, 1) => Some(DType::F32),
        (K_DL_FLOAT, 64, 1) => Some(DType::F64),
        (K_DL_FLOAT, 16, 1) => Some(DType::F16),
        (K_DL_BFLOAT, 16, 1) => Some(DType::BF16),
        (K_DL_INT, 8, 1) => Some(DType::I8),
        (K_DL_INT, 16, 1) => Some(DType::I16),
        (K_DL_INT, 32, 1) => Some(DType::I32),
        (K_DL_INT, 64, 1) => Some(DType::I64),
        (K_DL_UINT, 8, 1) => Some(DType::U8),
        (K_DL_UINT, 16, 1) => Some(DType::U16),
        (K_DL_UINT, 32, 1) => Some(DType::U32),
        (K_DL_UINT, 64, 1) => Some(DType::U64),
        (K_DL_BOOL, 8, 1) => Some(DType::Bool),
        _ => None,
    };
    dtype.ok_or(DlpackError::UnsupportedDtype {
        code: dt.code,
        code_name: code_name(dt.code),
        bits: dt.bits,
        lanes: dt.lanes,
    })
}

/// The header's name of a `DLDataTypeCode` (`"other"` past the ones ovl names).
pub fn code_name(code: u8) -> &'static str {
    match code {
        K_DL_INT => "kDLInt",
        K_DL_UINT => "kDLUInt",
        K_DL_FLOAT => "kDLFloat",
        K_DL_OPAQUE_HANDLE => "kDLOpaqueHandle",
        K_DL_BFLOAT => "kDLBfloat",
        K_DL_COMPLEX => "kDLComplex",
        K_DL_BOOL => "kDLBool",
        7..=14 => "a float8 type",
        15 | 16 => "a float6 type",
        17 => "a float4 type",
        _ => "an unknown type code",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dtype_maps_and_back() {
        for dtype in DType::ALL {
            let dl = to_dl(dtype);
            assert_eq!(dl.lanes, 1);
            assert_eq!(usize::from(dl.bits), dtype.size() * 8);
            assert_eq!(from_dl(dl).unwrap(), dtype);
        }
        assert_eq!(
            to_dl(DType::Bool),
            DLDataType {
                code: K_DL_BOOL,
                bits: 8,
                lanes: 1
            }
        );
        assert_eq!(to_dl(DType::I16).code, K_DL_INT);
        assert_eq!(to_dl(DType::U64).code, K_DL_UINT);
        assert_eq!(to_dl(DType::F64).code, K_DL_FLOAT);
        let half = |code| DLDataType {
            code,
            bits: 16,
            lanes: 1,
        };
        assert_eq!(to_dl(DType::F16), half(K_DL_FLOAT));
        assert_eq!(to_dl(DType::BF16), half(K_DL_BFLOAT));
    }

    #[test]
    fn others_are_refused_with_their_fields() {
        for (code, bits, lanes) in [
            (2, 8, 1),
            (4, 32, 1),
            (2, 16, 2),
            (5, 64, 1),
            (2, 32, 4),
            (6, 1, 1),
        ] {
            let err = from_dl(DLDataType { code, bits, lanes }).unwrap_err();
            let text = err.to_string();
            assert!(text.contains(&format!("code {code}")), "{text}");
            assert!(text.contains(&format!("{bits} bits")), "{text}");
            assert!(text.contains(&format!("{lanes} lane")), "{text}");
        }
    }
}

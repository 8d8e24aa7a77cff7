//! Element types: the [`DType`] enum and IR [`Literal`]s. The Rust types that can live in a
//! tensor implement [`crate::host::Scalar`]. This is the one table of dtype facts (names, sizes,
//! classes, ranges, IR values); the half types' rounding is [`crate::half_float`]'s.

use crate::ir;
use std::fmt;

/// The element type of a tensor or a scalar expression.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    F32,
    F64,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    Bool,
    /// IEEE 754 binary16 (`half::f16`): computed in f32, rounded once per operation.
    F16,
    /// bfloat16 (`half::bf16`, the upper half of an f32): computed in f32, rounded once.
    BF16,
}

impl DType {
    /// Every supported dtype, in IR order.
    pub const ALL: [DType; 13] = [
        DType::F32,
        DType::F64,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::Bool,
        DType::F16,
        DType::BF16,
    ];

    /// Size of one element in bytes (bool is one byte holding 0 or 1).
    pub fn size(self) -> usize {
        match self {
            DType::I8 | DType::U8 | DType::Bool => 1,
            DType::I16 | DType::U16 | DType::F16 | DType::BF16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 | DType::U64 => 8,
        }
    }

    /// A floating-point dtype: f32, f64 or a half type.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
    }

    /// A 16-bit float (f16 or bf16): stored in two bytes, computed in f32 and rounded once to
    /// nearest even after every operation (`proto/ovl.proto`, "Half types").
    pub fn is_half(self) -> bool {
        matches!(self, DType::F16 | DType::BF16)
    }

    /// The dtype a value of this dtype is computed in: f32 for the half types, else itself.
    pub fn compute(self) -> DType {
        if self.is_half() {
            DType::F32
        } else {
            self
        }
    }

    pub fn is_signed_int(self) -> bool {
        matches!(self, DType::I8 | DType::I16 | DType::I32 | DType::I64)
    }

    pub fn is_unsigned_int(self) -> bool {
        matches!(self, DType::U8 | DType::U16 | DType::U32 | DType::U64)
    }

    pub fn is_int(self) -> bool {
        self.is_signed_int() || self.is_unsigned_int()
    }

    /// The inclusive value range of an integer dtype (`bool`: 0 and 1); `None` for floats. The
    /// one table of integer ranges: interval analysis, affine patterns and literal checks use it.
    pub fn int_range(self) -> Option<(i128, i128)> {
        Some(match self {
            DType::I8 => (i8::MIN as i128, i8::MAX as i128),
            DType::I16 => (i16::MIN as i128, i16::MAX as i128),
            DType::I32 => (i32::MIN as i128, i32::MAX as i128),
            DType::I64 => (i64::MIN as i128, i64::MAX as i128),
            DType::U8 => (0, u8::MAX as i128),
            DType::U16 => (0, u16::MAX as i128),
            DType::U32 => (0, u32::MAX as i128),
            DType::U64 => (0, u64::MAX as i128),
            DType::Bool => (0, 1),
            DType::F32 | DType::F64 | DType::F16 | DType::BF16 => return None,
        })
    }

    /// The value of an integer or bool literal of this dtype, from an expression's
    /// `int_value` (signed types, bool) or `uint_value` (unsigned types), as the IR defines
    /// literals; `None` for floats.
    pub fn int_literal(self, int_value: i64, uint_value: u64) -> Option<i128> {
        Some(match self {
            DType::I8 => int_value as i8 as i128,
            DType::I16 => int_value as i16 as i128,
            DType::I32 => int_value as i32 as i128,
            DType::I64 => int_value as i128,
            DType::U8 => uint_value as u8 as i128,
            DType::U16 => uint_value as u16 as i128,
            DType::U32 => uint_value as u32 as i128,
            DType::U64 => uint_value as i128,
            DType::Bool => (int_value != 0) as i128,
            DType::F32 | DType::F64 | DType::F16 | DType::BF16 => return None,
        })
    }

    /// The name NumPy, TensorFlow, PyTorch and JAX give the type (`float32`, `uint8`, `bool`,
    /// `float16`, `bfloat16`, ...): the name in exported programs and the bridges' messages.
    pub fn framework_name(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::I8 => "int8",
            DType::I16 => "int16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::U8 => "uint8",
            DType::U16 => "uint16",
            DType::U32 => "uint32",
            DType::U64 => "uint64",
            DType::Bool => "bool",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
        }
    }

    /// The Rust name of the type (`f32`, `u8`, `bool`, `f16`, `bf16`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::U64 => "u64",
            DType::Bool => "bool",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
        }
    }

    /// The IR enum value.
    pub fn to_ir(self) -> ir::Dtype {
        match self {
            DType::F32 => ir::Dtype::F32,
            DType::F64 => ir::Dtype::F64,
            DType::I8 => ir::Dtype::I8,
            DType::I16 => ir::Dtype::I16,
            DType::I32 => ir::Dtype::I32,
            DType::I64 => ir::Dtype::I64,
            DType::U8 => ir::Dtype::U8,
            DType::U16 => ir::Dtype::U16,
            DType::U32 => ir::Dtype::U32,
            DType::U64 => ir::Dtype::U64,
            DType::Bool => ir::Dtype::Bool,
            DType::F16 => ir::Dtype::F16,
            DType::BF16 => ir::Dtype::Bf16,
        }
    }

    /// From the IR's `i32` field; `None` for unspecified or unsupported values.
    pub fn from_ir(value: i32) -> Option<DType> {
        Some(match ir::Dtype::try_from(value).ok()? {
            ir::Dtype::F32 => DType::F32,
            ir::Dtype::F64 => DType::F64,
            ir::Dtype::I8 => DType::I8,
            ir::Dtype::I16 => DType::I16,
            ir::Dtype::I32 => DType::I32,
            ir::Dtype::I64 => DType::I64,
            ir::Dtype::U8 => DType::U8,
            ir::Dtype::U16 => DType::U16,
            ir::Dtype::U32 => DType::U32,
            ir::Dtype::U64 => DType::U64,
            ir::Dtype::Bool => DType::Bool,
            ir::Dtype::F16 => DType::F16,
            ir::Dtype::Bf16 => DType::BF16,
            ir::Dtype::Unspecified => return None,
        })
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A literal value of some dtype, as stored in the IR.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Literal {
    Float(f64),
    Int(i64),
    UInt(u64),
    Bool(bool),
}

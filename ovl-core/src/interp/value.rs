//! Scalar values of the interpreter and the arithmetic of every opcode, exactly as specified in
//! `proto/ovl.proto`.

use crate::dtype::DType;
use crate::host::TensorData;
use crate::ir::Op;
use ovl_ir::ops::Combiner;

/// One scalar value: one variant per dtype.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Value {
    F32(f32),
    F64(f64),
    I8(i8),
    I16(i16),
    I32(i32),
    I64(i64),
    U8(u8),
    U16(u16),
    U32(u32),
    U64(u64),
    Bool(bool),
    F16(half::f16),
    BF16(half::bf16),
}

/// Applies `$m!(x)` to the payload of any variant, rebuilding the same variant.
macro_rules! each_int {
    ($v:expr, $x:ident => $body:expr, else $other:expr) => {
        match $v {
            Value::I8($x) => Value::I8($body),
            Value::I16($x) => Value::I16($body),
            Value::I32($x) => Value::I32($body),
            Value::I64($x) => Value::I64($body),
            Value::U8($x) => Value::U8($body),
            Value::U16($x) => Value::U16($body),
            Value::U32($x) => Value::U32($body),
            Value::U64($x) => Value::U64($body),
            _ => $other,
        }
    };
}

impl Value {
    /// A half value's exact f32 value; `None` for every other dtype.
    #[inline]
    fn widen(self) -> Option<f32> {
        match self {
            Value::F16(x) => Some(x.to_f32()),
            Value::BF16(x) => Some(x.to_f32()),
            _ => None,
        }
    }

    /// `x` rounded once, to nearest even, into half dtype `d` (`proto/ovl.proto`, "Half types");
    /// an f32 for any other `d`.
    #[inline]
    fn narrow(d: DType, x: f32) -> Value {
        match d {
            DType::F16 => Value::F16(half::f16::from_f32(x)),
            DType::BF16 => Value::BF16(half::bf16::from_f32(x)),
            _ => Value::F32(x),
        }
    }

    /// The half dtype of a half value (f32 for any other).
    #[inline]
    fn dtype_of_half(self) -> DType {
        match self {
            Value::F16(_) => DType::F16,
            Value::BF16(_) => DType::BF16,
            _ => DType::F32,
        }
    }

    /// The zero of a dtype (`false` for bool).
    pub(crate) fn zero(d: DType) -> Value {
        match d {
            DType::F32 => Value::F32(0.0),
            DType::F64 => Value::F64(0.0),
            DType::I8 => Value::I8(0),
            DType::I16 => Value::I16(0),
            DType::I32 => Value::I32(0),
            DType::I64 => Value::I64(0),
            DType::U8 => Value::U8(0),
            DType::U16 => Value::U16(0),
            DType::U32 => Value::U32(0),
            DType::U64 => Value::U64(0),
            DType::Bool => Value::Bool(false),
            DType::F16 | DType::BF16 => Value::narrow(d, 0.0),
        }
    }

    /// The identity of a combiner on a dtype (`proto/ovl.proto`, "Accumulators"): SUM 0,
    /// PRODUCT 1, MIN +inf or the largest integer, MAX -inf or the smallest integer.
    pub(crate) fn identity(combiner: Combiner, d: DType) -> Value {
        macro_rules! pick {
            ($zero:expr, $one:expr, $lo:expr, $hi:expr) => {
                match combiner {
                    Combiner::Sum => $zero,
                    Combiner::Product => $one,
                    Combiner::Min => $hi,
                    Combiner::Max => $lo,
                }
            };
        }
        match d {
            DType::F32 => Value::F32(pick!(0.0, 1.0, f32::NEG_INFINITY, f32::INFINITY)),
            DType::F64 => Value::F64(pick!(0.0, 1.0, f64::NEG_INFINITY, f64::INFINITY)),
            DType::I8 => Value::I8(pick!(0, 1, i8::MIN, i8::MAX)),
            DType::I16 => Value::I16(pick!(0, 1, i16::MIN, i16::MAX)),
            DType::I32 => Value::I32(pick!(0, 1, i32::MIN, i32::MAX)),
            DType::I64 => Value::I64(pick!(0, 1, i64::MIN, i64::MAX)),
            DType::U8 => Value::U8(pick!(0, 1, u8::MIN, u8::MAX)),
            DType::U16 => Value::U16(pick!(0, 1, u16::MIN, u16::MAX)),
            DType::U32 => Value::U32(pick!(0, 1, u32::MIN, u32::MAX)),
            DType::U64 => Value::U64(pick!(0, 1, u64::MIN, u64::MAX)),
            DType::Bool => Value::Bool(false),
            DType::F16 | DType::BF16 => {
                Value::narrow(d, pick!(0.0, 1.0, f32::NEG_INFINITY, f32::INFINITY))
            }
        }
    }

    /// The literal held in an expression's `float_value`/`int_value`/`uint_value`, by dtype.
    /// Integers are converted with `as` (validation checked that they fit); an f32 literal is
    /// the f64 `float_value` rounded to nearest.
    #[allow(clippy::unnecessary_cast)]
    /// A typed literal as a value of dtype `d`.
    pub(crate) fn of_literal(d: DType, lit: crate::dtype::Literal) -> Value {
        use crate::dtype::Literal;
        let (f, i, u) = match lit {
            Literal::Float(f) => (f, 0, 0),
            Literal::Int(i) => (0.0, i, i as u64),
            Literal::UInt(u) => (0.0, u as i64, u),
            Literal::Bool(b) => (0.0, b as i64, b as u64),
        };
        Value::literal(d, f, i, u)
    }

    pub(crate) fn literal(d: DType, float_value: f64, int_value: i64, uint_value: u64) -> Value {
        match d {
            DType::F32 => Value::F32(float_value as f32),
            DType::F64 => Value::F64(float_value),
            DType::I8 => Value::I8(int_value as i8),
            DType::I16 => Value::I16(int_value as i16),
            DType::I32 => Value::I32(int_value as i32),
            DType::I64 => Value::I64(int_value),
            DType::U8 => Value::U8(uint_value as u8),
            DType::U16 => Value::U16(uint_value as u16),
            DType::U32 => Value::U32(uint_value as u32),
            DType::U64 => Value::U64(uint_value),
            DType::Bool => Value::Bool(int_value != 0),
            DType::F16 | DType::BF16 => Value::narrow(d, float_value as f32),
        }
    }

    /// The dtype of the value.
    #[cfg(test)]
    pub(crate) fn dtype(self) -> DType {
        match self {
            Value::F32(_) => DType::F32,
            Value::F64(_) => DType::F64,
            Value::I8(_) => DType::I8,
            Value::I16(_) => DType::I16,
            Value::I32(_) => DType::I32,
            Value::I64(_) => DType::I64,
            Value::U8(_) => DType::U8,
            Value::U16(_) => DType::U16,
            Value::U32(_) => DType::U32,
            Value::U64(_) => DType::U64,
            Value::Bool(_) => DType::Bool,
            Value::F16(_) => DType::F16,
            Value::BF16(_) => DType::BF16,
        }
    }

    /// An integer value as an index (i128 holds every integer dtype exactly).
    #[inline]
    pub(crate) fn as_index(self) -> Option<i128> {
        Some(match self {
            Value::I8(x) => x as i128,
            Value::I16(x) => x as i128,
            Value::I32(x) => x as i128,
            Value::I64(x) => x as i128,
            Value::U8(x) => x as i128,
            Value::U16(x) => x as i128,
            Value::U32(x) => x as i128,
            Value::U64(x) => x as i128,
            _ => return None,
        })
    }

    /// The value of a bool.
    #[inline]
    pub(crate) fn as_bool(self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// The value of an i64.
    #[inline]
    pub(crate) fn as_i64(self) -> Option<i64> {
        match self {
            Value::I64(x) => Some(x),
            _ => None,
        }
    }

    /// Element `i` of a buffer of the same dtype; `None` if `i` is outside it.
    #[inline]
    pub(crate) fn load(data: &TensorData, i: usize) -> Option<Value> {
        Some(match data {
            TensorData::F32(v) => Value::F32(*v.get(i)?),
            TensorData::F64(v) => Value::F64(*v.get(i)?),
            TensorData::I8(v) => Value::I8(*v.get(i)?),
            TensorData::I16(v) => Value::I16(*v.get(i)?),
            TensorData::I32(v) => Value::I32(*v.get(i)?),
            TensorData::I64(v) => Value::I64(*v.get(i)?),
            TensorData::U8(v) => Value::U8(*v.get(i)?),
            TensorData::U16(v) => Value::U16(*v.get(i)?),
            TensorData::U32(v) => Value::U32(*v.get(i)?),
            TensorData::U64(v) => Value::U64(*v.get(i)?),
            TensorData::Bool(v) => Value::Bool(*v.get(i)?),
            TensorData::F16(v) => Value::F16(*v.get(i)?),
            TensorData::BF16(v) => Value::BF16(*v.get(i)?),
        })
    }

    /// Stores the value at element `i` of a buffer of the same dtype; false if the dtype differs
    /// or `i` is outside it.
    #[inline]
    pub(crate) fn store(self, data: &mut TensorData, i: usize) -> bool {
        macro_rules! put {
            ($v:ident, $x:ident) => {
                match $v.get_mut(i) {
                    Some(slot) => {
                        *slot = $x;
                        true
                    }
                    None => false,
                }
            };
        }
        match (data, self) {
            (TensorData::F32(v), Value::F32(x)) => put!(v, x),
            (TensorData::F64(v), Value::F64(x)) => put!(v, x),
            (TensorData::I8(v), Value::I8(x)) => put!(v, x),
            (TensorData::I16(v), Value::I16(x)) => put!(v, x),
            (TensorData::I32(v), Value::I32(x)) => put!(v, x),
            (TensorData::I64(v), Value::I64(x)) => put!(v, x),
            (TensorData::U8(v), Value::U8(x)) => put!(v, x),
            (TensorData::U16(v), Value::U16(x)) => put!(v, x),
            (TensorData::U32(v), Value::U32(x)) => put!(v, x),
            (TensorData::U64(v), Value::U64(x)) => put!(v, x),
            (TensorData::Bool(v), Value::Bool(x)) => put!(v, x),
            (TensorData::F16(v), Value::F16(x)) => put!(v, x),
            (TensorData::BF16(v), Value::BF16(x)) => put!(v, x),
            _ => false,
        }
    }

    /// Fills a buffer of the same dtype with the value; false if the dtype differs.
    pub(crate) fn fill(self, data: &mut TensorData) -> bool {
        match (data, self) {
            (TensorData::F32(v), Value::F32(x)) => v.fill(x),
            (TensorData::F64(v), Value::F64(x)) => v.fill(x),
            (TensorData::I8(v), Value::I8(x)) => v.fill(x),
            (TensorData::I16(v), Value::I16(x)) => v.fill(x),
            (TensorData::I32(v), Value::I32(x)) => v.fill(x),
            (TensorData::I64(v), Value::I64(x)) => v.fill(x),
            (TensorData::U8(v), Value::U8(x)) => v.fill(x),
            (TensorData::U16(v), Value::U16(x)) => v.fill(x),
            (TensorData::U32(v), Value::U32(x)) => v.fill(x),
            (TensorData::U64(v), Value::U64(x)) => v.fill(x),
            (TensorData::Bool(v), Value::Bool(x)) => v.fill(x),
            (TensorData::F16(v), Value::F16(x)) => v.fill(x),
            (TensorData::BF16(v), Value::BF16(x)) => v.fill(x),
            _ => return false,
        }
        true
    }
}

/// Rust's `as` from any value to dtype `to`; to bool is `x != 0`, from bool is 0 or 1. A half
/// value casts as its exact f32 value; a cast to a half type is a cast to f32, rounded once.
#[allow(clippy::unnecessary_cast)]
#[inline]
pub(crate) fn cast(v: Value, to: DType) -> Value {
    if let Some(x) = v.widen() {
        return cast(Value::F32(x), to);
    }
    if to.is_half() {
        let Value::F32(x) = cast(v, DType::F32) else {
            unreachable!("a cast to f32 is an f32")
        };
        return Value::narrow(to, x);
    }
    macro_rules! to {
        ($x:expr) => {
            match to {
                DType::F32 => Value::F32($x as f32),
                DType::F64 => Value::F64($x as f64),
                DType::I8 => Value::I8($x as i8),
                DType::I16 => Value::I16($x as i16),
                DType::I32 => Value::I32($x as i32),
                DType::I64 => Value::I64($x as i64),
                DType::U8 => Value::U8($x as u8),
                DType::U16 => Value::U16($x as u16),
                DType::U32 => Value::U32($x as u32),
                DType::U64 => Value::U64($x as u64),
                DType::Bool | DType::F16 | DType::BF16 => unreachable!("handled before"),
            }
        };
    }
    if to == DType::Bool {
        return Value::Bool(match v {
            Value::F32(x) => x != 0.0,
            Value::F64(x) => x != 0.0,
            Value::I8(x) => x != 0,
            Value::I16(x) => x != 0,
            Value::I32(x) => x != 0,
            Value::I64(x) => x != 0,
            Value::U8(x) => x != 0,
            Value::U16(x) => x != 0,
            Value::U32(x) => x != 0,
            Value::U64(x) => x != 0,
            Value::Bool(b) => b,
            Value::F16(_) | Value::BF16(_) => unreachable!("handled before"),
        });
    }
    match v {
        Value::F32(x) => to!(x),
        Value::F64(x) => to!(x),
        Value::I8(x) => to!(x),
        Value::I16(x) => to!(x),
        Value::I32(x) => to!(x),
        Value::I64(x) => to!(x),
        Value::U8(x) => to!(x),
        Value::U16(x) => to!(x),
        Value::U32(x) => to!(x),
        Value::U64(x) => to!(x),
        Value::Bool(b) => to!(b as u8),
        Value::F16(_) | Value::BF16(_) => unreachable!("handled before"),
    }
}

/// The float-only unary functions, generic over f32/f64 through a macro so that f32 math is
/// computed in f32.
macro_rules! float_unary {
    ($op:expr, $x:expr, $t:ident, $erf:path) => {{
        let x: $t = $x;
        match $op {
            Op::Neg => -x,
            Op::Abs => x.abs(),
            Op::Sqrt => x.sqrt(),
            Op::Rsqrt => 1.0 / x.sqrt(),
            Op::Exp => x.exp(),
            Op::Exp2 => x.exp2(),
            Op::Expm1 => x.exp_m1(),
            Op::Log => x.ln(),
            Op::Log2 => x.log2(),
            Op::Log10 => x.log10(),
            Op::Log1p => x.ln_1p(),
            Op::Sin => x.sin(),
            Op::Cos => x.cos(),
            Op::Tan => x.tan(),
            Op::Asin => x.asin(),
            Op::Acos => x.acos(),
            Op::Atan => x.atan(),
            Op::Sinh => x.sinh(),
            Op::Cosh => x.cosh(),
            Op::Tanh => x.tanh(),
            Op::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            Op::Erf => $erf(x),
            Op::Ceil => x.ceil(),
            Op::Floor => x.floor(),
            Op::Round => x.round(),
            _ => return None,
        }
    }};
}

/// A unary opcode applied to a value; `None` if the opcode does not take that dtype.
#[inline]
pub(crate) fn unary(op: Op, v: Value) -> Option<Value> {
    if let Some(x) = v.widen() {
        return Some(match unary(op, Value::F32(x))? {
            Value::F32(r) => Value::narrow(v.dtype_of_half(), r),
            other => other,
        });
    }
    Some(match (op, v) {
        (Op::Isinf, Value::F32(x)) => Value::Bool(x.is_infinite()),
        (Op::Isinf, Value::F64(x)) => Value::Bool(x.is_infinite()),
        (Op::Isfinite, Value::F32(x)) => Value::Bool(x.is_finite()),
        (Op::Isfinite, Value::F64(x)) => Value::Bool(x.is_finite()),
        (Op::Isnan, Value::F32(x)) => Value::Bool(x.is_nan()),
        (Op::Isnan, Value::F64(x)) => Value::Bool(x.is_nan()),
        (_, Value::F32(x)) => Value::F32(float_unary!(op, x, f32, libm::erff)),
        (_, Value::F64(x)) => Value::F64(float_unary!(op, x, f64, libm::erf)),
        (Op::Not, Value::Bool(b)) => Value::Bool(!b),
        (Op::Not, v) => each_int!(v, x => !x, else return None),
        (Op::Neg, v) => each_int!(v, x => x.wrapping_neg(), else return None),
        (Op::Abs, v) => match v {
            Value::I8(x) => Value::I8(x.wrapping_abs()),
            Value::I16(x) => Value::I16(x.wrapping_abs()),
            Value::I32(x) => Value::I32(x.wrapping_abs()),
            Value::I64(x) => Value::I64(x.wrapping_abs()),
            Value::U8(_) | Value::U16(_) | Value::U32(_) | Value::U64(_) => v,
            _ => return None,
        },
        _ => return None,
    })
}

macro_rules! int_binary {
    ($op:expr, $a:expr, $b:expr) => {{
        let (a, b) = ($a, $b);
        match $op {
            Op::Add => a.wrapping_add(b),
            Op::Sub => a.wrapping_sub(b),
            Op::Mul => a.wrapping_mul(b),
            Op::Div => {
                if b == 0 {
                    0
                } else {
                    a.wrapping_div(b)
                }
            }
            Op::Mod => {
                if b == 0 {
                    0
                } else {
                    a.wrapping_rem(b)
                }
            }
            Op::Min => a.min(b),
            Op::Max => a.max(b),
            Op::BitAnd => a & b,
            Op::BitOr => a | b,
            Op::BitXor => a ^ b,
            // The count modulo the width: `wrapping_shl` keeps its low bits.
            Op::Shl => a.wrapping_shl(b as u32),
            Op::Shr => a.wrapping_shr(b as u32),
            _ => return None,
        }
    }};
}

macro_rules! float_binary {
    ($op:expr, $a:expr, $b:expr) => {{
        let (a, b) = ($a, $b);
        match $op {
            Op::Add => a + b,
            Op::Sub => a - b,
            Op::Mul => a * b,
            Op::Div => a / b,
            // Rust's `%` on floats is C's fmod.
            Op::Mod => a % b,
            // f32::min/max return the other operand when one is NaN (C's fmin/fmax).
            Op::Min => a.min(b),
            Op::Max => a.max(b),
            Op::Pow => a.powf(b),
            Op::Atan2 => a.atan2(b),
            _ => return None,
        }
    }};
}

/// A binary arithmetic opcode; `None` if the dtypes differ or the opcode does not take them.
#[inline]
pub(crate) fn binary(op: Op, a: Value, b: Value) -> Option<Value> {
    if let (Some(x), Some(y)) = (a.widen(), b.widen()) {
        let d = a.dtype_of_half();
        if d != b.dtype_of_half() {
            return None;
        }
        let Value::F32(r) = binary(op, Value::F32(x), Value::F32(y))? else {
            return None;
        };
        return Some(Value::narrow(d, r));
    }
    Some(match (a, b) {
        (Value::F32(x), Value::F32(y)) => Value::F32(float_binary!(op, x, y)),
        (Value::F64(x), Value::F64(y)) => Value::F64(float_binary!(op, x, y)),
        (Value::I8(x), Value::I8(y)) => Value::I8(int_binary!(op, x, y)),
        (Value::I16(x), Value::I16(y)) => Value::I16(int_binary!(op, x, y)),
        (Value::I32(x), Value::I32(y)) => Value::I32(int_binary!(op, x, y)),
        (Value::I64(x), Value::I64(y)) => Value::I64(int_binary!(op, x, y)),
        (Value::U8(x), Value::U8(y)) => Value::U8(int_binary!(op, x, y)),
        (Value::U16(x), Value::U16(y)) => Value::U16(int_binary!(op, x, y)),
        (Value::U32(x), Value::U32(y)) => Value::U32(int_binary!(op, x, y)),
        (Value::U64(x), Value::U64(y)) => Value::U64(int_binary!(op, x, y)),
        _ => return None,
    })
}

macro_rules! compare {
    ($op:expr, $a:expr, $b:expr) => {{
        let (a, b) = ($a, $b);
        match $op {
            Op::Lt => a < b,
            Op::Le => a <= b,
            Op::Gt => a > b,
            Op::Ge => a >= b,
            Op::Eq => a == b,
            Op::Ne => a != b,
            _ => return None,
        }
    }};
}

/// A comparison (any dtype, IEEE on floats: every comparison with NaN is false except `ne`) or
/// a logical and/or (bool); `None` if the dtypes differ or do not fit.
#[inline]
pub(crate) fn compare(op: Op, a: Value, b: Value) -> Option<bool> {
    if let (Some(x), Some(y)) = (a.widen(), b.widen()) {
        if a.dtype_of_half() != b.dtype_of_half() {
            return None;
        }
        return compare(op, Value::F32(x), Value::F32(y));
    }
    Some(match (a, b) {
        (Value::Bool(x), Value::Bool(y)) => match op {
            Op::And => x && y,
            Op::Or => x || y,
            _ => compare!(op, x, y),
        },
        (Value::F32(x), Value::F32(y)) => compare!(op, x, y),
        (Value::F64(x), Value::F64(y)) => compare!(op, x, y),
        (Value::I8(x), Value::I8(y)) => compare!(op, x, y),
        (Value::I16(x), Value::I16(y)) => compare!(op, x, y),
        (Value::I32(x), Value::I32(y)) => compare!(op, x, y),
        (Value::I64(x), Value::I64(y)) => compare!(op, x, y),
        (Value::U8(x), Value::U8(y)) => compare!(op, x, y),
        (Value::U16(x), Value::U16(y)) => compare!(op, x, y),
        (Value::U32(x), Value::U32(y)) => compare!(op, x, y),
        (Value::U64(x), Value::U64(y)) => compare!(op, x, y),
        _ => return None,
    })
}

/// `a * b + c` with one rounding (floats only).
#[inline]
pub(crate) fn fma(a: Value, b: Value, c: Value) -> Option<Value> {
    if let (Some(x), Some(y), Some(z)) = (a.widen(), b.widen(), c.widen()) {
        let d = a.dtype_of_half();
        if d != b.dtype_of_half() || d != c.dtype_of_half() {
            return None;
        }
        return Some(Value::narrow(d, x.mul_add(y, z)));
    }
    Some(match (a, b, c) {
        (Value::F32(x), Value::F32(y), Value::F32(z)) => Value::F32(x.mul_add(y, z)),
        (Value::F64(x), Value::F64(y), Value::F64(z)) => Value::F64(x.mul_add(y, z)),
        _ => return None,
    })
}

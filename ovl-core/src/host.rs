//! Host-side tensors: typed, contiguous, row-major data with a shape.

use crate::dtype::{DType, Scalar};

/// The elements of a host tensor, one variant per dtype.
#[derive(Clone, Debug, PartialEq)]
pub enum TensorData {
    F32(Vec<f32>),
    F64(Vec<f64>),
    I8(Vec<i8>),
    I16(Vec<i16>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    U8(Vec<u8>),
    U16(Vec<u16>),
    U32(Vec<u32>),
    U64(Vec<u64>),
    Bool(Vec<bool>),
}

/// Runs `$body` with `$v` bound to the vector inside any `TensorData` variant.
#[macro_export]
macro_rules! with_tensor_data {
    ($data:expr, $v:ident => $body:expr) => {
        match $data {
            $crate::host::TensorData::F32($v) => $body,
            $crate::host::TensorData::F64($v) => $body,
            $crate::host::TensorData::I8($v) => $body,
            $crate::host::TensorData::I16($v) => $body,
            $crate::host::TensorData::I32($v) => $body,
            $crate::host::TensorData::I64($v) => $body,
            $crate::host::TensorData::U8($v) => $body,
            $crate::host::TensorData::U16($v) => $body,
            $crate::host::TensorData::U32($v) => $body,
            $crate::host::TensorData::U64($v) => $body,
            $crate::host::TensorData::Bool($v) => $body,
        }
    };
}

impl TensorData {
    /// A zero-filled buffer of `len` elements of `dtype`.
    pub fn zeros(dtype: DType, len: usize) -> TensorData {
        match dtype {
            DType::F32 => TensorData::F32(vec![0.0; len]),
            DType::F64 => TensorData::F64(vec![0.0; len]),
            DType::I8 => TensorData::I8(vec![0; len]),
            DType::I16 => TensorData::I16(vec![0; len]),
            DType::I32 => TensorData::I32(vec![0; len]),
            DType::I64 => TensorData::I64(vec![0; len]),
            DType::U8 => TensorData::U8(vec![0; len]),
            DType::U16 => TensorData::U16(vec![0; len]),
            DType::U32 => TensorData::U32(vec![0; len]),
            DType::U64 => TensorData::U64(vec![0; len]),
            DType::Bool => TensorData::Bool(vec![false; len]),
        }
    }

    pub fn dtype(&self) -> DType {
        match self {
            TensorData::F32(_) => DType::F32,
            TensorData::F64(_) => DType::F64,
            TensorData::I8(_) => DType::I8,
            TensorData::I16(_) => DType::I16,
            TensorData::I32(_) => DType::I32,
            TensorData::I64(_) => DType::I64,
            TensorData::U8(_) => DType::U8,
            TensorData::U16(_) => DType::U16,
            TensorData::U32(_) => DType::U32,
            TensorData::U64(_) => DType::U64,
            TensorData::Bool(_) => DType::Bool,
        }
    }

    pub fn len(&self) -> usize {
        with_tensor_data!(self, v => v.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Pointer to the first element, for handing to generated code.
    pub fn as_ptr(&self) -> *const u8 {
        with_tensor_data!(self, v => v.as_ptr() as *const u8)
    }

    /// Mutable pointer to the first element, for handing to generated code.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        with_tensor_data!(self, v => v.as_mut_ptr() as *mut u8)
    }
}

/// A tensor in host memory: dtype, shape and contiguous row-major elements.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    pub shape: Vec<usize>,
    pub data: TensorData,
}

impl HostTensor {
    /// A zero-filled tensor.
    pub fn zeros(dtype: DType, shape: &[usize]) -> HostTensor {
        HostTensor {
            shape: shape.to_vec(),
            data: TensorData::zeros(dtype, shape.iter().product()),
        }
    }

    /// A tensor from a vector and a shape; `None` if the lengths disagree.
    pub fn from_vec<T: Scalar>(shape: &[usize], data: Vec<T>) -> Option<HostTensor> {
        (shape.iter().product::<usize>() == data.len()).then(|| HostTensor {
            shape: shape.to_vec(),
            data: T::wrap(data),
        })
    }

    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The elements as a slice of `T`; `None` if the dtype differs.
    pub fn as_slice<T: Scalar>(&self) -> Option<&[T]> {
        T::unwrap_ref(&self.data)
    }
}

//! Host-side tensors: typed, contiguous, row-major data with a shape.

use crate::dtype::{DType, Literal};
use crate::shape::checked_count;
use std::fmt;

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
    F16(Vec<half::f16>),
    BF16(Vec<half::bf16>),
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
            $crate::host::TensorData::F16($v) => $body,
            $crate::host::TensorData::BF16($v) => $body,
        }
    };
}

/// A tensor buffer that could not be allocated: more bytes than the address space or the
/// system allocator allows. Runners report it instead of aborting the process.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "out of memory: cannot allocate a {dtype}{shape:?} tensor ({}); make the tensor or the \
     workgroup smaller, or split the work",
    bytes_text(*.dtype, .shape)
)]
pub struct AllocError {
    /// The element type.
    pub dtype: DType,
    /// The shape asked for.
    pub shape: Vec<u64>,
}

impl AllocError {
    /// The failure of a buffer of `dtype` and `shape`.
    pub fn new(dtype: DType, shape: &[usize]) -> AllocError {
        AllocError {
            dtype,
            shape: shape.iter().map(|&d| d as u64).collect(),
        }
    }

    /// The bytes asked for; `None` when even that count does not fit 64 bits.
    pub fn bytes(&self) -> Option<u64> {
        checked_count(&self.shape)?.checked_mul(self.dtype.size() as u64)
    }
}

fn bytes_text(dtype: DType, shape: &[u64]) -> String {
    match checked_count(shape).and_then(|n| n.checked_mul(dtype.size() as u64)) {
        Some(b) => format!("{b} bytes"),
        None => "more than 2^64 bytes".to_string(),
    }
}

impl TensorData {
    /// A zero-filled buffer of `len` elements of `dtype`.
    ///
    /// # Panics
    /// When the memory cannot be allocated; runners use [`TensorData::try_zeros`].
    pub fn zeros(dtype: DType, len: usize) -> TensorData {
        Self::try_zeros(dtype, len).unwrap_or_else(|e| panic!("{e}"))
    }

    /// A zero-filled buffer of `len` elements of `dtype`, or the error when it cannot be
    /// allocated (the request is refused, nothing is touched).
    pub fn try_zeros(dtype: DType, len: usize) -> Result<TensorData, AllocError> {
        let fail = || AllocError::new(dtype, &[len]);
        Ok(match dtype {
            DType::F32 => TensorData::F32(zeroed_vec(len).ok_or_else(fail)?),
            DType::F64 => TensorData::F64(zeroed_vec(len).ok_or_else(fail)?),
            DType::I8 => TensorData::I8(zeroed_vec(len).ok_or_else(fail)?),
            DType::I16 => TensorData::I16(zeroed_vec(len).ok_or_else(fail)?),
            DType::I32 => TensorData::I32(zeroed_vec(len).ok_or_else(fail)?),
            DType::I64 => TensorData::I64(zeroed_vec(len).ok_or_else(fail)?),
            DType::U8 => TensorData::U8(zeroed_vec(len).ok_or_else(fail)?),
            DType::U16 => TensorData::U16(zeroed_vec(len).ok_or_else(fail)?),
            DType::U32 => TensorData::U32(zeroed_vec(len).ok_or_else(fail)?),
            DType::U64 => TensorData::U64(zeroed_vec(len).ok_or_else(fail)?),
            DType::Bool => TensorData::Bool(zeroed_vec(len).ok_or_else(fail)?),
            DType::F16 => TensorData::F16(zeroed_vec(len).ok_or_else(fail)?),
            DType::BF16 => TensorData::BF16(zeroed_vec(len).ok_or_else(fail)?),
        })
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
            TensorData::F16(_) => DType::F16,
            TensorData::BF16(_) => DType::BF16,
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
        with_tensor_data!(self, v => v.as_ptr().cast::<u8>())
    }

    /// Mutable pointer to the first element, for handing to generated code.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        with_tensor_data!(self, v => v.as_mut_ptr().cast::<u8>())
    }
}

/// A tensor in host memory: dtype, shape and contiguous row-major elements.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    pub shape: Vec<usize>,
    pub data: TensorData,
}

/// Buffers at least this large are advised to use transparent huge pages, which cuts the cost
/// of faulting in fresh memory by orders of magnitude.
const HUGE_PAGE_THRESHOLD: usize = 4 << 20;
const HUGE_PAGE: usize = 2 << 20;

/// Advises the kernel to back `[ptr, ptr + bytes)` with huge pages (rounded inward to 2 MiB).
fn advise_huge_pages(ptr: *mut u8, bytes: usize) {
    #[cfg(target_os = "linux")]
    if bytes >= HUGE_PAGE_THRESHOLD {
        let start = (ptr as usize).next_multiple_of(HUGE_PAGE);
        let end = (ptr as usize + bytes) / HUGE_PAGE * HUGE_PAGE;
        if end > start {
            // SAFETY: the range lies inside an allocation we own; MADV_HUGEPAGE is advice only
            // and never changes the contents or validity of the memory.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (ptr, bytes);
}

/// A zeroed vector whose fresh pages are huge-page backed when large; `None` when the memory
/// cannot be allocated. Only called with the element types of [`TensorData`], for which all
/// zero bytes are the value zero (`false` for `bool`).
fn zeroed_vec<T: Scalar>(len: usize) -> Option<Vec<T>> {
    let layout = std::alloc::Layout::array::<T>(len).ok()?;
    if layout.size() == 0 {
        return Some(Vec::new());
    }
    // SAFETY: the layout has a non-zero size.
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<T>();
    if ptr.is_null() {
        return None;
    }
    advise_huge_pages(ptr.cast::<u8>(), layout.size());
    // SAFETY: allocated by the global allocator with the layout of `len` elements of `T`, and
    // zeroed, which is a valid value of every element type of a tensor.
    Some(unsafe { Vec::from_raw_parts(ptr, len, len) })
}

/// A buffer for a kernel that writes every element before anything reads it.
pub struct Overwrite<T> {
    buf: Vec<std::mem::MaybeUninit<T>>,
}

impl<T: Scalar> Overwrite<T> {
    fn new(len: usize) -> Option<Self> {
        let mut buf = Vec::new();
        buf.try_reserve_exact(len).ok()?;
        // SAFETY: MaybeUninit<T> needs no initialization.
        unsafe { buf.set_len(len) };
        advise_huge_pages(buf.as_mut_ptr() as *mut u8, len * std::mem::size_of::<T>());
        Some(Overwrite { buf })
    }

    /// Where the kernel writes.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.buf.as_mut_ptr() as *mut u8
    }

    /// The written vector.
    ///
    /// # Safety
    /// Every element must have been written with a valid value of `T`.
    pub unsafe fn assume_init(self) -> Vec<T> {
        let mut buf = std::mem::ManuallyDrop::new(self.buf);
        // SAFETY: same allocation, layout of MaybeUninit<T> equals T, all elements written.
        unsafe { Vec::from_raw_parts(buf.as_mut_ptr() as *mut T, buf.len(), buf.capacity()) }
    }
}

/// An uninitialized tensor of any dtype, see [`Overwrite`].
pub struct OverwriteTensor {
    pub shape: Vec<usize>,
    data: OverwriteData,
}

macro_rules! overwrite_data {
    ($($v:ident($t:ty)),*) => {
        enum OverwriteData { $($v(Overwrite<$t>)),* }

        impl OverwriteTensor {
            /// An uninitialized tensor, or the error when it cannot be allocated.
            pub fn new(dtype: DType, shape: &[usize]) -> Result<OverwriteTensor, AllocError> {
                let fail = || AllocError::new(dtype, shape);
                let len = checked_count(shape)
                    .and_then(|n| usize::try_from(n).ok())
                    .ok_or_else(fail)?;
                let data = match dtype {
                    $(DType::$v => OverwriteData::$v(Overwrite::new(len).ok_or_else(fail)?)),*
                };
                Ok(OverwriteTensor { shape: shape.to_vec(), data })
            }

            /// Where the kernel writes.
            pub fn as_mut_ptr(&mut self) -> *mut u8 {
                match &mut self.data { $(OverwriteData::$v(b) => b.as_mut_ptr()),* }
            }

            /// The written tensor.
            ///
            /// # Safety
            /// Every element must have been written with a valid value of the dtype.
            pub unsafe fn assume_init(self) -> HostTensor {
                let data = match self.data {
                    // SAFETY: forwarded to the caller.
                    $(OverwriteData::$v(b) => TensorData::$v(unsafe { b.assume_init() })),*
                };
                HostTensor { shape: self.shape, data }
            }
        }
    };
}
overwrite_data!(
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
    BF16(half::bf16)
);

/// Tensor data held outside host memory, such as a GPU tensor (`ovl_codegen::cuda::DeviceTensor`
/// implements it): what a lazy graph needs to take it as an input. A backend that runs where
/// the data is reads it in place (the CUDA backend); any other copies it to the host first.
pub trait DeviceData: std::fmt::Debug + Send + Sync + 'static {
    /// The element type.
    fn dtype(&self) -> DType;
    /// The shape.
    fn shape(&self) -> &[usize];
    /// A copy in host memory.
    fn to_host(&self) -> Result<HostTensor, Box<dyn std::error::Error + Send + Sync>>;
    /// For the backend that holds the data, to reach its own type.
    fn as_any(&self) -> &dyn std::any::Any;
}

impl HostTensor {
    /// A zero-filled tensor.
    ///
    /// # Panics
    /// When the memory cannot be allocated; runners use [`HostTensor::try_zeros`].
    pub fn zeros(dtype: DType, shape: &[usize]) -> HostTensor {
        HostTensor {
            shape: shape.to_vec(),
            data: TensorData::zeros(dtype, shape.iter().product()),
        }
    }

    /// A zero-filled tensor, or the error when it cannot be allocated (its element count or
    /// byte size overflows, or the allocator refuses it).
    pub fn try_zeros(dtype: DType, shape: &[usize]) -> Result<HostTensor, AllocError> {
        let len = checked_count(shape)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| AllocError::new(dtype, shape))?;
        let data = TensorData::try_zeros(dtype, len).map_err(|_| AllocError::new(dtype, shape))?;
        Ok(HostTensor {
            shape: shape.to_vec(),
            data,
        })
    }

    /// A tensor from a vector and a shape; `None` if the lengths disagree (a shape whose
    /// element count overflows agrees with no vector).
    pub fn from_vec<T: Scalar>(shape: &[usize], data: Vec<T>) -> Option<HostTensor> {
        (checked_count(shape) == Some(data.len() as u64)).then(|| HostTensor {
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

    /// Sets every element to zero (`false` for `bool`), keeping the buffer.
    pub fn fill_zero(&mut self) {
        with_tensor_data!(&mut self.data, v => v.fill(Default::default()))
    }
}

/// A Rust type that can be a tensor element: `f32 f64 i8 i16 i32 i64 u8 u16 u32 u64 bool`
/// and the half types `half::f16`, `half::bf16`.
pub trait Scalar: Copy + Send + Sync + fmt::Debug + PartialEq + Default + 'static {
    const DTYPE: DType;
    /// The value as an IR literal.
    fn to_literal(self) -> Literal;
    /// Wraps a vector of this type as tensor data.
    fn wrap(data: Vec<Self>) -> TensorData;
    /// Borrows tensor data of this type; `None` if the dtype differs.
    fn unwrap_ref(data: &TensorData) -> Option<&[Self]>;
    /// Takes tensor data of this type; `Err` gives the data back if the dtype differs.
    fn unwrap(data: TensorData) -> Result<Vec<Self>, TensorData>;
}

macro_rules! impl_scalar {
    ($($t:ty => $d:ident, $variant:ident, $lit:ident);* $(;)?) => {$(
        impl Scalar for $t {
            const DTYPE: DType = DType::$d;
            #[allow(clippy::unnecessary_cast)]
            fn to_literal(self) -> Literal {
                impl_scalar!(@lit $lit self)
            }
            fn wrap(data: Vec<Self>) -> TensorData {
                TensorData::$variant(data)
            }
            fn unwrap_ref(data: &TensorData) -> Option<&[Self]> {
                match data {
                    TensorData::$variant(v) => Some(v),
                    _ => None,
                }
            }
            fn unwrap(data: TensorData) -> Result<Vec<Self>, TensorData> {
                match data {
                    TensorData::$variant(v) => Ok(v),
                    other => Err(other),
                }
            }
        }
    )*};
    (@lit Float $v:ident) => { Literal::Float($v as f64) };
    (@lit Half $v:ident) => { Literal::Float($v.to_f64()) };
    (@lit Int $v:ident) => { Literal::Int($v as i64) };
    (@lit UInt $v:ident) => { Literal::UInt($v as u64) };
    (@lit Bool $v:ident) => { Literal::Bool($v) };
}

impl_scalar! {
    f32 => F32, F32, Float;
    f64 => F64, F64, Float;
    i8 => I8, I8, Int;
    i16 => I16, I16, Int;
    i32 => I32, I32, Int;
    i64 => I64, I64, Int;
    u8 => U8, U8, UInt;
    u16 => U16, U16, UInt;
    u32 => U32, U32, UInt;
    u64 => U64, U64, UInt;
    bool => Bool, Bool, Bool;
    half::f16 => F16, F16, Half;
    half::bf16 => BF16, BF16, Half;
}

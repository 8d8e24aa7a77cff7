//! What can be wrong with a DLPack tensor handed to ovl, or with what is asked of it.

use super::Device;

/// A DLPack tensor ovl cannot take, or cannot use the way asked. Each message says what was
/// wrong and what to do about it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DlpackError {
    /// The producer handed over a NULL managed tensor.
    #[error("the DLPack managed tensor is a NULL pointer; the producer exported nothing")]
    Null,
    /// A versioned tensor of another major version (its layout is unknown; only its deleter
    /// was called).
    #[error(
        "DLPack version {major}.{minor} is not supported: ovl reads major version {supported}; \
         ask the producer for version {supported} (e.g. `__dlpack__(max_version=({supported}, 0))`)"
    )]
    UnsupportedVersion {
        /// The tensor's major version.
        major: u32,
        /// Its minor version.
        minor: u32,
        /// The major version ovl reads.
        supported: u32,
    },
    /// An element type ovl has no dtype for.
    #[error(
        "DLPack dtype (code {code} = {code_name}, {bits} bits, {lanes} lanes) is not supported: \
         ovl takes f32, f64, i8-i64, u8-u64 (kDLFloat/kDLInt/kDLUInt, 1 lane) and bool \
         (kDLBool, 8 bits); convert the array to one of them first"
    )]
    UnsupportedDtype {
        /// The `DLDataTypeCode`.
        code: u8,
        /// Its name in the header.
        code_name: &'static str,
        /// Bits per lane.
        bits: u8,
        /// Lanes per element.
        lanes: u16,
    },
    /// Memory ovl cannot reach.
    #[error(
        "DLPack device type {device_type} (device id {device_id}) is not supported: ovl takes \
         kDLCPU (1), kDLCUDA (2) and kDLCUDAHost (3); copy the array to the CPU or a CUDA GPU \
         first"
    )]
    UnsupportedDevice {
        /// The `DLDeviceType`.
        device_type: i32,
        /// The device id.
        device_id: i32,
    },
    /// A malformed tensor: negative `ndim`, NULL shape, a negative size, an element count
    /// or byte size that overflows.
    #[error("malformed DLPack tensor: {what}; the producer exported an invalid tensor")]
    BadShape {
        /// What is wrong.
        what: String,
    },
    /// NULL data for a tensor that has elements.
    #[error(
        "the DLPack tensor has {elements} elements but a NULL data pointer; the producer \
         exported an invalid tensor"
    )]
    NullData {
        /// The element count.
        elements: u64,
    },
    /// Strides that are not contiguous row-major, where ovl would use the memory in place.
    #[error(
        "the DLPack tensor is not contiguous row-major: axis {axis} of shape {shape:?} has \
         stride {stride}, {expected} expected (strides {strides:?}, in elements); pass a \
         contiguous array (e.g. `np.ascontiguousarray(x)`, `x.contiguous()`), or copy it with \
         `to_host()`"
    )]
    NotContiguous {
        /// The first axis (from the last) whose stride is off.
        axis: usize,
        /// The shape.
        shape: Vec<usize>,
        /// All strides.
        strides: Vec<i64>,
        /// That axis's stride.
        stride: i64,
        /// The stride row-major order needs there.
        expected: i64,
    },
    /// A first element not aligned for its dtype, where ovl would use the memory in place.
    #[error(
        "the DLPack tensor's first element at {address:#x} is not aligned to {align} bytes; \
         ovl's kernels need aligned elements: pass an aligned array, or copy it with \
         `to_host()`"
    )]
    Misaligned {
        /// The element address.
        address: usize,
        /// The alignment needed (the dtype's size).
        align: usize,
    },
    /// A read-only tensor asked for as an output.
    #[error(
        "the DLPack tensor is read-only (DLPACK_FLAG_BITMASK_READ_ONLY) and cannot be an \
         output; pass a writable array as the output"
    )]
    ReadOnly,
    /// Memory on another device than asked for (host memory for a device run, or the other
    /// way round).
    #[error("the DLPack tensor is in {got} memory, but {wanted} memory is needed here; {hint}")]
    WrongDevice {
        /// Where it is.
        got: Device,
        /// Where it is needed.
        wanted: &'static str,
        /// What to do.
        hint: &'static str,
    },
    /// Tensors of one call on two CUDA devices.
    #[error(
        "tensor {index} is on CUDA device {device}, but tensor {first} is on device {first_device}; \
         pass tensors of one device (move them with `x.to(device)`, `jax.device_put`)"
    )]
    MixedDevices {
        /// The first tensor's position.
        first: usize,
        /// Its device.
        first_device: i32,
        /// The position of the one on another device.
        index: usize,
        /// Its device.
        device: i32,
    },
    /// A host copy of the tensor could not be allocated.
    #[error(transparent)]
    Alloc(#[from] ovl_ir::AllocError),
}

//! The DLPack C ABI (`dlpack.h`, major version 1), declared by hand: the structs a producer
//! hands over and a consumer takes, and the constants ovl reads. Field order and types follow
//! the header exactly; the layout tests at the end check the sizes and offsets of 64-bit
//! targets.

use std::ffi::c_void;

/// The DLPack major version these declarations follow. A [`DLManagedTensorVersioned`] of
/// another major version has another layout past its `flags`: only its deleter may be called.
pub const DLPACK_MAJOR_VERSION: u32 = 1;
/// The minor version ovl exports (minor versions add enum values, never change the layout).
pub const DLPACK_MINOR_VERSION: u32 = 1;

/// `flags` bit: the consumer must not write to the tensor.
pub const DLPACK_FLAG_BITMASK_READ_ONLY: u64 = 1 << 0;
/// `flags` bit: the producer made the tensor as a copy, so the consumer owns it alone until
/// it calls the deleter.
pub const DLPACK_FLAG_BITMASK_IS_COPIED: u64 = 1 << 1;
/// `flags` bit: a sub-byte type is padded rather than packed (ovl has no sub-byte types).
pub const DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED: u64 = 1 << 2;

/// `DLDeviceType` value: host memory.
pub const K_DL_CPU: i32 = 1;
/// `DLDeviceType` value: CUDA device memory (`device_id` is the device ordinal).
pub const K_DL_CUDA: i32 = 2;
/// `DLDeviceType` value: pinned host memory from `cudaMallocHost` (readable by the CPU).
pub const K_DL_CUDA_HOST: i32 = 3;

/// `DLDataTypeCode` value: signed integer.
pub const K_DL_INT: u8 = 0;
/// `DLDataTypeCode` value: unsigned integer.
pub const K_DL_UINT: u8 = 1;
/// `DLDataTypeCode` value: IEEE floating point.
pub const K_DL_FLOAT: u8 = 2;
/// `DLDataTypeCode` value: opaque handle.
pub const K_DL_OPAQUE_HANDLE: u8 = 3;
/// `DLDataTypeCode` value: bfloat16.
pub const K_DL_BFLOAT: u8 = 4;
/// `DLDataTypeCode` value: complex number.
pub const K_DL_COMPLEX: u8 = 5;
/// `DLDataTypeCode` value: boolean (8 bits per element by convention).
pub const K_DL_BOOL: u8 = 6;

/// `DLPackVersion`: the version of a [`DLManagedTensorVersioned`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DLPackVersion {
    /// Changes with the layout of the ABI.
    pub major: u32,
    /// Changes when enum values are added.
    pub minor: u32,
}

/// `DLDevice`: where the data lives. `device_type` is the C enum `DLDeviceType`, declared as
/// `i32` (a Rust enum must not receive values it does not list).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DLDevice {
    /// `kDLCPU`, `kDLCUDA`, ... ([`K_DL_CPU`], [`K_DL_CUDA`], [`K_DL_CUDA_HOST`]).
    pub device_type: i32,
    /// The device ordinal (0 for host memory).
    pub device_id: i32,
}

/// `DLDataType`: an element type.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DLDataType {
    /// A `DLDataTypeCode` ([`K_DL_INT`], [`K_DL_UINT`], [`K_DL_FLOAT`], [`K_DL_BOOL`], ...).
    pub code: u8,
    /// Bits per lane.
    pub bits: u8,
    /// Lanes per element (1 for scalars).
    pub lanes: u16,
}

/// `DLTensor`: a tensor that does not manage its memory.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DLTensor {
    /// The allocation (a device pointer for CUDA); the elements start `byte_offset` bytes on.
    pub data: *mut c_void,
    /// Where `data` lives.
    pub device: DLDevice,
    /// The number of dimensions.
    pub ndim: i32,
    /// The element type.
    pub dtype: DLDataType,
    /// `ndim` sizes.
    pub shape: *mut i64,
    /// `ndim` strides in elements, or NULL for a contiguous row-major tensor.
    pub strides: *mut i64,
    /// The offset in bytes from `data` to the first element.
    pub byte_offset: u64,
}

/// `DLManagedTensor`: the legacy (unversioned) managed tensor of DLPack before 1.0.
#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensor {
    /// The tensor.
    pub dl_tensor: DLTensor,
    /// The producer's context (may be NULL).
    pub manager_ctx: *mut c_void,
    /// Frees the context and the struct itself; called once by the consumer when done (may
    /// be NULL).
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

/// `DLManagedTensorVersioned`: the managed tensor of DLPack 1.x.
#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensorVersioned {
    /// The ABI version; read before anything else.
    pub version: DLPackVersion,
    /// The producer's context (may be NULL).
    pub manager_ctx: *mut c_void,
    /// Frees the context and the struct itself; called once by the consumer when done (may
    /// be NULL).
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    /// [`DLPACK_FLAG_BITMASK_READ_ONLY`], [`DLPACK_FLAG_BITMASK_IS_COPIED`], ...
    pub flags: u64,
    /// The tensor.
    pub dl_tensor: DLTensor,
}

#[cfg(all(test, target_pointer_width = "64"))]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    /// The sizes and offsets a C compiler gives the header's structs on 64-bit targets.
    #[test]
    fn layout_matches_the_header() {
        assert_eq!(size_of::<DLPackVersion>(), 8);
        assert_eq!(size_of::<DLDevice>(), 8);
        assert_eq!(size_of::<DLDataType>(), 4);
        assert_eq!(offset_of!(DLTensor, device), 8);
        assert_eq!(offset_of!(DLTensor, ndim), 16);
        assert_eq!(offset_of!(DLTensor, dtype), 20);
        assert_eq!(offset_of!(DLTensor, shape), 24);
        assert_eq!(offset_of!(DLTensor, strides), 32);
        assert_eq!(offset_of!(DLTensor, byte_offset), 40);
        assert_eq!(size_of::<DLTensor>(), 48);
        assert_eq!(offset_of!(DLManagedTensor, manager_ctx), 48);
        assert_eq!(offset_of!(DLManagedTensor, deleter), 56);
        assert_eq!(size_of::<DLManagedTensor>(), 64);
        assert_eq!(offset_of!(DLManagedTensorVersioned, manager_ctx), 8);
        assert_eq!(offset_of!(DLManagedTensorVersioned, deleter), 16);
        assert_eq!(offset_of!(DLManagedTensorVersioned, flags), 24);
        assert_eq!(offset_of!(DLManagedTensorVersioned, dl_tensor), 32);
        assert_eq!(size_of::<DLManagedTensorVersioned>(), 80);
    }
}

//! ovl tensors handed to a DLPack consumer: a [`HostTensor`] or a [`DeviceTensor`] moved into
//! a boxed managed tensor whose deleter frees it (the tensor, its shape and strides arrays
//! and the managed struct itself, one allocation).

use super::dtype::to_dl;
use super::ffi::{
    DLDevice, DLManagedTensor, DLManagedTensorVersioned, DLPackVersion, DLTensor,
    DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION, K_DL_CPU, K_DL_CUDA,
};
use crate::cuda::DeviceTensor;
use ovl_ir::{DType, HostTensor};
use std::ffi::c_void;
use std::mem::MaybeUninit;

/// A tensor ovl hands to a DLPack consumer: host memory or GPU 0's.
#[derive(Debug)]
pub enum Exportable {
    /// Exported as `kDLCPU`.
    Host(HostTensor),
    /// Exported as `kDLCUDA`, device 0 (where ovl's device tensors live). Other clones of the
    /// tensor share its memory: the consumer sees their writes.
    Device(DeviceTensor),
}

impl From<HostTensor> for Exportable {
    fn from(t: HostTensor) -> Exportable {
        Exportable::Host(t)
    }
}

impl From<DeviceTensor> for Exportable {
    fn from(t: DeviceTensor) -> Exportable {
        Exportable::Device(t)
    }
}

impl Exportable {
    fn dtype(&self) -> DType {
        match self {
            Exportable::Host(t) => t.dtype(),
            Exportable::Device(t) => t.dtype(),
        }
    }

    fn shape(&self) -> &[usize] {
        match self {
            Exportable::Host(t) => &t.shape,
            Exportable::Device(t) => t.shape(),
        }
    }

    /// The device and the first element (NULL for a tensor without elements, as DLPack asks).
    fn data(&mut self) -> (DLDevice, *mut c_void) {
        let (device, ptr, empty) = match self {
            Exportable::Host(t) => (K_DL_CPU, t.data.as_mut_ptr().cast(), t.is_empty()),
            Exportable::Device(t) => (K_DL_CUDA, t.ptr() as *mut c_void, t.is_empty()),
        };
        let device = DLDevice {
            device_type: device,
            device_id: 0,
        };
        (device, if empty { std::ptr::null_mut() } else { ptr })
    }
}

/// One exported tensor: the managed struct first (a pointer to it is a pointer to this), then
/// what its pointers point into.
#[repr(C)]
struct Export<M> {
    /// Written once the box's address is known (`MaybeUninit<M>` has the layout of `M`).
    managed: MaybeUninit<M>,
    shape: Vec<i64>,
    strides: Vec<i64>,
    tensor: Exportable,
}

/// The boxed export of `tensor`: the managed struct that `managed` makes from the `DLTensor`
/// (pointing into the box) and the box's address (the `manager_ctx`).
fn boxed<M>(tensor: Exportable, managed: impl FnOnce(DLTensor, *mut c_void) -> M) -> *mut M {
    let shape: Vec<i64> = tensor.shape().iter().map(|&d| d as i64).collect();
    // Row-major strides, given explicitly (DLPack 1.x deprecates NULL strides).
    let mut strides = vec![1i64; shape.len()];
    for axis in (0..shape.len().saturating_sub(1)).rev() {
        strides[axis] = strides[axis + 1] * shape[axis + 1];
    }
    let dtype = to_dl(tensor.dtype());
    let ndim = shape.len() as i32;
    let mut export = Box::new(Export {
        managed: MaybeUninit::uninit(),
        shape,
        strides,
        tensor,
    });
    let (device, data) = export.tensor.data();
    let dl_tensor = DLTensor {
        data,
        device,
        ndim,
        dtype,
        shape: export.shape.as_mut_ptr(),
        strides: export.strides.as_mut_ptr(),
        byte_offset: 0,
    };
    let raw = Box::into_raw(export);
    // SAFETY: `raw` is the box just leaked, valid and not otherwise referenced.
    unsafe { (*raw).managed.write(managed(dl_tensor, raw.cast())) };
    raw.cast()
}

/// Frees an export made by [`boxed`].
///
/// # Safety
/// `p` is NULL or a pointer returned by `boxed::<M>`, not freed yet.
unsafe fn free<M>(p: *mut M) {
    if !p.is_null() {
        // SAFETY: the caller's contract: the leaked box of an `Export<M>`, whose first field
        // (`repr(C)`) is the managed struct `p` points to.
        drop(unsafe { Box::from_raw(p.cast::<Export<M>>()) });
    }
}

unsafe extern "C" fn delete_versioned(p: *mut DLManagedTensorVersioned) {
    // SAFETY: the deleter of an export by `export_versioned`, called once by the consumer as
    // DLPack requires.
    unsafe { free(p) }
}

unsafe extern "C" fn delete_legacy(p: *mut DLManagedTensor) {
    // SAFETY: the deleter of an export by `export_legacy`, called once by the consumer.
    unsafe { free(p) }
}

/// Hands `tensor` to a DLPack consumer as a DLPack 1.x managed tensor (version
/// [`DLPACK_MAJOR_VERSION`].[`DLPACK_MINOR_VERSION`]) with `flags`
/// ([`DLPACK_FLAG_BITMASK_READ_ONLY`](super::ffi::DLPACK_FLAG_BITMASK_READ_ONLY), ...; 0:
/// writable), its strides given explicitly (row-major), `bool` as `kDLBool` of 8 bits. The
/// result is never NULL; the consumer owns it and must call its deleter once, which frees the
/// tensor (or, for a device tensor, drops this reference to its memory).
pub fn export_versioned(
    tensor: impl Into<Exportable>,
    flags: u64,
) -> *mut DLManagedTensorVersioned {
    boxed(tensor.into(), |dl_tensor, ctx| DLManagedTensorVersioned {
        version: DLPackVersion {
            major: DLPACK_MAJOR_VERSION,
            minor: DLPACK_MINOR_VERSION,
        },
        manager_ctx: ctx,
        deleter: Some(delete_versioned),
        flags,
        dl_tensor,
    })
}

/// Hands `tensor` to a DLPack consumer as a legacy (unversioned) managed tensor, for
/// consumers that predate DLPack 1.0; otherwise as [`export_versioned`] without flags.
pub fn export_legacy(tensor: impl Into<Exportable>) -> *mut DLManagedTensor {
    boxed(tensor.into(), |dl_tensor, ctx| DLManagedTensor {
        dl_tensor,
        manager_ctx: ctx,
        deleter: Some(delete_legacy),
    })
}

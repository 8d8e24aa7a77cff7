//! DLPack: tensors exchanged with NumPy, PyTorch, JAX, CuPy and any other DLPack library
//! without copies (`docs/dlpack.md`).
//!
//! - [`DlpackTensor`] takes a producer's managed tensor (`DLManagedTensorVersioned` or the
//!   legacy `DLManagedTensor`), validates it once, and hands its memory to runs in place:
//!   host memory as [`plan::Input::Raw`](crate::plan::Input::Raw) /
//!   [`plan::Output::Raw`](crate::plan::Output::Raw) (or the raw pointers of
//!   [`CompiledOperator::run_raw`](crate::CompiledOperator::run_raw)), CUDA memory as a
//!   device pointer. Strides that are not contiguous row-major are refused there, naming
//!   the axis; [`DlpackTensor::to_host`] copies any layout into a fresh [`ovl_ir::HostTensor`].
//!   Dropping it calls the producer's deleter, once.
//! - [`export_versioned`] and [`export_legacy`] hand a [`ovl_ir::HostTensor`] or a
//!   [`DeviceTensor`](crate::cuda::DeviceTensor) to a consumer; the deleter frees it.
//! - [`ffi`] declares the C ABI of `dlpack.h` (major version 1) by hand.
//!
//! ```
//! use ovl_ir::{DType, HostTensor};
//! use ovl_runtime::dlpack::{export_versioned, Device, DlpackTensor};
//! let x = HostTensor::from_vec(&[2, 2], vec![1.0f32, 2.0, 3.0, 4.0]).unwrap();
//! let managed = export_versioned(x.clone(), 0);
//! // SAFETY: a managed tensor just exported, handed over once.
//! let t = unsafe { DlpackTensor::from_versioned(managed) }.unwrap();
//! assert_eq!((t.dtype(), t.shape(), t.device()), (DType::F32, &[2, 2][..], Device::Cpu));
//! assert_eq!(t.to_host().unwrap(), x);
//! drop(t); // the export's deleter frees it
//! ```

mod dtype;
mod error;
mod export;
pub mod ffi;
mod import;
mod layout;

pub use dtype::{from_dl, to_dl};
pub use error::DlpackError;
pub use export::{export_legacy, export_versioned, Exportable};
pub use import::DlpackTensor;

use std::fmt;

/// Where the elements of a [`DlpackTensor`] live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Device {
    /// Host memory (`kDLCPU`, and `kDLCUDAHost`: pinned host memory, which the CPU reads as
    /// any other).
    Cpu,
    /// The memory of CUDA device `ordinal` (`kDLCUDA`).
    Cuda {
        /// The CUDA device ordinal (the tensor's `device_id`).
        ordinal: i32,
    },
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("host"),
            Device::Cuda { ordinal } => write!(f, "CUDA device {ordinal}"),
        }
    }
}

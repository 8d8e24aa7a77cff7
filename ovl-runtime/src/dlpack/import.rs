//! DLPack tensors taken from a producer ([`DlpackTensor`]): validated once, their memory used
//! in place by runs (host memory as [`Input::Raw`] / [`Output::Raw`], CUDA memory as a device
//! pointer) or copied into a [`HostTensor`], and given back to the producer (its deleter
//! called once) when dropped.

use super::error::DlpackError;
use super::ffi::{
    DLManagedTensor, DLManagedTensorVersioned, DLTensor, DLPACK_FLAG_BITMASK_IS_COPIED,
    DLPACK_FLAG_BITMASK_READ_ONLY, DLPACK_MAJOR_VERSION, K_DL_CPU, K_DL_CUDA, K_DL_CUDA_HOST,
};
use super::{dtype, layout, Device};
use crate::plan::{Input, Output};
use ovl_ir::{DType, HostTensor};
use std::ffi::c_void;
use std::fmt;
use std::ptr::NonNull;

/// The managed tensor a [`DlpackTensor`] owns: its producer's deleter is called when this is
/// dropped, exactly once.
enum Managed {
    Versioned(NonNull<DLManagedTensorVersioned>),
    Legacy(NonNull<DLManagedTensor>),
}

impl Drop for Managed {
    fn drop(&mut self) {
        match *self {
            Managed::Versioned(p) => {
                // SAFETY: the constructor's contract: `p` is a live managed tensor whose
                // ownership was handed over; the deleter's offset is the same in every major
                // version, so it may be read even when the version was refused. This is the
                // only call, as `Managed` is dropped once.
                unsafe {
                    if let Some(deleter) = (*p.as_ptr()).deleter {
                        deleter(p.as_ptr());
                    }
                }
            }
            Managed::Legacy(p) => {
                // SAFETY: as above, for a legacy managed tensor.
                unsafe {
                    if let Some(deleter) = (*p.as_ptr()).deleter {
                        deleter(p.as_ptr());
                    }
                }
            }
        }
    }
}

/// A tensor borrowed from a DLPack producer (NumPy, PyTorch, JAX, CuPy, ... or ovl's own
/// [`export_versioned`](super::export_versioned)), validated: an ovl dtype, a device ovl
/// reaches, a well-formed shape. It holds the producer's memory until dropped, when the
/// producer's deleter is called, once; whatever uses its memory in place (a run given
/// [`input`](Self::input) or [`output`](Self::output)) must therefore finish while it lives,
/// which the borrows of those methods enforce.
pub struct DlpackTensor {
    /// Calls the producer's deleter when dropped; the other fields are copies, nothing points
    /// into the managed struct.
    managed: Managed,
    dtype: DType,
    shape: Vec<usize>,
    /// In elements; `None`: NULL in the tensor (contiguous row-major).
    strides: Option<Vec<i64>>,
    device: Device,
    /// The first element (`data + byte_offset`); NULL only for a tensor without elements.
    first: *mut u8,
    read_only: bool,
    copied: bool,
}

// SAFETY: a `DlpackTensor` owns its managed tensor (no other consumer holds it) and reads the
// producer's memory only through its methods: `&self` ones read, and writing takes `&mut self`
// (`output`, `host_mut_ptr`), so sharing it between threads races no more than sharing a
// slice. Dropping it on another thread calls the producer's deleter there; DLPack does not tie
// the deleter to a thread (NumPy's and PyTorch's take the Python GIL themselves).
unsafe impl Send for DlpackTensor {}
// SAFETY: see `Send`: shared references only read.
unsafe impl Sync for DlpackTensor {}

impl fmt::Debug for DlpackTensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DlpackTensor")
            .field("dtype", &self.dtype)
            .field("shape", &self.shape)
            .field("strides", &self.strides)
            .field("device", &self.device)
            .field("read_only", &self.read_only)
            .finish_non_exhaustive()
    }
}

impl DlpackTensor {
    /// Takes a DLPack 1.x managed tensor (what `__dlpack__(max_version=(1, 0))` returns, in a
    /// capsule named `dltensor_versioned`) and validates it. On success and on
    /// every error but [`DlpackError::Null`], the tensor is owned: its deleter is called once,
    /// when the returned tensor is dropped or, on an error, before this returns. A tensor of
    /// another major version is refused without reading past its `flags`.
    ///
    /// # Safety
    /// `managed` must be NULL or a valid `DLManagedTensorVersioned` whose ownership passes to
    /// this call (the caller must not use it or call its deleter afterwards); its shape and
    /// strides arrays must hold `ndim` values; its data, if the tensor has elements, must
    /// hold them at the offsets its shape, strides and `byte_offset` give, on its device, and
    /// stay valid until the deleter is called; no one else may write it meanwhile (and no one
    /// else read it while ovl writes it as an output).
    pub unsafe fn from_versioned(
        managed: *mut DLManagedTensorVersioned,
    ) -> Result<DlpackTensor, DlpackError> {
        let Some(p) = NonNull::new(managed) else {
            return Err(DlpackError::Null);
        };
        let owner = Managed::Versioned(p);
        // SAFETY: the caller's contract: a valid managed tensor; `version` comes first in
        // every major version.
        let version = unsafe { (*managed).version };
        if version.major != DLPACK_MAJOR_VERSION {
            return Err(DlpackError::UnsupportedVersion {
                major: version.major,
                minor: version.minor,
                supported: DLPACK_MAJOR_VERSION,
            });
        }
        // SAFETY: a valid managed tensor of the layout declared (major version checked).
        let (flags, tensor) = unsafe { ((*managed).flags, (*managed).dl_tensor) };
        // SAFETY: the caller's contract on the arrays and the data.
        unsafe { Self::validated(owner, &tensor, flags) }
    }

    /// Takes a legacy (pre-1.0, unversioned) managed tensor (a capsule named `dltensor`) and
    /// validates it, as [`from_versioned`](Self::from_versioned) does; legacy tensors have no
    /// flags, so they are never read-only.
    ///
    /// # Safety
    /// As for [`from_versioned`](Self::from_versioned), for a `DLManagedTensor`.
    pub unsafe fn from_legacy(managed: *mut DLManagedTensor) -> Result<DlpackTensor, DlpackError> {
        let Some(p) = NonNull::new(managed) else {
            return Err(DlpackError::Null);
        };
        let owner = Managed::Legacy(p);
        // SAFETY: the caller's contract: a valid managed tensor.
        let tensor = unsafe { (*managed).dl_tensor };
        // SAFETY: the caller's contract on the arrays and the data.
        unsafe { Self::validated(owner, &tensor, 0) }
    }

    /// # Safety
    /// `t`'s shape and strides arrays hold `ndim` values.
    unsafe fn validated(
        managed: Managed,
        t: &DLTensor,
        flags: u64,
    ) -> Result<DlpackTensor, DlpackError> {
        let dtype = dtype::from_dl(t.dtype)?;
        let device = match (t.device.device_type, t.device.device_id) {
            (K_DL_CPU | K_DL_CUDA_HOST, _) => Device::Cpu,
            (K_DL_CUDA, ordinal) if ordinal >= 0 => Device::Cuda { ordinal },
            (device_type, device_id) => {
                return Err(DlpackError::UnsupportedDevice {
                    device_type,
                    device_id,
                })
            }
        };
        let bad = |what: String| DlpackError::BadShape { what };
        let ndim = usize::try_from(t.ndim).map_err(|_| bad(format!("ndim is {}", t.ndim)))?;
        if ndim > 0 && t.shape.is_null() {
            return Err(bad(format!("ndim is {ndim} but the shape is NULL")));
        }
        let dims: &[i64] = if ndim == 0 {
            &[]
        } else {
            // SAFETY: non-NULL, `ndim` values (the caller's contract).
            unsafe { std::slice::from_raw_parts(t.shape, ndim) }
        };
        let mut shape = Vec::with_capacity(ndim);
        for (axis, &d) in dims.iter().enumerate() {
            let size = usize::try_from(d)
                .map_err(|_| bad(format!("axis {axis} of shape {dims:?} has size {d}")))?;
            shape.push(size);
        }
        let elements = shape
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(d as u64))
            .filter(|&n| {
                n.checked_mul(dtype.size() as u64)
                    .is_some_and(|b| b <= isize::MAX as u64)
            })
            .ok_or_else(|| {
                bad(format!(
                    "shape {dims:?} of {dtype} overflows the address space"
                ))
            })?;
        let strides = if ndim == 0 || t.strides.is_null() {
            None
        } else {
            // SAFETY: non-NULL, `ndim` values (the caller's contract).
            Some(unsafe { std::slice::from_raw_parts(t.strides, ndim) }.to_vec())
        };
        if let Some(s) = &strides {
            let fits = layout::offset_range(&shape, s).is_none_or(|(low, high)| {
                let size = dtype.size() as i64;
                low.checked_mul(size)
                    .is_some_and(|b| b >= -(isize::MAX as i64))
                    && high
                        .checked_mul(size)
                        .is_some_and(|b| b <= isize::MAX as i64)
            });
            if !fits {
                return Err(bad(format!(
                    "strides {s:?} of shape {dims:?} overflow the address space"
                )));
            }
        }
        if elements > 0 && t.data.is_null() {
            return Err(DlpackError::NullData { elements });
        }
        let first = if t.data.is_null() {
            std::ptr::null_mut()
        } else {
            t.data.cast::<u8>().wrapping_add(t.byte_offset as usize)
        };
        Ok(DlpackTensor {
            managed,
            dtype,
            shape,
            strides,
            device,
            first,
            read_only: flags & DLPACK_FLAG_BITMASK_READ_ONLY != 0,
            copied: flags & DLPACK_FLAG_BITMASK_IS_COPIED != 0,
        })
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The strides in elements as the producer gave them; `None` when it gave NULL (contiguous
    /// row-major) or the tensor has no axes.
    pub fn strides(&self) -> Option<&[i64]> {
        self.strides.as_deref()
    }

    /// Where the elements live.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether it came as a DLPack 1.x `DLManagedTensorVersioned` (else a legacy
    /// `DLManagedTensor`).
    pub fn is_versioned(&self) -> bool {
        matches!(self.managed, Managed::Versioned(_))
    }

    /// Whether the producer marked the tensor read-only (it may be an input, not an output).
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Whether the producer marked the tensor as a copy made for this consumer alone.
    pub fn is_copied(&self) -> bool {
        self.copied
    }

    /// Whether the elements are contiguous row-major, so usable in place (alignment aside).
    pub fn is_contiguous(&self) -> bool {
        layout::check_row_major(&self.shape, self.strides.as_deref()).is_ok()
    }

    /// The first element, if ovl's kernels can use the memory in place: contiguous row-major
    /// and aligned for the dtype. A tensor without elements gives a dangling, aligned pointer.
    fn in_place(&self) -> Result<*mut u8, DlpackError> {
        layout::check_row_major(&self.shape, self.strides.as_deref())?;
        if self.first.is_null() || self.is_empty() {
            return Ok(NonNull::<u64>::dangling().as_ptr().cast());
        }
        let align = self.dtype.size();
        if !(self.first as usize).is_multiple_of(align) {
            return Err(DlpackError::Misaligned {
                address: self.first as usize,
                align,
            });
        }
        Ok(self.first)
    }

    fn on_host(&self) -> Result<(), DlpackError> {
        match self.device {
            Device::Cpu => Ok(()),
            got => Err(DlpackError::WrongDevice {
                got,
                wanted: "host",
                hint: "copy it to the host first (e.g. `x.cpu()`), or run on the GPU",
            }),
        }
    }

    /// The host pointer to the elements for reading in place ([`Input::Raw`],
    /// [`CompiledOperator::run_raw`](crate::CompiledOperator::run_raw)). Errors: device
    /// memory, strides that are not contiguous row-major (naming the axis), a misaligned
    /// first element. The pointer is valid while `self` lives.
    pub fn host_ptr(&self) -> Result<*const c_void, DlpackError> {
        self.on_host()?;
        Ok(self.in_place()?.cast_const().cast())
    }

    /// The host pointer to the elements for writing in place ([`Output::Raw`]): as
    /// [`host_ptr`](Self::host_ptr), and refused for a read-only tensor.
    pub fn host_mut_ptr(&mut self) -> Result<*mut c_void, DlpackError> {
        if self.read_only {
            return Err(DlpackError::ReadOnly);
        }
        self.on_host()?;
        Ok(self.in_place()?.cast())
    }

    /// This tensor as a plan input read in place, borrowed for as long as the input is used.
    /// Errors as for [`host_ptr`](Self::host_ptr).
    pub fn input(&self) -> Result<Input<'_>, DlpackError> {
        Ok(Input::Raw(self.host_ptr()?))
    }

    /// This tensor as a plan output written in place, borrowed mutably for as long as the
    /// output is used. Errors as for [`host_mut_ptr`](Self::host_mut_ptr).
    pub fn output(&mut self) -> Result<Output<'_>, DlpackError> {
        Ok(Output::Raw(self.host_mut_ptr()?))
    }

    /// The CUDA device pointer to the elements and the device's ordinal, for a run on the GPU
    /// that uses them in place. Errors: host memory, strides that are not contiguous
    /// row-major, a misaligned first element. The pointer is valid while `self` lives; the
    /// producer's stream must have finished writing it (DLPack's `stream` argument).
    pub fn cuda_ptr(&self) -> Result<(u64, i32), DlpackError> {
        match self.device {
            Device::Cuda { ordinal } => Ok((self.in_place()? as u64, ordinal)),
            got => Err(DlpackError::WrongDevice {
                got,
                wanted: "CUDA device",
                hint: "move it to the GPU first (e.g. `x.cuda()`), or run on the host",
            }),
        }
    }

    /// The device addresses of CUDA tensors used in place and their one device ordinal: the
    /// feeds or outputs of a run on a caller's stream (`LoadedProgram::run_on_stream`, with a
    /// [`StreamCall`](crate::cuda::stream::StreamCall) on that device). `None` for no tensors.
    /// Errors as [`cuda_ptr`](Self::cuda_ptr) for each, and tensors on two devices
    /// ([`DlpackError::MixedDevices`], naming both).
    pub fn cuda_pointers(
        tensors: &[&DlpackTensor],
    ) -> Result<(Vec<u64>, Option<i32>), DlpackError> {
        let mut ptrs = Vec::with_capacity(tensors.len());
        let mut device: Option<(usize, i32)> = None;
        for (index, t) in tensors.iter().enumerate() {
            let (ptr, ordinal) = t.cuda_ptr()?;
            match device {
                None => device = Some((index, ordinal)),
                Some((first, first_device)) if first_device != ordinal => {
                    return Err(DlpackError::MixedDevices {
                        first,
                        first_device,
                        index,
                        device: ordinal,
                    })
                }
                Some(_) => {}
            }
            ptrs.push(ptr);
        }
        Ok((ptrs, device.map(|(_, d)| d)))
    }

    /// A copy of the elements in a fresh row-major [`HostTensor`], whatever the strides
    /// (negative, zero, padded) or alignment: the explicit way to take a tensor that cannot be
    /// used in place. `bool` elements are read as bytes, any non-zero byte being `true`.
    /// Errors: device memory, a copy that cannot be allocated.
    pub fn to_host(&self) -> Result<HostTensor, DlpackError> {
        self.on_host()?;
        let mut out = HostTensor::try_zeros(self.dtype, &self.shape)?;
        if self.is_empty() {
            return Ok(out);
        }
        let size = self.dtype.size();
        let dst = out.data.as_mut_ptr();
        let bool_bytes = self.dtype == DType::Bool;
        let mut i = 0usize;
        let copy = |offset: isize| {
            // SAFETY: `offset` is the element offset of an element of the tensor (its strides
            // were checked to stay within the address space), which the producer holds at
            // `first + offset * size` (the constructor's contract); `dst` holds `len`
            // elements of `size` bytes, and `i` counts up to `len`.
            unsafe {
                let src = self.first.offset(offset * size as isize);
                if bool_bytes {
                    *dst.add(i) = u8::from(src.read() != 0);
                } else {
                    std::ptr::copy_nonoverlapping(src, dst.add(i * size), size);
                }
            }
            i += 1;
        };
        match &self.strides {
            Some(s) if !self.is_contiguous() => layout::for_each_offset(&self.shape, s, copy),
            _ if bool_bytes => (0..self.len() as isize).for_each(copy),
            // SAFETY: contiguous: the producer holds the `len` elements from `first` on, and
            // `dst` has room for as many; the two are distinct allocations.
            _ => unsafe { std::ptr::copy_nonoverlapping(self.first, dst, self.len() * size) },
        }
        Ok(out)
    }
}

//! The Python side of DLPack: taking a tensor from an object with `__dlpack__` (its capsule
//! consumed once, the managed tensor owned by an [`ovl_runtime::dlpack::DlpackTensor`]) and
//! handing a [`HostTensor`] out ([`DlpackExport`], an object with `__dlpack__` that
//! `numpy.from_dlpack` takes).

use ovl_core::HostTensor;
use ovl_runtime::dlpack::ffi::{DLManagedTensor, DLManagedTensorVersioned, K_DL_CPU};
use ovl_runtime::dlpack::{export_legacy, export_versioned, DlpackError, DlpackTensor};
use pyo3::exceptions::{PyBufferError, PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict};
use std::ffi::{c_void, CStr};
use std::sync::Mutex;

const VERSIONED: &CStr = c"dltensor_versioned";
const LEGACY: &CStr = c"dltensor";
const USED_VERSIONED: &CStr = c"used_dltensor_versioned";
const USED_LEGACY: &CStr = c"used_dltensor";

/// GPU memory: `kDLCUDA` (2), `kDLOpenCL` (4), `kDLVulkan` (7), `kDLMetal` (8), `kDLROCM`
/// (10), `kDLCUDAManaged` (13), `kDLOneAPI` (14), `kDLWebGPU` (15): refused before anything is
/// exported, saying GPU inputs are not supported yet. Other devices ovl does not read are
/// refused by the import (`UnsupportedDevice`).
const GPU_DEVICE_TYPES: [i64; 8] = [2, 4, 7, 8, 10, 13, 14, 15];

/// The message of a GPU input, `what` naming it.
pub fn gpu_input(what: &str) -> PyErr {
    PyValueError::new_err(format!(
        "{what} is on a GPU: a program called on GPU arrays takes them all from PyTorch \
         (`torch.Tensor` on CUDA) or all from JAX (`jax.Array` on a GPU), and runs on that \
         framework's stream; with other inputs (NumPy, CuPy, another framework) it runs on the \
         CPU: copy it to the host first (`x.cpu()`, `cupy.asnumpy(x)`, \
         `jax.device_put(x, jax.devices(\"cpu\")[0])`)"
    ))
}

/// Takes the tensor of `array` through the DLPack protocol: checks `__dlpack_device__` when
/// it has one (a GPU array is refused before anything is exported), calls
/// `__dlpack__(max_version=(1, 0))`, or `__dlpack__()` for a producer that does not take
/// `max_version`, and consumes the capsule (see [`take_capsule`]). A DLPack capsule itself
/// (what `tf.experimental.dlpack.to_dlpack` and other older exporters return) is consumed as
/// it is. `what` names the input in errors.
pub fn import(array: &Bound<'_, PyAny>, what: &str) -> PyResult<DlpackTensor> {
    let py = array.py();
    if array.is_instance_of::<PyCapsule>() {
        return take_capsule(array, what);
    }
    let Ok(dlpack) = array.getattr("__dlpack__") else {
        return Err(PyTypeError::new_err(format!(
            "{what} is a {}, not an array with `__dlpack__` (a NumPy array, or a PyTorch, JAX \
             or CuPy one on the host)",
            type_name(array)
        )));
    };
    if let Ok(device) = array.getattr("__dlpack_device__") {
        let (device_type, _id): (i64, i64) = device.call0()?.extract()?;
        if GPU_DEVICE_TYPES.contains(&device_type) {
            return Err(gpu_input(what));
        }
    }
    let kwargs = PyDict::new(py);
    kwargs.set_item("max_version", (1, 0))?;
    let capsule = match dlpack.call((), Some(&kwargs)) {
        // A producer from before DLPack 1.0 does not take `max_version`.
        Err(e) if e.is_instance_of::<PyTypeError>(py) => dlpack.call0(),
        done => done,
    }
    .map_err(|e| producer_error(py, e, what))?;
    take_capsule(&capsule, what)
}

/// The producer's own refusal (NumPy's `BufferError` for a read-only array asked for a legacy
/// capsule, ...), named after the input: the same type, the message prefixed, the original as
/// its cause. Types whose constructors take other arguments pass through unchanged.
fn producer_error(py: Python<'_>, e: PyErr, what: &str) -> PyErr {
    let ty = e.get_type(py);
    let known = [
        py.get_type::<PyBufferError>(),
        py.get_type::<PyTypeError>(),
        py.get_type::<PyValueError>(),
        py.get_type::<pyo3::exceptions::PyRuntimeError>(),
    ];
    if !known.iter().any(|k| ty.is(k)) {
        return e;
    }
    let named = PyErr::from_type(ty, format!("{what}: its `__dlpack__` failed: {e}"));
    named.set_cause(py, Some(e));
    named
}

fn type_name(x: &Bound<'_, PyAny>) -> String {
    x.get_type()
        .name()
        .map_or_else(|_| "?".into(), |n| n.to_string())
}

/// Consumes a DLPack capsule: takes its managed tensor, renames it `used_dltensor_versioned`
/// (or `used_dltensor`) so that neither its producer's destructor nor another consumer takes
/// it again, and owns the tensor (the producer's deleter runs when the result is dropped).
pub fn take_capsule(capsule: &Bound<'_, PyAny>, what: &str) -> PyResult<DlpackTensor> {
    let Ok(capsule) = capsule.cast::<PyCapsule>() else {
        return Err(PyTypeError::new_err(format!(
            "{what}: its `__dlpack__` returned a {}, not a DLPack capsule",
            type_name(capsule)
        )));
    };
    let p = capsule.as_ptr();
    // SAFETY: `p` is a live capsule (borrowed for the call); `PyCapsule_IsValid` checks its
    // name and never sets an exception.
    let is = |name: &CStr| unsafe { ffi::PyCapsule_IsValid(p, name.as_ptr()) } == 1;
    let (versioned, used) = if is(VERSIONED) {
        (true, USED_VERSIONED)
    } else if is(LEGACY) {
        (false, USED_LEGACY)
    } else if is(USED_VERSIONED) || is(USED_LEGACY) {
        return Err(PyValueError::new_err(format!(
            "{what}: its DLPack capsule was already consumed (it is named `used_dltensor...`): \
             a capsule is taken once; pass the array itself, whose `__dlpack__` makes a new one"
        )));
    } else {
        return Err(PyValueError::new_err(format!(
            "{what}: its `__dlpack__` returned a capsule that is not a DLPack tensor (named \
             neither `dltensor_versioned` nor `dltensor`)"
        )));
    };
    let name = if versioned { VERSIONED } else { LEGACY };
    // SAFETY: a valid capsule of that name (checked above), whose pointer is the producer's
    // managed tensor.
    let managed = unsafe { ffi::PyCapsule_GetPointer(p, name.as_ptr()) };
    if managed.is_null() {
        return Err(PyErr::fetch(capsule.py()));
    }
    // SAFETY: a valid capsule; the new name is a `'static` C string, as the capsule keeps the
    // pointer.
    if unsafe { ffi::PyCapsule_SetName(p, used.as_ptr()) } != 0 {
        return Err(PyErr::fetch(capsule.py()));
    }
    // From here the managed tensor is this consumer's: the capsule's new name tells its
    // destructor not to delete it.
    let taken = if versioned {
        // SAFETY: the producer's DLPack 1.x managed tensor, just taken from its capsule (the
        // only consumer: the capsule is renamed); DLPack's contract on producers covers the
        // rest (valid shape, strides and data until the deleter is called).
        unsafe { DlpackTensor::from_versioned(managed.cast::<DLManagedTensorVersioned>()) }
    } else {
        // SAFETY: as above, for a legacy managed tensor.
        unsafe { DlpackTensor::from_legacy(managed.cast::<DLManagedTensor>()) }
    };
    taken.map_err(|e| dlpack_error(e, what))
}

/// A refused DLPack tensor as a Python exception: a dtype ovl has no kernels for is a
/// `TypeError`, a GPU array the "not supported yet" `ValueError`, anything else a
/// `ValueError`.
pub fn dlpack_error(e: DlpackError, what: &str) -> PyErr {
    match e {
        DlpackError::UnsupportedDtype { .. } => PyTypeError::new_err(format!("{what}: {e}")),
        DlpackError::WrongDevice { .. } => gpu_input(what),
        DlpackError::Alloc(_) => pyo3::exceptions::PyMemoryError::new_err(format!("{what}: {e}")),
        e => PyValueError::new_err(format!("{what}: {e}")),
    }
}

/// An output of a run, handed to a DLPack consumer (`numpy.from_dlpack(x)`) once.
#[pyclass(frozen, module = "ovl._native", name = "DlpackExport")]
pub struct DlpackExport {
    tensor: Mutex<Option<HostTensor>>,
}

impl DlpackExport {
    /// Wraps a tensor for export.
    pub fn new(tensor: HostTensor) -> DlpackExport {
        DlpackExport {
            tensor: Mutex::new(Some(tensor)),
        }
    }
}

/// Frees the tensor of an unconsumed `dltensor_versioned` capsule.
unsafe extern "C" fn destroy_versioned(capsule: *mut ffi::PyObject) {
    // SAFETY: called by Python with the capsule being destroyed; a capsule still named
    // `dltensor_versioned` holds the managed tensor of `export_versioned`, which no consumer
    // took, so its deleter is called here, once.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, VERSIONED.as_ptr()) == 1 {
            let p = ffi::PyCapsule_GetPointer(capsule, VERSIONED.as_ptr());
            DLManagedTensorVersioned::delete(p.cast());
        }
    }
}

/// Frees the tensor of an unconsumed `dltensor` capsule.
unsafe extern "C" fn destroy_legacy(capsule: *mut ffi::PyObject) {
    // SAFETY: as in `destroy_versioned`, for the legacy name and struct.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, LEGACY.as_ptr()) == 1 {
            let p = ffi::PyCapsule_GetPointer(capsule, LEGACY.as_ptr());
            DLManagedTensor::delete(p.cast());
        }
    }
}

#[pymethods]
impl DlpackExport {
    /// The DLPack protocol: a `dltensor_versioned` capsule when the consumer asks for
    /// `max_version` 1 or later, else a legacy `dltensor` one. Host memory only; the tensor
    /// is handed out once (a second call is a `BufferError`).
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<Bound<'py, PyAny>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _ = (stream, copy);
        if let Some(device) = dl_device {
            if device.0 != K_DL_CPU {
                return Err(PyBufferError::new_err(format!(
                    "an ovl output is in host memory (kDLCPU), not on device {device:?}"
                )));
            }
        }
        let tensor = self
            .tensor
            .lock()
            .map_err(|_| PyBufferError::new_err("an ovl output's lock was poisoned"))?
            .take()
            .ok_or_else(|| {
                PyBufferError::new_err("this ovl output was already exported through DLPack")
            })?;
        let (pointer, name, destructor): (*mut c_void, &CStr, ffi::PyCapsule_Destructor) =
            if max_version.is_some_and(|(major, _)| major >= 1) {
                (
                    export_versioned(tensor, 0).cast(),
                    VERSIONED,
                    destroy_versioned,
                )
            } else {
                (export_legacy(tensor).cast(), LEGACY, destroy_legacy)
            };
        // SAFETY: `pointer` is a fresh managed tensor, owned by the capsule from here (its
        // destructor frees it unless a consumer renames the capsule and takes it); `name` is
        // `'static`.
        let capsule = unsafe { ffi::PyCapsule_New(pointer, name.as_ptr(), Some(destructor)) };
        if capsule.is_null() {
            // Not owned by a capsule: free it here.
            // SAFETY: the export just made, not handed to anyone.
            unsafe {
                if name == VERSIONED {
                    DLManagedTensorVersioned::delete(pointer.cast());
                } else {
                    DLManagedTensor::delete(pointer.cast());
                }
            }
            return Err(PyErr::fetch(py));
        }
        // SAFETY: a new reference returned by `PyCapsule_New`.
        Ok(unsafe { Bound::from_owned_ptr(py, capsule) })
    }

    /// `(kDLCPU, 0)`: outputs are in host memory.
    fn __dlpack_device__(&self) -> (i32, i32) {
        (K_DL_CPU, 0)
    }

    /// `DlpackExport(float32[4, 5])`, or `DlpackExport(exported)`.
    fn __repr__(&self) -> String {
        match self.tensor.lock().ok().as_deref() {
            Some(Some(t)) => format!(
                "DlpackExport({}{:?})",
                ovl::program::tensorflow_dtype_name(t.dtype()),
                t.shape
            ),
            _ => "DlpackExport(exported)".into(),
        }
    }
}

/// Calls the deleter of a managed tensor (DLPack 1.x or legacy).
trait Deleted {
    /// # Safety
    /// `p` is a live managed tensor of this type, its deleter not called yet.
    unsafe fn delete(p: *mut Self);
}

impl Deleted for DLManagedTensorVersioned {
    unsafe fn delete(p: *mut Self) {
        // SAFETY: the caller's contract.
        unsafe {
            if let Some(deleter) = (*p).deleter {
                deleter(p);
            }
        }
    }
}

impl Deleted for DLManagedTensor {
    unsafe fn delete(p: *mut Self) {
        // SAFETY: the caller's contract.
        unsafe {
            if let Some(deleter) = (*p).deleter {
                deleter(p);
            }
        }
    }
}

//! Where a CUDA call of a torch kernel takes its outputs and scratch: torch's caching allocator
//! on the current stream of the inputs' device, through the C++ kernel's allocator
//! ([`CppMemory`]) or `torch.empty` ([`PyMemory`], the Python kernel's).

use crate::cuda::CallerMemory;
use crate::failure::Failure;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use std::ffi::c_void;

/// The C++ kernel's allocator: a new tensor on the inputs' device of output `k`'s dtype and
/// `shape` (`rank` sizes), or for `k == usize::MAX` a byte tensor of `shape[0]` bytes (a CUDA
/// call's scratch), its first element returned (null when it could not allocate). On CUDA
/// the memory comes from torch's caching allocator on the current stream.
pub type AllocFn =
    unsafe extern "C" fn(ctx: *mut c_void, k: usize, shape: *const i64, rank: usize) -> *mut c_void;

/// A CUDA call's outputs and scratch from the C++ kernel's allocator (torch's caching
/// allocator on the current stream of the inputs' device).
pub struct CppMemory<'a> {
    /// The program's name, for messages.
    pub name: &'a str,
    pub ctx: *mut c_void,
    pub alloc: AllocFn,
}

impl CppMemory<'_> {
    fn take(
        &mut self,
        k: usize,
        dims: &[i64],
        what: impl FnOnce() -> String,
    ) -> Result<u64, Failure> {
        // SAFETY: `alloc` and `ctx` are the C++ kernel's; it catches its exceptions.
        let ptr = unsafe { (self.alloc)(self.ctx, k, dims.as_ptr(), dims.len()) };
        if ptr.is_null() {
            return Err(Failure::Memory(format!(
                "ovl program `{}`: torch could not allocate {} on the GPU",
                self.name,
                what()
            )));
        }
        Ok(ptr as u64)
    }
}

impl CallerMemory for CppMemory<'_> {
    fn output(&mut self, k: usize, shape: &[usize]) -> Result<u64, Failure> {
        let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
        self.take(k, &dims, || format!("output {k} ({shape:?})"))
    }

    fn scratch(&mut self, bytes: usize) -> Result<u64, Failure> {
        self.take(usize::MAX, &[bytes as i64], || {
            format!("{bytes} bytes of scratch")
        })
    }
}

/// A CUDA call's outputs and scratch from `torch.empty` on the inputs' device (the Python
/// kernel's), the tensors kept in `held` (outputs first, in order) until the run is queued.
pub struct PyMemory<'py> {
    /// `torch.empty`.
    pub empty: Bound<'py, PyAny>,
    /// The torch dtype of each output.
    pub dtypes: Vec<Bound<'py, PyAny>>,
    /// The `torch.device` of the inputs.
    pub device: Bound<'py, PyAny>,
    pub held: Vec<Bound<'py, PyAny>>,
}

impl<'py> PyMemory<'py> {
    fn empty(&mut self, shape: &[usize], dtype: Bound<'py, PyAny>) -> PyResult<u64> {
        let py = self.device.py();
        let kwargs = PyDict::new(py);
        kwargs.set_item("dtype", dtype)?;
        kwargs.set_item("device", &self.device)?;
        let t = self
            .empty
            .call((PyTuple::new(py, shape)?,), Some(&kwargs))?;
        let ptr: u64 = t.call_method0(intern!(py, "data_ptr"))?.extract()?;
        self.held.push(t);
        Ok(ptr)
    }

    fn failure(e: PyErr) -> Failure {
        Failure::Memory(format!("ovl: torch.empty on the GPU failed: {e}"))
    }
}

impl CallerMemory for PyMemory<'_> {
    fn output(&mut self, k: usize, shape: &[usize]) -> Result<u64, Failure> {
        let dtype = self.dtypes[k].clone();
        self.empty(shape, dtype).map_err(Self::failure)
    }

    fn scratch(&mut self, bytes: usize) -> Result<u64, Failure> {
        let uint8 = self
            .device
            .py()
            .import("torch")
            .and_then(|t| t.getattr("uint8"))
            .map_err(Self::failure)?;
        self.empty(&[bytes], uint8).map_err(Self::failure)
    }
}

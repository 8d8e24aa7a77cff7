//! `ovl._native.TorchKernel`: the CPU kernel of a program's PyTorch custom op (`ovl.torch.op`),
//! called by PyTorch's dispatcher with the op's tensors.
//!
//! The lean path of a call: each input's `dtype` compared by identity with the torch dtype the
//! program takes, its shape checked, its memory read in place through `data_ptr()` (a
//! non-contiguous or misaligned tensor is copied by torch first), the outputs allocated by
//! `torch.empty` and written in place; no DLPack capsule either way. A run whose largest kernel
//! has little work stays on the calling thread, the GIL held (releasing it costs more than the
//! run); larger ones release the GIL and use ovl's thread pool.

use crate::bundle::Dim;
use crate::program::{program_error, Program};
use ovl::program::Binding;
use ovl_core::DType;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use pyo3::{intern, IntoPyObjectExt};
use std::ffi::c_void;
use std::sync::OnceLock;

/// The default of [`parallel_min_work`], the TensorFlow bridge's.
const PARALLEL_MIN_WORK: u64 = 1 << 22;

/// Below this estimated work a run keeps the GIL (it takes less time than handing it over).
const KEEP_GIL_MAX_WORK: u64 = 1 << 16;

/// The estimated work of a kernel (see `LoadedProgram::largest_work`) from which a run uses
/// ovl's thread pool: `$OVL_TORCH_PARALLEL_MIN_WORK` when set to a number (read once per
/// process; 0: always), else 2^22.
fn parallel_min_work() -> u64 {
    static WORK: OnceLock<u64> = OnceLock::new();
    *WORK.get_or_init(|| {
        std::env::var("OVL_TORCH_PARALLEL_MIN_WORK")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(PARALLEL_MIN_WORK)
    })
}

/// A binding and how to run it.
struct Plan {
    binding: Binding,
    /// 1: on the calling thread; 0: ovl's pool.
    threads: usize,
    keep_gil: bool,
}

impl Plan {
    fn new(program: &Program, binding: Binding) -> Plan {
        let work = program.loaded.largest_work(&binding);
        Plan {
            threads: if work < parallel_min_work() { 1 } else { 0 },
            keep_gil: work < KEEP_GIL_MAX_WORK,
            binding,
        }
    }
}

/// The feed and output pointers of a run handed to another thread (the GIL released).
struct Pointers(Vec<*const c_void>, Vec<*mut c_void>);

// SAFETY: the pointers are read through by the run only, while the caller holds the tensors
// they point into.
unsafe impl Send for Pointers {}

/// A program's CPU kernel for PyTorch: called with one `torch.Tensor` per input, returns a
/// tensor, or a tuple of them for several outputs.
#[pyclass(frozen, module = "ovl._native", name = "TorchKernel")]
pub struct TorchKernel {
    program: Py<Program>,
    /// The torch dtype each input must have (compared by identity).
    in_dtypes: Vec<Py<PyAny>>,
    /// `{"dtype": <torch dtype>}` per output: `torch.empty`'s keyword arguments.
    out_kwargs: Vec<Py<PyDict>>,
    /// `torch.empty`.
    empty: Py<PyAny>,
    /// The binding of a program with fixed shapes, made once.
    fixed: Option<Plan>,
}

/// A dtype's element size, for the alignment check.
fn elem_size(dtype: DType) -> usize {
    dtype.size().max(1)
}

impl TorchKernel {
    fn program(&self) -> &Program {
        self.program.get()
    }

    /// Checks input `k`'s dtype, device and shape, and returns it usable in place (contiguous,
    /// aligned: `t` itself, or a copy made by torch) with its shape and first element.
    fn take<'py>(
        &self,
        k: usize,
        t: Bound<'py, PyAny>,
    ) -> PyResult<(Bound<'py, PyAny>, Vec<usize>, *const c_void)> {
        let py = t.py();
        let p = self.program();
        let info = &p.inputs[k];
        let Ok(dtype) = t.getattr(intern!(py, "dtype")) else {
            return Err(PyTypeError::new_err(format!(
                "{} is a {}, not a torch.Tensor",
                p.what(k),
                t.get_type().name().map_or("?".into(), |n| n.to_string())
            )));
        };
        let shape: Vec<usize> = t.getattr(intern!(py, "shape"))?.extract()?;
        if !dtype.is(self.in_dtypes[k].bind(py)) {
            return Err(PyTypeError::new_err(format!(
                "{} is {dtype}{shape:?}, the program takes {}: convert it first \
                 (`.to(torch.{})`)",
                p.what(k),
                info.type_text(),
                info.dtype
            )));
        }
        if !t.getattr(intern!(py, "is_cpu"))?.is_truthy()? {
            let device = t.getattr(intern!(py, "device"))?;
            return Err(PyValueError::new_err(format!(
                "{} is on device `{device}`: ovl's PyTorch op runs on the CPU only for now \
                 (CUDA tensors are not supported yet); move it with `.cpu()`",
                p.what(k)
            )));
        }
        let fits = shape.len() == info.dims.len()
            && info.dims.iter().zip(&shape).all(|(d, &n)| match d {
                Dim::Fixed(m) => *m == n,
                Dim::Symbolic { .. } => true,
            });
        if !fits {
            return Err(PyValueError::new_err(format!(
                "{} has shape {shape:?}, the program takes {}",
                p.what(k),
                info.type_text()
            )));
        }
        let mut t = t;
        if !t.call_method0(intern!(py, "is_contiguous"))?.is_truthy()? {
            t = t.call_method0(intern!(py, "contiguous"))?;
        }
        let dt = p.loaded.feeds[k].1.dtype;
        let mut ptr: usize = t.call_method0(intern!(py, "data_ptr"))?.extract()?;
        if !ptr.is_multiple_of(elem_size(dt)) {
            // A view at an odd offset: a fresh (aligned) contiguous copy.
            t = t.call_method0(intern!(py, "clone"))?;
            ptr = t.call_method0(intern!(py, "data_ptr"))?.extract()?;
        }
        let len: usize = shape.iter().product();
        if len == 0 || ptr == 0 {
            // No elements: a dangling, aligned pointer (nothing is read).
            ptr = std::ptr::NonNull::<u64>::dangling().as_ptr() as usize;
        }
        Ok((t, shape, ptr as *const c_void))
    }
}

#[pymethods]
impl TorchKernel {
    /// `TorchKernel(program, input_dtypes, output_dtypes, torch.empty)`: the torch dtypes
    /// (objects) of the program's inputs and outputs, in order.
    #[new]
    fn new(
        py: Python<'_>,
        program: Py<Program>,
        input_dtypes: Vec<Py<PyAny>>,
        output_dtypes: Vec<Py<PyAny>>,
        empty: Py<PyAny>,
    ) -> PyResult<TorchKernel> {
        let p = program.get();
        if input_dtypes.len() != p.inputs.len() || output_dtypes.len() != p.outputs.len() {
            return Err(PyValueError::new_err(format!(
                "TorchKernel: {} input and {} output dtypes given, the program has {} and {}",
                input_dtypes.len(),
                output_dtypes.len(),
                p.inputs.len(),
                p.outputs.len()
            )));
        }
        let out_kwargs = output_dtypes
            .iter()
            .map(|d| {
                let kw = PyDict::new(py);
                kw.set_item("dtype", d)?;
                Ok(kw.unbind())
            })
            .collect::<PyResult<Vec<_>>>()?;
        let fixed = if p.loaded.symbols().is_empty() {
            let shapes: Vec<&[usize]> = p
                .loaded
                .feeds
                .iter()
                .map(|(_, s)| s.shape.as_slice())
                .collect();
            let binding = p
                .loaded
                .bind(&shapes)
                .map_err(|e| program_error(e, &p.loaded.name))?;
            Some(Plan::new(p, binding))
        } else {
            None
        };
        Ok(TorchKernel {
            program,
            in_dtypes: input_dtypes,
            out_kwargs,
            empty,
            fixed,
        })
    }

    /// Runs the program on one CPU tensor per input: a new tensor per output (one, or a tuple).
    /// A wrong count, a non-tensor or a wrong dtype is a `TypeError`; a wrong shape, inputs
    /// that disagree on the batch, or a tensor not on the CPU a `ValueError`, each naming the
    /// input.
    #[pyo3(signature = (*tensors))]
    fn __call__<'py>(
        &self,
        py: Python<'py>,
        tensors: &Bound<'py, PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let p = self.program();
        let n = p.inputs.len();
        if tensors.len() != n {
            return Err(PyTypeError::new_err(format!(
                "ovl program `{}` takes {n} input{} ({}), {} given",
                p.loaded.name,
                if n == 1 { "" } else { "s" },
                p.signature(),
                tensors.len()
            )));
        }
        let mut held = Vec::with_capacity(n);
        let mut shapes = Vec::with_capacity(n);
        let mut feeds = Vec::with_capacity(n);
        // Bool tensors with bytes other than 0 and 1 are read from a normalized copy.
        let mut bools: Vec<Vec<u8>> = Vec::new();
        for (k, t) in tensors.iter().enumerate() {
            let (t, shape, mut ptr) = self.take(k, t)?;
            let len: usize = shape.iter().product();
            if p.loaded.feeds[k].1.dtype == DType::Bool && len > 0 {
                // SAFETY: `ptr` is the first of `len` contiguous bytes of a CPU tensor held
                // in `held` for the call.
                let bytes = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) };
                if bytes.iter().any(|&b| b > 1) {
                    bools.push(bytes.iter().map(|&b| u8::from(b != 0)).collect());
                    ptr = bools[bools.len() - 1].as_ptr().cast();
                }
            }
            held.push(t);
            shapes.push(shape);
            feeds.push(ptr);
        }
        let made;
        let bound = match &self.fixed {
            Some(b) => b,
            None => {
                let slices: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
                let binding = p
                    .loaded
                    .bind(&slices)
                    .map_err(|e| program_error(e, &p.loaded.name))?;
                made = Plan::new(p, binding);
                &made
            }
        };
        let empty = self.empty.bind(py);
        let mut outputs = Vec::with_capacity(bound.binding.outputs.len());
        let mut out_ptrs = Vec::with_capacity(bound.binding.outputs.len());
        for (sig, kwargs) in bound.binding.outputs.iter().zip(&self.out_kwargs) {
            let shape = PyTuple::new(py, &sig.shape)?;
            let out = empty.call((shape,), Some(kwargs.bind(py)))?;
            let mut ptr: usize = out.call_method0(intern!(py, "data_ptr"))?.extract()?;
            if ptr == 0 || sig.shape.contains(&0) {
                ptr = std::ptr::NonNull::<u64>::dangling().as_ptr() as usize;
            }
            out_ptrs.push(ptr as *mut c_void);
            outputs.push(out);
        }
        let loaded = &p.loaded;
        let binding = &bound.binding;
        let threads = bound.threads;
        let result = if bound.keep_gil {
            // SAFETY: feed `k` points to the contiguous, aligned elements of input `k` (held
            // in `held`, or its normalized copy in `bools`), of the dtype checked and the
            // shape bound; output `k` to a fresh torch tensor of `binding.outputs[k]`'s dtype
            // and shape (held in `outputs`), overlapping nothing.
            unsafe { loaded.run_bound(binding, &feeds, &out_ptrs, threads) }
        } else {
            let pointers = Pointers(feeds, out_ptrs);
            py.detach(move || {
                let b = pointers;
                // SAFETY: as above; the tensors stay held while this thread waits.
                unsafe { loaded.run_bound(binding, &b.0, &b.1, threads) }
            })
        };
        drop(held);
        drop(bools);
        result.map_err(|e| program_error(e, &p.loaded.name))?;
        if outputs.len() == 1 {
            Ok(outputs.remove(0))
        } else {
            PyTuple::new(py, outputs)?.into_bound_py_any(py)
        }
    }
}

/// One dimension for Python: an `int`, or `(symbol, scale, offset)` for
/// `scale * symbol + offset`, a size known only at run time.
fn dim_object(py: Python<'_>, d: &Dim) -> PyResult<Py<PyAny>> {
    match d {
        Dim::Fixed(n) => n.into_py_any(py),
        Dim::Symbolic {
            symbol,
            scale,
            offset,
        } => (symbol.as_str(), *scale, *offset).into_py_any(py),
    }
}

/// Each tensor's dimensions (see [`dim_object`]).
type DimLists = Vec<Vec<Py<PyAny>>>;

/// `(inputs, outputs)`: each a list of dimension lists, a dimension an `int` or
/// `(symbol, scale, offset)`. What the op's fake (meta) implementation computes shapes from.
#[pyfunction]
pub fn symbolic_dims(py: Python<'_>, program: Py<Program>) -> PyResult<(DimLists, DimLists)> {
    let p = program.get();
    let list = |ts: &[crate::bundle::TensorInfo]| -> PyResult<DimLists> {
        ts.iter()
            .map(|t| t.dims.iter().map(|d| dim_object(py, d)).collect())
            .collect()
    };
    Ok((list(&p.inputs)?, list(&p.outputs)?))
}

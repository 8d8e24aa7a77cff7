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
use crate::failure::Failure;
use crate::program::{program_error, Program};
use crate::torch_memory::{CppMemory, PyMemory};
use ovl::program::Binding;
use ovl_core::DType;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use pyo3::{intern, IntoPyObjectExt};
use std::ffi::{c_char, c_void, CStr};
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
#[derive(Clone)]
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

/// `Given::place` (and [`TorchInput::place`]) of a tensor in host memory.
pub const ON_CPU: i32 = -1;
/// `Given::place` (and [`TorchInput::place`]) of a tensor on a device that is neither the CPU
/// nor a CUDA GPU.
pub const ON_OTHER: i32 = -2;

/// What a call knows of input `k` before its memory is used.
pub(crate) struct Given<'a> {
    /// Whether its dtype is the one the program takes.
    pub dtype_ok: bool,
    /// Its dtype as torch prints it (`torch.float64`), for messages.
    pub dtype: &'a dyn std::fmt::Display,
    /// Where it is: [`ON_CPU`], a CUDA device ordinal, or [`ON_OTHER`].
    pub place: i32,
    /// Its device as torch prints it (`cuda:0`), for messages.
    pub device: &'a dyn std::fmt::Display,
    /// Its shape.
    pub shape: &'a [usize],
}

/// Where a call runs: the place ([`Given::place`]) and device text of its first input.
pub(crate) struct Place<'a> {
    pub place: i32,
    pub device: &'a dyn std::fmt::Display,
}

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

/// A dangling, aligned pointer for a tensor without elements (nothing is read or written).
fn dangling() -> usize {
    std::ptr::NonNull::<u64>::dangling().as_ptr() as usize
}

impl TorchKernel {
    pub(crate) fn program(&self) -> &Program {
        self.program.get()
    }

    /// Checks input `k`: dtype (a `TypeError`), device (the first input's, `at`) and the sizes
    /// known at export (a `ValueError`); sizes known only at run time are checked by
    /// [`plan`](Self::plan).
    pub(crate) fn check(&self, k: usize, given: &Given<'_>, at: &Place<'_>) -> Result<(), Failure> {
        let p = self.program();
        let info = &p.inputs[k];
        if !given.dtype_ok {
            return Err(Failure::Type(format!(
                "{} is {}{:?}, the program takes {}: convert it first (`.to(torch.{})`)",
                p.what(k),
                given.dtype,
                given.shape,
                info.type_text(),
                info.dtype
            )));
        }
        if given.place == ON_OTHER {
            return Err(Failure::Value(format!(
                "{} is on device `{}`: ovl's PyTorch op runs on the CPU and on CUDA GPUs; move \
                 it with `.cpu()` or `.cuda()`",
                p.what(k),
                given.device
            )));
        }
        if given.place != at.place {
            return Err(Failure::Value(format!(
                "{} is on device `{}`, input 0 on `{}`: all inputs must be on one device \
                 (move it with `.to(device)`)",
                p.what(k),
                given.device,
                at.device
            )));
        }
        let fits = given.shape.len() == info.dims.len()
            && info.dims.iter().zip(given.shape).all(|(d, &n)| match d {
                Dim::Fixed(m) => *m == n,
                Dim::Symbolic { .. } => true,
            });
        if !fits {
            return Err(Failure::Value(format!(
                "{} has shape {:?}, the program takes {}",
                p.what(k),
                given.shape,
                info.type_text()
            )));
        }
        Ok(())
    }

    /// The plan of a call on inputs of these shapes (checked by [`check`](Self::check)).
    fn plan(&self, shapes: &[&[usize]]) -> Result<std::borrow::Cow<'_, Plan>, Failure> {
        if let Some(plan) = &self.fixed {
            return Ok(std::borrow::Cow::Borrowed(plan));
        }
        let p = self.program();
        let binding = p.loaded.bind(shapes).map_err(Failure::from_program)?;
        Ok(std::borrow::Cow::Owned(Plan::new(p, binding)))
    }

    /// Bool inputs whose bytes are not all 0 and 1: their feeds pointed to normalized copies
    /// (kept in the result while the run reads them).
    ///
    /// # Safety
    /// Feed `k` points to the contiguous elements of input `k`, of `shapes[k]`.
    unsafe fn normalize_bools(
        &self,
        shapes: &[&[usize]],
        feeds: &mut [*const c_void],
    ) -> Vec<Vec<u8>> {
        let p = self.program();
        let mut copies = Vec::new();
        for (k, (shape, feed)) in shapes.iter().zip(feeds.iter_mut()).enumerate() {
            let len: usize = shape.iter().product();
            if p.loaded.feeds[k].1.dtype != DType::Bool || len == 0 {
                continue;
            }
            // SAFETY: the caller's contract: `len` contiguous bytes.
            let bytes = unsafe { std::slice::from_raw_parts(feed.cast::<u8>(), len) };
            if bytes.iter().any(|&b| b > 1) {
                let copy: Vec<u8> = bytes.iter().map(|&b| u8::from(b != 0)).collect();
                *feed = copy.as_ptr().cast();
                copies.push(copy);
            }
        }
        copies
    }

    /// Runs the C++ kernel's call (see [`ovl_torch_run`]).
    ///
    /// # Safety
    /// As for [`ovl_torch_run`].
    unsafe fn run_c(
        &self,
        inputs: &[TorchInput],
        stream: &TorchStream,
        ctx: *mut c_void,
        alloc: AllocFn,
    ) -> Result<(), Failure> {
        let p = self.program();
        let n = p.inputs.len();
        if let Some(message) = p.count_error(inputs.len()) {
            return Err(Failure::Type(message));
        }
        let mut shapes: Vec<Vec<usize>> = Vec::with_capacity(n);
        let mut feeds: Vec<*const c_void> = Vec::with_capacity(n);
        // SAFETY: a call-long C string from the C++ kernel.
        let first = inputs
            .first()
            .map(|t| (t.place, unsafe { c_text(t.device) }));
        let at = Place {
            place: first.as_ref().map_or(ON_CPU, |f| f.0),
            device: first
                .as_ref()
                .map_or(&"cpu" as &dyn std::fmt::Display, |f| &f.1),
        };
        for (k, t) in inputs.iter().enumerate() {
            // SAFETY: the C++ kernel's `sizes().data()`, `rank` long, alive for the call.
            let shape: Vec<usize> = unsafe { slice_or_empty(t.shape, t.rank) }
                .iter()
                .map(|&d| d as usize)
                .collect();
            // SAFETY: static or call-long C strings from the C++ kernel.
            let (dtype, device) = unsafe { (c_text(t.dtype_name), c_text(t.device)) };
            self.check(
                k,
                &Given {
                    dtype_ok: t.dtype_ok != 0,
                    dtype: &dtype,
                    place: t.place,
                    device: &device,
                    shape: &shape,
                },
                &at,
            )?;
            let len: usize = shape.iter().product();
            feeds.push(if len == 0 || t.data.is_null() {
                dangling() as *const c_void
            } else {
                t.data
            });
            shapes.push(shape);
        }
        let slices: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
        if at.place >= 0 {
            let feeds: Vec<u64> = feeds.iter().map(|&f| f as u64).collect();
            // SAFETY: the C++ kernel's contract: the inputs' device memory, held for the call
            // (and by torch's allocator in stream order after it); `alloc` gives torch tensors
            // on that device.
            return unsafe { self.run_c_cuda(at.place, &slices, &feeds, stream, ctx, alloc) };
        }
        let plan = self.plan(&slices)?;
        // SAFETY: feed `k` points to input `k`'s contiguous elements (the C++ kernel's
        // contract).
        let bools = unsafe { self.normalize_bools(&slices, &mut feeds) };
        let mut outs = Vec::with_capacity(plan.binding.outputs.len());
        for (k, sig) in plan.binding.outputs.iter().enumerate() {
            let dims: Vec<i64> = sig.shape.iter().map(|&d| d as i64).collect();
            // SAFETY: `alloc` and `ctx` are the C++ kernel's; it catches its exceptions.
            let ptr = unsafe { alloc(ctx, k, dims.as_ptr(), dims.len()) };
            if ptr.is_null() {
                return Err(Failure::Memory(format!(
                    "ovl program `{}`: torch could not allocate output {k} ({})",
                    p.loaded.name,
                    ovl::program::tensorflow_type_name(sig)
                )));
            }
            outs.push(if sig.shape.contains(&0) {
                dangling() as *mut c_void
            } else {
                ptr
            });
        }
        // SAFETY: feed `k` points to the contiguous, aligned elements of input `k` (checked
        // dtype, bound shape), held by the C++ kernel for the call, or to its copy in
        // `bools`; output `k` to a fresh tensor of its dtype and shape. No Python is involved.
        let result = unsafe {
            p.loaded
                .run_bound(&plan.binding, &feeds, &outs, plan.threads)
        };
        drop(bools);
        result.map_err(Failure::from_program)
    }

    /// The C++ kernel's call on CUDA tensors of device `device` (see [`ovl_torch_run`]).
    ///
    /// # Safety
    /// As for [`ovl_torch_run`]; `feeds` are the inputs' device addresses.
    unsafe fn run_c_cuda(
        &self,
        device: i32,
        shapes: &[&[usize]],
        feeds: &[u64],
        stream: &TorchStream,
        ctx: *mut c_void,
        alloc: AllocFn,
    ) -> Result<(), Failure> {
        if stream.known == 0 {
            return Err(Failure::Runtime(format!(
                "ovl program `{}`: ovl's C++ kernel for PyTorch was compiled without CUDA \
                 support (no CUDA runtime headers were found for the installed torch, or torch \
                 has no CUDA): set OVL_TORCH_KERNEL=python to run CUDA tensors through the \
                 Python kernel",
                self.program().loaded.name
            )));
        }
        let mut memory = CppMemory {
            name: &self.program().loaded.name,
            ctx,
            alloc,
        };
        let call = crate::cuda::CudaCall {
            feeds,
            shapes,
            device,
            stream: stream.stream,
        };
        // SAFETY: forwarded.
        unsafe { crate::cuda::run(&self.program().gpu, &call, &mut memory) }
    }

    /// Checks input `k` (a Python object; `first`: input 0's place and device, `None` for
    /// input 0 itself) and returns it usable in place (contiguous, aligned: `t` itself, or a
    /// copy made by torch) with its shape, first element, place and device.
    #[allow(clippy::type_complexity)]
    fn take<'py>(
        &self,
        k: usize,
        t: Bound<'py, PyAny>,
        first: Option<&(i32, String)>,
    ) -> PyResult<(Bound<'py, PyAny>, Vec<usize>, *const c_void, (i32, String))> {
        let py = t.py();
        let p = self.program();
        let Ok(dtype) = t.getattr(intern!(py, "dtype")) else {
            return Err(PyTypeError::new_err(format!(
                "{} is a {}, not a torch.Tensor",
                p.what(k),
                t.get_type().name().map_or("?".into(), |n| n.to_string())
            )));
        };
        let shape: Vec<usize> = t.getattr(intern!(py, "shape"))?.extract()?;
        let dtype_ok = dtype.is(self.in_dtypes[k].bind(py));
        let here = if t.getattr(intern!(py, "is_cpu"))?.is_truthy()? {
            (ON_CPU, "cpu".to_string())
        } else {
            let device = t.getattr(intern!(py, "device"))?;
            let place = if t.getattr(intern!(py, "is_cuda"))?.is_truthy()? {
                device.getattr(intern!(py, "index"))?.extract::<i32>()?
            } else {
                ON_OTHER
            };
            (place, device.to_string())
        };
        let at = first.unwrap_or(&here);
        self.check(
            k,
            &Given {
                dtype_ok,
                dtype: &dtype,
                place: here.0,
                device: &here.1,
                shape: &shape,
            },
            &Place {
                place: at.0,
                device: &at.1,
            },
        )?;
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
        if shape.contains(&0) || ptr == 0 {
            ptr = dangling();
        }
        Ok((t, shape, ptr as *const c_void, here))
    }
}

/// The slice of `len` elements at `p`, empty when `p` is null.
///
/// # Safety
/// A non-null `p` points to `len` readable elements, alive for `'a`.
unsafe fn slice_or_empty<'a, T>(p: *const T, len: usize) -> &'a [T] {
    if p.is_null() || len == 0 {
        &[]
    } else {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts(p, len) }
    }
}

/// A C string as text (`?` when null).
///
/// # Safety
/// A non-null `p` is a NUL-terminated string alive while the result is used.
unsafe fn c_text<'a>(p: *const c_char) -> std::borrow::Cow<'a, str> {
    if p.is_null() {
        "?".into()
    } else {
        // SAFETY: the caller's contract.
        unsafe { CStr::from_ptr(p) }.to_string_lossy()
    }
}

/// One input of a call from the C++ kernel (`ovl/_torch_kernel.cc` mirrors it).
#[repr(C)]
pub struct TorchInput {
    /// The first element (contiguous, aligned; host or device memory), or null when the
    /// dtype is wrong or the device neither the CPU nor CUDA.
    pub data: *const c_void,
    /// `rank` sizes.
    pub shape: *const i64,
    /// The number of dimensions.
    pub rank: usize,
    /// Nonzero when the dtype is the program's.
    pub dtype_ok: i32,
    /// Where it is: [`ON_CPU`], a CUDA device ordinal, or [`ON_OTHER`].
    pub place: i32,
    /// torch's name of its dtype (`torch.float64`).
    pub dtype_name: *const c_char,
    /// Its device (`cuda:0`).
    pub device: *const c_char,
}

/// The stream of a CUDA call from the C++ kernel: the current stream of the first input's device.
#[repr(C)]
pub struct TorchStream {
    /// The raw `cudaStream_t` (`c10::cuda::getCurrentCUDAStream(device).stream()`).
    pub stream: usize,
    /// Nonzero when the C++ kernel was built with CUDA support and `stream` was read.
    pub known: i32,
}

pub use crate::torch_memory::AllocFn;

/// A call from the C++ kernel of a program's op: checks the inputs, binds their shapes,
/// allocates the outputs through `alloc` and runs the program, without Python. Returns 0, or
/// the [`Failure`] code with its message in `message` (`message_len` bytes, NUL-terminated).
///
/// # Safety
/// `kernel` is a live `TorchKernel` (its address from `torch_kernel_address`); `inputs` holds
/// `n` inputs as [`TorchInput`] documents, their memory held by the caller for the call (and,
/// on CUDA, in `stream`'s order after it); `stream` points to a [`TorchStream`];
/// `alloc(ctx, ..)` returns memory for an output of its shape and the program's dtype, alive
/// for the call; `message` is writable for `message_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn ovl_torch_run(
    kernel: *const TorchKernel,
    inputs: *const TorchInput,
    n: usize,
    stream: *const TorchStream,
    ctx: *mut c_void,
    alloc: AllocFn,
    message: *mut c_char,
    message_len: usize,
) -> i32 {
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: the caller's contract.
        let (kernel, inputs, stream) = unsafe { (&*kernel, slice_or_empty(inputs, n), &*stream) };
        // SAFETY: forwarded.
        unsafe { kernel.run_c(inputs, stream, ctx, alloc) }
    }));
    let failure = match result {
        Ok(Ok(())) => return 0,
        Ok(Err(f)) => f,
        Err(_) => Failure::Runtime("ovl: the PyTorch op's kernel panicked".into()),
    };
    let (code, text) = failure.code();
    if !message.is_null() && message_len > 0 {
        let bytes = text.as_bytes();
        let len = bytes.len().min(message_len - 1);
        // SAFETY: `message` is writable for `message_len` bytes (the caller's contract).
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), message.cast::<u8>(), len);
            *message.add(len) = 0;
        }
    }
    code
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
        if let Some(message) = p.count_error(tensors.len()) {
            return Err(PyTypeError::new_err(message));
        }
        let mut held = Vec::with_capacity(n);
        let mut shapes = Vec::with_capacity(n);
        let mut feeds = Vec::with_capacity(n);
        let mut first: Option<(i32, String)> = None;
        for (k, t) in tensors.iter().enumerate() {
            let (t, shape, ptr, here) = self.take(k, t, first.as_ref())?;
            held.push(t);
            shapes.push(shape);
            feeds.push(ptr);
            first.get_or_insert(here);
        }
        let slices: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
        if let Some((device, _)) = first.filter(|f| f.0 >= 0) {
            return self.call_cuda(py, device, &slices, &feeds, held);
        }
        let plan = self.plan(&slices)?;
        // SAFETY: feed `k` points to input `k`'s contiguous elements (`take`), held in `held`.
        let bools = unsafe { self.normalize_bools(&slices, &mut feeds) };
        let empty = self.empty.bind(py);
        let mut outputs = Vec::with_capacity(plan.binding.outputs.len());
        let mut out_ptrs = Vec::with_capacity(plan.binding.outputs.len());
        for (sig, kwargs) in plan.binding.outputs.iter().zip(&self.out_kwargs) {
            let shape = PyTuple::new(py, &sig.shape)?;
            let out = empty.call((shape,), Some(kwargs.bind(py)))?;
            let mut ptr: usize = out.call_method0(intern!(py, "data_ptr"))?.extract()?;
            if ptr == 0 || sig.shape.contains(&0) {
                ptr = dangling();
            }
            out_ptrs.push(ptr as *mut c_void);
            outputs.push(out);
        }
        let loaded = &p.loaded;
        let binding = &plan.binding;
        let threads = plan.threads;
        let result = if plan.keep_gil {
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

impl TorchKernel {
    /// The Python kernel's call on CUDA tensors of `device`: on torch's current stream of that
    /// device, outputs and scratch from `torch.empty` there (the caching allocator, stream-ordered).
    fn call_cuda<'py>(
        &self,
        py: Python<'py>,
        device: i32,
        shapes: &[&[usize]],
        feeds: &[*const c_void],
        held: Vec<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let torch = py.import("torch")?;
        let stream: usize = torch
            .getattr("cuda")?
            .call_method1("current_stream", (device,))?
            .getattr("cuda_stream")?
            .extract()?;
        let dtypes = self
            .out_kwargs
            .iter()
            .map(|kw| kw.bind(py).as_any().get_item("dtype"))
            .collect::<PyResult<Vec<_>>>()?;
        let mut memory = PyMemory {
            empty: self.empty.bind(py).clone(),
            dtypes,
            device: torch.call_method1("device", ("cuda", device))?,
            held: Vec::new(),
        };
        let feeds: Vec<u64> = feeds.iter().map(|&f| f as u64).collect();
        let call = crate::cuda::CudaCall {
            feeds: &feeds,
            shapes,
            device,
            stream,
        };
        // SAFETY: the inputs' device memory (contiguous, aligned, of the checked dtypes and
        // bound shapes) held in `held` for the call and by torch's allocator in stream order
        // after it; outputs and scratch torch tensors on that device.
        unsafe { crate::cuda::run(&self.program().gpu, &call, &mut memory) }?;
        drop(held);
        let n_out = self.out_kwargs.len();
        let mut outputs: Vec<Bound<'py, PyAny>> = memory.held.drain(..n_out).collect();
        if outputs.len() == 1 {
            Ok(outputs.remove(0))
        } else {
            PyTuple::new(py, outputs)?.into_bound_py_any(py)
        }
    }
}

/// The address of a `TorchKernel` (stable while it lives), for the C++ kernel.
#[pyfunction]
pub fn torch_kernel_address(kernel: &Bound<'_, TorchKernel>) -> usize {
    kernel.get() as *const TorchKernel as usize
}

/// The address of [`ovl_torch_run`], for the C++ kernel.
#[pyfunction]
pub fn torch_run_address() -> usize {
    ovl_torch_run as *const () as usize
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

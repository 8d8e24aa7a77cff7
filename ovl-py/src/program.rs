//! `ovl._native.Program`: a bundle's program loaded (checked and compiled for the host) and run
//! on DLPack tensors, its outputs handed out as [`DlpackExport`]s.

use crate::bundle::{BundleFile, Dim, TensorInfo};
use crate::capsule::{dlpack_error, gpu_input, import, DlpackExport};
use ovl::program::{open_program, LoadedProgram, ProgramError};
use ovl_core::{DType, HostTensor};
use ovl_runtime::dlpack::{Device, DlpackError, DlpackTensor};
use pyo3::exceptions::{PyMemoryError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use std::ffi::c_void;
use std::sync::Arc;

pyo3::create_exception!(
    _native,
    BundleError,
    pyo3::exceptions::PyValueError,
    "A bundle file whose contents cannot be used: not a bundle, another bundle version, a \
     program modified or corrupted, or malformed. The message starts with `bundle \"<path>\":`."
);

/// A loaded program.
#[pyclass(frozen, module = "ovl._native", name = "Program")]
pub struct Program {
    /// Shared with the XLA handler's registry (`crate::xla_ffi`).
    pub(crate) loaded: Arc<LoadedProgram>,
    pub(crate) inputs: Vec<TensorInfo>,
    pub(crate) outputs: Vec<TensorInfo>,
    /// The program's sealed bytes (`ovl.jax` batches them for `vmap`).
    pub(crate) sealed: Vec<u8>,
    /// The gradient program's sealed bytes, loaded on demand ([`Program::gradient`]).
    pub(crate) gradient: Option<Vec<u8>>,
    /// Where the program came from, for messages (the bundle's path).
    pub(crate) source: String,
    /// The hex SHA-256 digest of the program (the one its sealed bytes carry).
    pub(crate) digest: String,
    /// The program compiled for the GPU, on first use (`crate::cuda`).
    pub(crate) gpu: Arc<crate::cuda::CudaProgram>,
}

/// The feed and output pointers of one run, moved to the thread that runs it without the GIL.
struct Buffers {
    feeds: Vec<*const c_void>,
    outputs: Vec<*mut c_void>,
}

// SAFETY: the pointers are only read through by the run, while the caller keeps what they
// point into (the DLPack tensors, the copies and the output tensors) alive and untouched.
unsafe impl Send for Buffers {}

/// NumPy's name of a dtype.
fn dtype_name(dtype: DType) -> &'static str {
    ovl::program::tensorflow_dtype_name(dtype)
}

impl Program {
    /// `program `name`: input 1 (`b`)`.
    pub(crate) fn what(&self, k: usize) -> String {
        format!(
            "ovl program `{}`: input {k} (`{}`)",
            self.loaded.name, self.loaded.feeds[k].0
        )
    }

    /// The message of a call with `given` inputs when the program takes another number (the
    /// `TypeError` of every entry: `program(..)`, the torch kernels); `None` when it fits.
    pub(crate) fn count_error(&self, given: usize) -> Option<String> {
        let n = self.inputs.len();
        (given != n).then(|| {
            format!(
                "ovl program `{}` takes {n} input{} ({}), {given} given",
                self.loaded.name,
                if n == 1 { "" } else { "s" },
                self.signature(),
            )
        })
    }

    pub(crate) fn signature(&self) -> String {
        let inputs: Vec<String> = self
            .inputs
            .iter()
            .map(|t| format!("{}: {}", t.name.as_deref().unwrap_or("?"), t.type_text()))
            .collect();
        inputs.join(", ")
    }

    /// Checks the dtype (a `TypeError`) and the sizes known at export (a `ValueError`) of
    /// input `k`; sizes known only at run time are checked by `bind`.
    fn check_input(&self, k: usize, t: &DlpackTensor) -> PyResult<()> {
        let (_, sig) = &self.loaded.feeds[k];
        let info = &self.inputs[k];
        let given = format!("{}{:?}", dtype_name(t.dtype()), t.shape());
        if t.dtype() != sig.dtype {
            return Err(PyTypeError::new_err(format!(
                "{} is {given}, the program takes {}: convert it first (in NumPy, \
                 `.astype(\"{}\")`)",
                self.what(k),
                info.type_text(),
                dtype_name(sig.dtype)
            )));
        }
        let fits = t.shape().len() == info.dims.len()
            && info.dims.iter().zip(t.shape()).all(|(d, &n)| match d {
                Dim::Fixed(m) => *m == n,
                Dim::Symbolic { .. } => true,
            });
        if !fits {
            return Err(PyValueError::new_err(format!(
                "{} has shape {:?}, the program takes {}",
                self.what(k),
                t.shape(),
                info.type_text()
            )));
        }
        Ok(())
    }
}

impl Program {
    /// Verifies, checks and compiles a sealed program whose feeds and outputs the bundle types
    /// as `inputs` and `outputs`; `what` names it in errors, `source` is the bundle's path.
    pub(crate) fn open(
        py: Python<'_>,
        sealed: &[u8],
        inputs: Vec<TensorInfo>,
        outputs: Vec<TensorInfo>,
        gradient: Option<Vec<u8>>,
        what: &str,
        source: &str,
    ) -> PyResult<Program> {
        let program =
            open_program(sealed, what).map_err(|e| BundleError::new_err(e.to_string()))?;
        let options = ovl::Options::default();
        // Compiling may take seconds: other Python threads run meanwhile.
        let loaded = py
            .detach(|| LoadedProgram::new(program, &options))
            .map_err(|e| program_error(e, source))?;
        if loaded.feeds.len() != inputs.len() || loaded.outputs.len() != outputs.len() {
            return Err(BundleError::new_err(format!(
                "{what}: its inputs and outputs do not match its program's; export it again"
            )));
        }
        // The program names its feeds (a gradient program's upstream gradients by their
        // placeholders' names): messages and `inputs` use those names.
        let mut inputs = inputs;
        for (t, (name, _)) in inputs.iter_mut().zip(&loaded.feeds) {
            t.name = Some(name.clone());
        }
        Ok(Program {
            loaded: Arc::new(loaded),
            inputs,
            outputs,
            sealed: sealed.to_vec(),
            gradient,
            source: source.to_string(),
            digest: sealed_digest(sealed),
            gpu: crate::cuda::CudaProgram::new(sealed.to_vec(), what.to_string()),
        })
    }
}

/// The hex SHA-256 digest a sealed program carries (after its header), `?` when there is none.
fn sealed_digest(sealed: &[u8]) -> String {
    let start = ovl::program::SEALED_PROGRAM_HEADER.len();
    match sealed.get(start..start + 32) {
        Some(d) => d.iter().map(|b| format!("{b:02x}")).collect(),
        None => "?".into(),
    }
}

/// An ovl error at load or run time as a Python exception.
pub(crate) fn program_error(e: ProgramError, source: &str) -> PyErr {
    match e {
        ProgramError::Mismatch { .. } => PyValueError::new_err(format!("ovl {e}")),
        ProgramError::OutOfMemory(_) => PyMemoryError::new_err(format!("ovl: {e}")),
        ProgramError::Compile { .. } | ProgramError::Run { .. } => {
            PyRuntimeError::new_err(format!("ovl {e}"))
        }
        e => BundleError::new_err(format!("bundle \"{source}\": {e}")),
    }
}

/// A Python list of a tensor's dimensions, `None` where the size is known only at run time.
fn dims_list(t: &TensorInfo) -> Vec<Option<usize>> {
    t.dims
        .iter()
        .map(|d| match d {
            Dim::Fixed(n) => Some(*n),
            Dim::Symbolic { .. } => None,
        })
        .collect()
}

#[pymethods]
impl Program {
    /// Loads the program of a bundle file's contents (`text`); `source` names the file in
    /// errors. Not a bundle, a modified program or a malformed one is a `BundleError`; an
    /// operator that does not compile a `RuntimeError`.
    #[new]
    fn new(py: Python<'_>, text: &[u8], source: &str) -> PyResult<Program> {
        let file: BundleFile = crate::bundle::read(text)
            .map_err(|why| BundleError::new_err(format!("bundle \"{source}\": {why}")))?;
        Program::open(
            py,
            &file.sealed,
            file.inputs,
            file.outputs,
            file.gradient,
            &format!("bundle \"{source}\""),
            source,
        )
    }

    /// The bundle's gradient program, loaded (checked and compiled) now, or `None` when the
    /// bundle carries none. It takes the inputs followed by one gradient per output (of the
    /// output's type, named as the export named its placeholder) and returns one gradient per
    /// input, of the input's type.
    fn gradient(&self, py: Python<'_>) -> PyResult<Option<Program>> {
        let Some(sealed) = &self.gradient else {
            return Ok(None);
        };
        let mut inputs = self.inputs.clone();
        // Named by the gradient program's feeds when it is opened.
        inputs.extend(self.outputs.iter().cloned());
        let outputs = self
            .inputs
            .iter()
            .map(|t| TensorInfo {
                name: None,
                ..t.clone()
            })
            .collect();
        let what = format!("bundle \"{}\": the gradient program", self.source);
        Program::open(py, sealed, inputs, outputs, None, &what, &self.source).map(Some)
    }

    /// The program's name.
    #[getter]
    fn name(&self) -> &str {
        &self.loaded.name
    }

    /// `[(name, dtype, shape)]`, a shape's `None` a size known only at run time.
    #[getter]
    fn inputs(&self) -> Vec<(Option<String>, String, Vec<Option<usize>>)> {
        self.inputs
            .iter()
            .map(|t| (t.name.clone(), t.dtype.clone(), dims_list(t)))
            .collect()
    }

    /// `[(None, dtype, shape)]` (outputs have no names).
    #[getter]
    fn outputs(&self) -> Vec<(Option<String>, String, Vec<Option<usize>>)> {
        self.outputs
            .iter()
            .map(|t| (None, t.dtype.clone(), dims_list(t)))
            .collect()
    }

    /// The inputs as text: `x: float32[batch, 3], w: float32[3, 4]`.
    #[getter]
    fn signature_text(&self) -> String {
        self.signature()
    }

    /// The outputs' types as text.
    #[getter]
    fn output_types_text(&self) -> Vec<String> {
        self.outputs.iter().map(TensorInfo::type_text).collect()
    }

    /// The names of the sizes known only at run time (`["batch"]`), empty for fixed shapes.
    #[getter]
    fn symbols(&self) -> Vec<String> {
        self.loaded.symbols().to_vec()
    }

    /// How many kernels a run launches.
    #[getter]
    fn kernel_count(&self) -> usize {
        self.loaded.kernel_count()
    }

    /// The program's SHA-256 digest (hex), as its sealed bytes carry it: equal for the same
    /// program loaded twice.
    #[getter]
    fn digest(&self) -> &str {
        &self.digest
    }

    /// The gradient program's digest (hex), without loading it; `None` when there is none.
    #[getter]
    fn gradient_digest(&self) -> Option<String> {
        self.gradient.as_deref().map(sealed_digest)
    }

    /// Whether the bundle carries a gradient program.
    #[getter]
    fn has_gradient(&self) -> bool {
        self.gradient.is_some()
    }

    /// Runs the program on `arrays` (objects with `__dlpack__`, one per input) and returns
    /// its outputs as `DlpackExport`s. See `ovl.Program.__call__`.
    fn run<'py>(
        &self,
        py: Python<'py>,
        arrays: &Bound<'py, PyTuple>,
    ) -> PyResult<Vec<Bound<'py, DlpackExport>>> {
        let n = self.loaded.feeds.len();
        if let Some(message) = self.count_error(arrays.len()) {
            return Err(PyTypeError::new_err(message));
        }
        // Each tensor's producer keeps its memory until the tensor is dropped, at the end of
        // this call (on an error too).
        let mut tensors = Vec::with_capacity(n);
        for (k, array) in arrays.iter().enumerate() {
            let t = import(&array, &self.what(k))?;
            if let Device::Cuda { .. } = t.device() {
                return Err(gpu_input(&self.what(k)));
            }
            self.check_input(k, &t)?;
            tensors.push(t);
        }
        let shapes: Vec<&[usize]> = tensors.iter().map(DlpackTensor::shape).collect();
        let binding = self
            .loaded
            .bind(&shapes)
            .map_err(|e| program_error(e, &self.loaded.name))?;
        // In place when contiguous row-major and aligned; else (and for bool bytes other than
        // 0 and 1) a row-major copy.
        let mut copies: Vec<Option<HostTensor>> = Vec::with_capacity(n);
        for (k, t) in tensors.iter().enumerate() {
            let copy = match t.host_ptr() {
                Ok(p) if t.dtype() == DType::Bool && !t.is_empty() => {
                    // SAFETY: `p` points to `t.len()` contiguous bytes of the producer's,
                    // valid while `t` lives.
                    let bytes = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), t.len()) };
                    bytes.iter().any(|&b| b > 1)
                }
                Ok(_) => false,
                Err(DlpackError::NotContiguous { .. } | DlpackError::Misaligned { .. }) => true,
                Err(e) => return Err(dlpack_error(e, &self.what(k))),
            };
            copies.push(if copy {
                Some(t.to_host().map_err(|e| dlpack_error(e, &self.what(k)))?)
            } else {
                None
            });
        }
        let mut outputs: Vec<HostTensor> = binding
            .outputs
            .iter()
            .map(|s| HostTensor::try_zeros(s.dtype, &s.shape))
            .collect::<Result<_, _>>()
            .map_err(|e| PyMemoryError::new_err(format!("ovl: {e}")))?;
        let mut feeds = Vec::with_capacity(n);
        for (t, copy) in tensors.iter().zip(&copies) {
            feeds.push(match copy {
                Some(h) => h.data.as_ptr().cast::<c_void>(),
                None => t
                    .host_ptr()
                    .map_err(|e| dlpack_error(e, &self.loaded.name))?,
            });
        }
        let buffers = Buffers {
            feeds,
            outputs: outputs
                .iter_mut()
                .map(|h| h.data.as_mut_ptr().cast::<c_void>())
                .collect(),
        };
        let loaded = &self.loaded;
        let result = py.detach(move || {
            let b = buffers;
            // SAFETY: feed `k` points to the elements of input `k` (a DLPack tensor checked
            // contiguous row-major and aligned, or its copy) of the dtype and shape bound,
            // alive until `tensors` and `copies` are dropped below; output `k` to a fresh
            // tensor of `binding.outputs[k]`'s type, overlapping nothing.
            unsafe { loaded.run_bound(&binding, &b.feeds, &b.outputs, 0) }
        });
        // The producers' deleters run here, with the GIL held.
        drop(copies);
        drop(tensors);
        result.map_err(|e| program_error(e, &self.loaded.name))?;
        outputs
            .into_iter()
            .map(|t| Bound::new(py, DlpackExport::new(t)))
            .collect()
    }

    fn __repr__(&self) -> String {
        format!(
            "<ovl.Program `{}` ({}) -> ({})>",
            self.loaded.name,
            self.signature(),
            self.outputs
                .iter()
                .map(TensorInfo::type_text)
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

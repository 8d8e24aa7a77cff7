//! Matrix products on the GPU through cuBLAS: the CUDA kernel of a GEMM library call
//! (`proto/ovl.proto`, "Library calls") on `f32` or `f64`, queued on the process's one stream.
//!
//! cuBLAS is loaded at run time, like NVRTC and through ovl's own binding of the few entry
//! points it needs (`cudarc`'s knows only the library names of the CUDA version it was built
//! for, and panics when none loads). Where it is looked for, the first that loads
//! (`library_search.rs`): `$OVL_CUBLAS_LIB` (a file or a directory; when set, nothing else is
//! tried), the CUDA 13 (`nvidia/cu13`) and `nvidia-cublas-cu12` wheels in a Python
//! environment, the CUDA toolkit (`$CUDA_HOME`, `$CUDA_PATH`, `/usr/local/cuda`), then the dynamic loader's own search
//! for `libcublas.so.13`, `.12` and `libcublas.so`. Where none loads, a GEMM runs as its
//! reference program compiled like any operator (correct, far slower); [`cublas_status`] says
//! which it is. `OVL_CUBLAS=0` asks for the generated kernel even where cuBLAS loads.
//!
//! cuBLAS is column-major and ovl's tensors are row-major: `C = op(A) · op(B)` (row-major) is
//! computed as `Cᵀ = op(B)ᵀ · op(A)ᵀ` (column-major), which reads the same memory with the
//! operands swapped, so no operand is copied or transposed. A sum of `terms` products runs as
//! `terms` calls, each after the first adding to C (`beta = 1`). Products use cuBLAS' default
//! math mode, full-precision `f32`, unless the kernel allows TF32 tensor cores
//! ([`CublasGemm::with_tf32`], `Options::cuda_tf32`).

use super::context::device;
use super::tensor::{DeviceError, DeviceTensor};
use cudarc::driver::sys;
use ovl_codegen::cuda::library_search::{entry_point, Search};
use ovl_codegen::{CodegenError, RunError};
use ovl_ir::ir;
use ovl_ir::library::{gemm_dims, GemmDims};
use ovl_ir::{DType, HostTensor};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

// Products on a caller's stream (any device): `cuda::stream`.
#[path = "cublas_stream.rs"]
mod on_stream;

type Handle = *mut c_void;
type Status = c_int;
const SUCCESS: Status = 0;
/// `cublasOperation_t`.
const OP_N: c_int = 0;
const OP_T: c_int = 1;

type Create = unsafe extern "C" fn(*mut Handle) -> Status;
type SetStream = unsafe extern "C" fn(Handle, sys::CUstream) -> Status;
type GetVersion = unsafe extern "C" fn(Handle, *mut c_int) -> Status;
type SetMathMode = unsafe extern "C" fn(Handle, c_int) -> Status;
/// `cublasMath_t`: full precision, or TF32 tensor cores for f32 products.
const DEFAULT_MATH: c_int = 0;
const TF32_TENSOR_OP_MATH: c_int = 3;
type StatusName = unsafe extern "C" fn(Status) -> *const c_char;
/// `cublas{S,D}gemmStridedBatched`: handle, transa, transb, m, n, k, alpha, A, lda, strideA, B,
/// ldb, strideB, beta, C, ldc, strideC, batchCount.
type GemmStridedBatched<T> = unsafe extern "C" fn(
    Handle,
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    *const T,
    *const T,
    c_int,
    i64,
    *const T,
    c_int,
    i64,
    *const T,
    *mut T,
    c_int,
    i64,
    c_int,
) -> Status;

/// `cublasGemmStridedBatchedEx`: handle, transa, transb, m, n, k, alpha, A, Atype, lda,
/// strideA, B, Btype, ldb, strideB, beta, C, Ctype, ldc, strideC, batchCount, computeType, algo.
type GemmStridedBatchedEx = unsafe extern "C" fn(
    Handle,
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    *const c_void,
    *const c_void,
    c_int,
    c_int,
    i64,
    *const c_void,
    c_int,
    c_int,
    i64,
    *const c_void,
    *mut c_void,
    c_int,
    c_int,
    i64,
    c_int,
    c_int,
    c_int,
) -> Status;
/// `cudaDataType`: the half types.
const CUDA_R_16F: c_int = 2;
const CUDA_R_16BF: c_int = 14;
/// `cublasComputeType_t`: f32 products and sums (tensor cores take 16-bit inputs so by default).
const CUBLAS_COMPUTE_32F: c_int = 68;
/// `cublasGemmAlgo_t`: cuBLAS' heuristic choice.
const CUBLAS_GEMM_DEFAULT: c_int = -1;

/// The library names tried, newest major version first.
const NAMES: [&str; 3] = ["libcublas.so.13", "libcublas.so.12", "libcublas.so"];

/// What this process's cuBLAS is: where it was loaded from and its version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CublasInfo {
    /// The library file (or the bare name the dynamic loader found).
    pub path: PathBuf,
    /// `cublasGetVersion`: major * 10000 + minor * 100 + patch (like 130001).
    pub version: i32,
}

/// cuBLAS, loaded, with one handle bound to the process's stream.
struct Cublas {
    /// Kept loaded while the entry points are in use (libcublasLt first, which libcublas needs).
    _libraries: Vec<libloading::Library>,
    handle: Handle,
    sgemm: GemmStridedBatched<f32>,
    dgemm: GemmStridedBatched<f64>,
    /// For the half types: inputs and C in the half type, f32 compute and accumulation.
    gemm_ex: GemmStridedBatchedEx,
    set_math_mode: SetMathMode,
    /// The handle's math mode now (set before a call that wants another).
    math_mode: c_int,
    status_name: Option<StatusName>,
    info: CublasInfo,
}

// SAFETY: the handle is used only under the mutex that holds it (`library`), with the process's
// context bound to the calling thread; cuBLAS handles may move between threads.
unsafe impl Send for Cublas {}

impl Cublas {
    fn open(path: &Path) -> Result<Cublas, String> {
        let mut libraries = Vec::new();
        // libcublas needs libcublasLt of the same version; a wheel's copy is found by the
        // dynamic loader only when loaded first (its directory is not on the loader's path).
        if let (Some(dir), Some(name)) = (path.parent(), path.file_name()) {
            let lt = dir.join(name.to_string_lossy().replace("libcublas", "libcublasLt"));
            if lt.is_file() {
                // SAFETY: loading a library runs its initializers, which have no preconditions.
                if let Ok(l) = unsafe { libloading::Library::new(&lt) } {
                    libraries.push(l);
                }
            }
        }
        // SAFETY: as above.
        let library = unsafe { libloading::Library::new(path.as_os_str()) }
            .map_err(|e| format!("cannot load it: {e}"))?;
        // Every `T` below is the C signature cuBLAS documents for the name.
        fn sym<T: Copy>(library: &libloading::Library, name: &str) -> Result<T, String> {
            entry_point(library, name, "a cuBLAS library")
        }
        let create: Create = sym(&library, "cublasCreate_v2")?;
        let set_stream: SetStream = sym(&library, "cublasSetStream_v2")?;
        let get_version: GetVersion = sym(&library, "cublasGetVersion_v2")?;
        let sgemm = sym(&library, "cublasSgemmStridedBatched")?;
        let dgemm = sym(&library, "cublasDgemmStridedBatched")?;
        let gemm_ex = sym(&library, "cublasGemmStridedBatchedEx")?;
        let set_math_mode: SetMathMode = sym(&library, "cublasSetMathMode")?;
        let status_name: Option<StatusName> = sym(&library, "cublasGetStatusName").ok();
        let dev = device().map_err(|e| e.to_string())?;
        dev.ctx
            .bind_to_thread()
            .map_err(|e| format!("cannot bind the CUDA context: {e}"))?;
        let mut handle: Handle = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; the process's context is current on this thread.
        let r = unsafe { create(&mut handle) };
        if r != SUCCESS || handle.is_null() {
            return Err(format!("cublasCreate failed with status {r}"));
        }
        // SAFETY: a live handle and the process's live stream.
        let r = unsafe { set_stream(handle, dev.stream.cu_stream()) };
        if r != SUCCESS {
            return Err(format!("cublasSetStream failed with status {r}"));
        }
        let mut version: c_int = 0;
        // SAFETY: a live handle and a valid out-pointer.
        unsafe { get_version(handle, &mut version) };
        libraries.push(library);
        Ok(Cublas {
            _libraries: libraries,
            handle,
            sgemm,
            dgemm,
            gemm_ex,
            set_math_mode,
            math_mode: DEFAULT_MATH,
            status_name,
            info: CublasInfo {
                path: path.to_path_buf(),
                version,
            },
        })
    }

    /// One term of a call on `handle` (this library's, or a caller's stream's): `C (+)= op(A) ·
    /// op(B)` for `pair = [A, B]` of `dtype`, adding to C unless `first`.
    ///
    /// # Safety
    /// As [`CublasGemm::launch_device`]; `handle` is live and bound to the stream.
    unsafe fn term(
        &self,
        dtype: DType,
        call: &Call,
        handle: Handle,
        (pair, c, first): (&[u64], u64, bool),
    ) -> Status {
        // SAFETY: the caller's contract.
        unsafe {
            match dtype {
                DType::F64 => call.run(self.dgemm, handle, pair, c, first),
                DType::F16 => call.run_ex(self.gemm_ex, CUDA_R_16F, handle, pair, c, first),
                DType::BF16 => call.run_ex(self.gemm_ex, CUDA_R_16BF, handle, pair, c, first),
                _ => call.run(self.sgemm, handle, pair, c, first),
            }
        }
    }

    fn status_text(&self, r: Status) -> String {
        let name = self.status_name.map(|f| {
            // SAFETY: cublasGetStatusName returns a static string (or null).
            let p = unsafe { f(r) };
            if p.is_null() {
                String::new()
            } else {
                // SAFETY: non-null static NUL-terminated string.
                unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
            }
        });
        match name {
            Some(n) if !n.is_empty() => format!("{n} (status {r})"),
            _ => format!("status {r}"),
        }
    }
}

/// Where cuBLAS is looked for: `OVL_CUBLAS_LIB`, the CUDA 13 then the CUDA 12 wheel, the
/// toolkit, the loader's path.
const SEARCH: Search = Search {
    env: "OVL_CUBLAS_LIB",
    names: &NAMES,
    wheels: &[
        "nvidia/cu13/lib/libcublas.so.13",
        "nvidia/cublas/lib/libcublas.so.12",
    ],
    what: "libcublas",
};

/// Why cuBLAS did not load, and the paths tried.
type NotLoaded = (String, Vec<PathBuf>);

fn load() -> Result<Cublas, NotLoaded> {
    SEARCH.load(Cublas::open)
}

/// This process's cuBLAS, loaded once (on the first GEMM of a graph run on the GPU).
fn library() -> Result<&'static Mutex<Cublas>, CodegenError> {
    static CUBLAS: OnceLock<Result<Mutex<Cublas>, NotLoaded>> = OnceLock::new();
    CUBLAS
        .get_or_init(|| load().map(Mutex::new))
        .as_ref()
        .map_err(|(message, searched)| CodegenError::CublasNotFound {
            message: message.clone(),
            searched: searched.clone(),
        })
}

/// Whether GEMM library calls run through cuBLAS on this machine, and which: `Err` says why
/// not (no GPU, no libcublas: then they run as generated kernels).
pub fn cublas_status() -> Result<CublasInfo, CodegenError> {
    let cublas = library()?;
    let info = cublas
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .info
        .clone();
    Ok(info)
}

/// Whether `OVL_CUBLAS=0` asks for generated GEMM kernels.
fn disabled() -> bool {
    std::env::var("OVL_CUBLAS").is_ok_and(|v| v.trim() == "0")
}

/// A GEMM library call run by cuBLAS on the GPU.
#[derive(Clone, Debug)]
pub struct CublasGemm {
    dtype: DType,
    tf32: bool,
}

impl CublasGemm {
    /// The cuBLAS kernel of `op`, when it is a GEMM on `f32` or `f64`, or a one-term GEMM on
    /// `f16` or `bf16` (`cublasGemmStridedBatchedEx`: f32 compute and accumulation on tensor
    /// cores, C rounded once into the half type; a sum of several terms would round C between
    /// them), cuBLAS loads on this machine and `OVL_CUBLAS=0` is not set; otherwise the caller
    /// compiles the call's reference program.
    pub fn for_operator(op: &ir::ExpressionDag) -> Option<CublasGemm> {
        let dims = gemm_dims(op).ok()?;
        let admitted = match dims.dtype {
            DType::F32 | DType::F64 => true,
            DType::F16 | DType::BF16 => dims.terms == 1,
            _ => false,
        };
        if !admitted || disabled() {
            return None;
        }
        library().ok()?;
        Some(CublasGemm {
            dtype: dims.dtype,
            tf32: false,
        })
    }

    /// This kernel, its f32 products on TF32 tensor cores when `allow` (inputs rounded to a
    /// 10-bit mantissa; `f64` products are unaffected).
    pub fn with_tf32(mut self, allow: bool) -> CublasGemm {
        self.tf32 = allow;
        self
    }

    /// Queues `C = Σ_t op(A_t) · op(B_t)` of `op` (a concrete operator: its types give the
    /// sizes) on the stream, with `inputs` the device addresses of A_0, B_0, A_1, ... and
    /// `output` that of C. Returns without waiting.
    ///
    /// # Safety
    /// Each address is a live device block of the type `op` declares for it; C overlaps no
    /// input.
    pub unsafe fn launch_device(
        &self,
        op: &ir::ExpressionDag,
        inputs: &[u64],
        output: u64,
    ) -> Result<(), RunError> {
        let err = |action: &str, message: String| RunError::Cuda {
            operator: op.name.clone(),
            action: action.into(),
            message,
        };
        let dims = gemm_dims(op).map_err(|e| err("reading the call", e.to_string()))?;
        let terms = dims.terms as usize;
        if dims.dtype != self.dtype || inputs.len() != 2 * terms {
            return Err(err(
                "checking the call",
                format!(
                    "the kernel was prepared for {} with {} inputs, the call is {} with {}",
                    self.dtype,
                    2 * terms,
                    dims.dtype,
                    inputs.len()
                ),
            ));
        }
        let (m, n, k) = (dims.m, dims.n, dims.k);
        if dims.batch == 0 || m == 0 || n == 0 {
            return Ok(());
        }
        let dev = device().map_err(|e| err("opening the GPU", e.to_string()))?;
        dev.ctx
            .bind_to_thread()
            .map_err(|e| err("binding the CUDA context", e.to_string()))?;
        if k == 0 {
            // An empty sum: zeros (cuBLAS is not asked, as on the CPU).
            let bytes = (dims.batch * m * n) as usize * self.dtype.size();
            // SAFETY: C holds batch * m * n elements (the caller's contract).
            unsafe {
                cudarc::driver::result::memset_d8_async(output, 0, bytes, dev.stream.cu_stream())
            }
            .map_err(|e| err("zeroing the product", e.to_string()))?;
            return Ok(());
        }
        let int = |v: u64, what: &str| {
            c_int::try_from(v).map_err(|_| {
                err(
                    "checking the call",
                    format!(
                        "{what} = {v} exceeds cuBLAS' 32-bit sizes (at most {})",
                        c_int::MAX
                    ),
                )
            })
        };
        let (mi, ni, ki, batch) = (
            int(m, "m")?,
            int(n, "n")?,
            int(k, "k")?,
            int(dims.batch, "the batch")?,
        );
        let mut cublas = library()
            .map_err(|e| err("loading cuBLAS", e.to_string()))?
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let mode = if self.tf32 && self.dtype == DType::F32 {
            TF32_TENSOR_OP_MATH
        } else {
            DEFAULT_MATH
        };
        if cublas.math_mode != mode {
            // SAFETY: a live handle; the mode is one cuBLAS defines.
            let r = unsafe { (cublas.set_math_mode)(cublas.handle, mode) };
            if r != SUCCESS {
                return Err(err("setting cuBLAS' math mode", cublas.status_text(r)));
            }
            cublas.math_mode = mode;
        }
        let call = Call::new(&dims, (mi, ni, ki, batch));
        for (t, pair) in inputs.chunks(2).enumerate() {
            let first = t == 0;
            // SAFETY: the caller's contract; the sizes and leading dimensions are those of the
            // operands' row-major types (`Call::new`), the handle is bound to the stream.
            let r = unsafe { cublas.term(self.dtype, &call, cublas.handle, (pair, output, first)) };
            if r != SUCCESS {
                return Err(err(
                    "running cublasGemmStridedBatched",
                    cublas.status_text(r),
                ));
            }
        }
        Ok(())
    }

    /// Runs the call on host tensors: copies `inputs` to the GPU, runs, copies the result into
    /// `outputs[0]`. Returns the GPU time of the products (CUDA events around them).
    pub fn run(
        &self,
        op: &ir::ExpressionDag,
        inputs: &[&HostTensor],
        outputs: &mut [HostTensor],
    ) -> Result<Duration, RunError> {
        let err = |action: &str| {
            let name = op.name.clone();
            let action = action.to_string();
            move |e: DeviceError| RunError::Cuda {
                operator: name,
                action,
                message: e.to_string(),
            }
        };
        let [output] = outputs else {
            return Err(RunError::TensorCount {
                operator: op.name.clone(),
                kind: "output",
                expected: 1,
                got: outputs.len(),
            });
        };
        let d_in = inputs
            .iter()
            .map(|t| DeviceTensor::upload(t))
            .collect::<Result<Vec<_>, _>>()
            .map_err(err("copying an input to the GPU"))?;
        let d_out = DeviceTensor::uninit(output.dtype(), &output.shape, "the product")
            .map_err(err("allocating the product"))?;
        let ins: Vec<u64> = d_in.iter().map(|t| t.ptr()).collect();
        let (launched, time) = super::tensor::gpu_time(|| {
            // SAFETY: the uploads hold the inputs' types, which the runner checked against
            // `op`; the product is a fresh block.
            Ok::<_, DeviceError>(unsafe { self.launch_device(op, &ins, d_out.ptr()) })
        })
        .map_err(err("timing the product"))?;
        launched?;
        *output = d_out.to_host().map_err(err("copying the product back"))?;
        Ok(time)
    }
}

/// The column-major cuBLAS call that computes a row-major `C = op(A) · op(B)`: `Cᵀ = op(B)ᵀ ·
/// op(A)ᵀ`, B as cuBLAS' first operand.
struct Call {
    /// cuBLAS' `transa` (for B) and `transb` (for A).
    trans: (c_int, c_int),
    /// cuBLAS' m, n, k: n, m, k of the row-major product.
    sizes: (c_int, c_int, c_int),
    /// Leading dimensions of B, A and C.
    ld: (c_int, c_int, c_int),
    /// Elements between consecutive batches of B, A and C.
    strides: (i64, i64, i64),
    batch: c_int,
}

impl Call {
    fn new(dims: &GemmDims, (m, n, k, batch): (c_int, c_int, c_int, c_int)) -> Call {
        // B stored [k, n] (row-major) is the column-major n x k matrix op(B)ᵀ: no transpose,
        // leading dimension n; stored [n, k] (bᵀ) it is k x n: transposed, leading dimension k.
        let (trans_b, ld_b) = if dims.transpose_b {
            (OP_T, k)
        } else {
            (OP_N, n)
        };
        let (trans_a, ld_a) = if dims.transpose_a {
            (OP_T, m)
        } else {
            (OP_N, k)
        };
        let (m64, n64, k64) = (i64::from(m), i64::from(n), i64::from(k));
        Call {
            trans: (trans_b, trans_a),
            sizes: (n, m, k),
            ld: (ld_b.max(1), ld_a.max(1), n.max(1)),
            strides: (k64 * n64, m64 * k64, m64 * n64),
            batch,
        }
    }

    /// One term: `C (+)= op(A) · op(B)` for `pair = [A, B]`, adding to C unless `first`.
    ///
    /// # Safety
    /// As [`CublasGemm::launch_device`], `f` cuBLAS' entry point for `T`.
    unsafe fn run<T: One>(
        &self,
        f: GemmStridedBatched<T>,
        handle: Handle,
        pair: &[u64],
        c: u64,
        first: bool,
    ) -> Status {
        let alpha = T::ONE;
        let beta = if first { T::ZERO } else { T::ONE };
        // SAFETY: the caller's contract.
        unsafe {
            f(
                handle,
                self.trans.0,
                self.trans.1,
                self.sizes.0,
                self.sizes.1,
                self.sizes.2,
                &alpha,
                pair[1] as *const T,
                self.ld.0,
                self.strides.0,
                pair[0] as *const T,
                self.ld.1,
                self.strides.1,
                &beta,
                c as *mut T,
                self.ld.2,
                self.strides.2,
                self.batch,
            )
        }
    }
}

impl Call {
    /// One term of a half product (`dtype` cuBLAS' `cudaDataType` of A, B and C): f32 compute,
    /// alpha and beta f32, adding to C unless `first`.
    ///
    /// # Safety
    /// As [`CublasGemm::launch_device`], `f` cuBLAS' `cublasGemmStridedBatchedEx`.
    unsafe fn run_ex(
        &self,
        f: GemmStridedBatchedEx,
        dtype: c_int,
        handle: Handle,
        pair: &[u64],
        c: u64,
        first: bool,
    ) -> Status {
        let alpha = 1f32;
        let beta = if first { 0f32 } else { 1f32 };
        // SAFETY: the caller's contract.
        unsafe {
            f(
                handle,
                self.trans.0,
                self.trans.1,
                self.sizes.0,
                self.sizes.1,
                self.sizes.2,
                (&alpha as *const f32).cast(),
                pair[1] as *const c_void,
                dtype,
                self.ld.0,
                self.strides.0,
                pair[0] as *const c_void,
                dtype,
                self.ld.1,
                self.strides.1,
                (&beta as *const f32).cast(),
                c as *mut c_void,
                dtype,
                self.ld.2,
                self.strides.2,
                self.batch,
                CUBLAS_COMPUTE_32F,
                CUBLAS_GEMM_DEFAULT,
            )
        }
    }
}

/// The two constants a GEMM call needs, per element type.
trait One: Copy {
    const ONE: Self;
    const ZERO: Self;
}
impl One for f32 {
    const ONE: f32 = 1.0;
    const ZERO: f32 = 0.0;
}
impl One for f64 {
    const ONE: f64 = 1.0;
    const ZERO: f64 = 0.0;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dims(m: u64, n: u64, k: u64, ta: bool, tb: bool) -> GemmDims {
        GemmDims {
            batch: 3,
            m,
            n,
            k,
            transpose_a: ta,
            transpose_b: tb,
            dtype: DType::F32,
            terms: 1,
        }
    }

    /// The column-major call reads each row-major operand with its own row length as the
    /// leading dimension, swapped: checked against a column-major reference GEMM written here.
    #[test]
    fn the_column_major_call_computes_the_row_major_product() {
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let (m, n, k) = (3usize, 5usize, 4usize);
            let d = dims(m as u64, n as u64, k as u64, ta, tb);
            let call = Call::new(&d, (m as c_int, n as c_int, k as c_int, 1));
            // Row-major operands as stored.
            let a: Vec<f64> = (0..m * k).map(|i| (i * 7 % 11) as f64 - 5.0).collect();
            let b: Vec<f64> = (0..k * n).map(|i| (i * 5 % 13) as f64 - 6.0).collect();
            let a_at = |i: usize, p: usize| if ta { a[p * m + i] } else { a[i * k + p] };
            let b_at = |p: usize, j: usize| if tb { b[j * k + p] } else { b[p * n + j] };
            // cuBLAS' semantics: column-major X (first operand, B) and Y (A), op by `trans`.
            let (cm, cn, ck) = (
                call.sizes.0 as usize,
                call.sizes.1 as usize,
                call.sizes.2 as usize,
            );
            let x = |i: usize, p: usize| {
                let ld = call.ld.0 as usize;
                if call.trans.0 == OP_N {
                    b[p * ld + i]
                } else {
                    b[i * ld + p]
                }
            };
            let y = |p: usize, j: usize| {
                let ld = call.ld.1 as usize;
                if call.trans.1 == OP_N {
                    a[j * ld + p]
                } else {
                    a[p * ld + j]
                }
            };
            let mut c = vec![0.0; m * n];
            for j in 0..cn {
                for i in 0..cm {
                    let s: f64 = (0..ck).map(|p| x(i, p) * y(p, j)).sum();
                    c[j * call.ld.2 as usize + i] = s;
                }
            }
            for i in 0..m {
                for j in 0..n {
                    let want: f64 = (0..k).map(|p| a_at(i, p) * b_at(p, j)).sum();
                    assert_eq!(c[i * n + j], want, "ta={ta} tb={tb} at ({i}, {j})");
                }
            }
            assert_eq!(
                call.strides,
                ((k * n) as i64, (m * k) as i64, (m * n) as i64)
            );
        }
    }

    /// Only the candidate list: loading needs a GPU.
    #[test]
    fn ovl_cublas_lib_replaces_the_search() {
        let (c, explicit) = SEARCH.candidates_for(Some("/nonexistent/libcublas.so.13".into()));
        assert!(explicit);
        assert_eq!(c, vec![PathBuf::from("/nonexistent/libcublas.so.13")]);
        let (c, explicit) = SEARCH.candidates_for(None);
        assert!(!explicit);
        assert!(
            c.ends_with(&NAMES.map(PathBuf::from)),
            "bare names last: {c:?}"
        );
    }
}

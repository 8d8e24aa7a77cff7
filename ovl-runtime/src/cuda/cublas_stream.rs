//! cuBLAS products queued on a caller's stream, on any device (`cuda::stream`): one handle per
//! device, created in its primary context at the first product there outside a capture; at each
//! call, under the library's lock, the handle is pointed at the call's stream and given a
//! workspace from the call's scratch (so that products queued on two streams never share one).
//! The product itself is the one of [`CublasGemm::launch_device`] (the same [`Call`]).

use super::{
    library, Call, Create, CublasGemm, Handle, SetStream, Status, DEFAULT_MATH, SUCCESS,
    TF32_TENSOR_OP_MATH,
};
use cudarc::driver::sys;
use ovl_codegen::cuda::library_search::entry_point;
use ovl_codegen::RunError;
use ovl_ir::library::gemm_dims;
use ovl_ir::{ir, DType};
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::{Mutex, OnceLock};

type SetWorkspace = unsafe extern "C" fn(Handle, *mut c_void, usize) -> Status;

/// One handle per device and its math mode now; the entry points this module adds.
#[derive(Default)]
struct Handles {
    per_device: HashMap<i32, (Handle, c_int)>,
    entries: Option<(Create, SetStream, SetWorkspace)>,
}

// SAFETY: handles are used only under the mutex that holds them, with their device's context
// current; cuBLAS handles may move between threads.
unsafe impl Send for Handles {}

fn handles() -> &'static Mutex<Handles> {
    static H: OnceLock<Mutex<Handles>> = OnceLock::new();
    H.get_or_init(|| Mutex::new(Handles::default()))
}

impl CublasGemm {
    /// The workspace a product on a caller's stream gives cuBLAS (taken from the call's
    /// scratch once per call that has products).
    pub const STREAM_WORKSPACE_BYTES: usize = 4 << 20;

    /// Queues `C = Σ_t op(A_t) · op(B_t)` of `op` on `stream` of `device` (whose primary
    /// context is current), as [`CublasGemm::launch_device`] does on the process's stream.
    /// `workspace`: [`Self::STREAM_WORKSPACE_BYTES`] of the device, for this call's products.
    /// The device's handle is created at its first product, which must not be captured.
    ///
    /// # Safety
    /// As [`CublasGemm::launch_device`]; `stream` is a stream of the current context; the
    /// workspace is not used by other work queued concurrently.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn launch_on_stream(
        &self,
        op: &ir::ExpressionDag,
        inputs: &[u64],
        output: u64,
        device: i32,
        stream: usize,
        workspace: u64,
        capturing: bool,
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
        // The element types `for_operator` admits, the half types in one term only.
        let admitted = match self.dtype {
            DType::F32 | DType::F64 => true,
            DType::F16 | DType::BF16 => terms == 1,
            _ => false,
        };
        if !admitted {
            return Err(err(
                "checking the call",
                format!(
                    "products of {} in {terms} terms are not run by cuBLAS",
                    self.dtype
                ),
            ));
        }
        let (m, n, k) = (dims.m, dims.n, dims.k);
        if dims.batch == 0 || m == 0 || n == 0 {
            return Ok(());
        }
        if k == 0 {
            let bytes = (dims.batch * m * n) as usize * self.dtype.size();
            // SAFETY: C holds batch * m * n elements (the caller's contract).
            return unsafe {
                cudarc::driver::result::memset_d8_async(output, 0, bytes, stream as sys::CUstream)
            }
            .map_err(|e| err("zeroing the product", e.to_string()));
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
        let sizes = (
            int(m, "m")?,
            int(n, "n")?,
            int(k, "k")?,
            int(dims.batch, "the batch")?,
        );
        let cublas = library()
            .map_err(|e| err("loading cuBLAS", e.to_string()))?
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let lib = cublas
            ._libraries
            .last()
            .ok_or_else(|| err("loading cuBLAS", "no library loaded".into()))?;
        let mut all = handles().lock().unwrap_or_else(|p| p.into_inner());
        let (create, set_stream, set_workspace) = match all.entries {
            Some(e) => e,
            None => {
                let what = "a cuBLAS library";
                let load = || -> Result<(Create, SetStream, SetWorkspace), String> {
                    Ok((
                        entry_point(lib, "cublasCreate_v2", what)?,
                        entry_point(lib, "cublasSetStream_v2", what)?,
                        entry_point(lib, "cublasSetWorkspace_v2", what)?,
                    ))
                };
                let e = load().map_err(|m| err("loading cuBLAS", m))?;
                all.entries = Some(e);
                e
            }
        };
        let (handle, math_mode) = match all.per_device.get(&device) {
            Some(&h) => h,
            None => {
                if capturing {
                    return Err(err(
                        "creating a cuBLAS handle",
                        format!(
                            "the first product on CUDA device {device} cannot be captured into \
                             a CUDA graph (cublasCreate allocates); call the program once \
                             before the capture"
                        ),
                    ));
                }
                let mut h: Handle = std::ptr::null_mut();
                // SAFETY: a valid out-pointer; the device's context is current.
                let r = unsafe { create(&mut h) };
                if r != SUCCESS || h.is_null() {
                    return Err(err("creating a cuBLAS handle", cublas.status_text(r)));
                }
                all.per_device.insert(device, (h, DEFAULT_MATH));
                (h, DEFAULT_MATH)
            }
        };
        // SAFETY: a live handle of this device and a stream of its context.
        let r = unsafe { set_stream(handle, stream as sys::CUstream) };
        if r != SUCCESS {
            return Err(err("setting cuBLAS' stream", cublas.status_text(r)));
        }
        // After the stream: setting a stream resets the workspace.
        // SAFETY: the workspace is a block of this device of the size given (the caller's
        // contract), used by this call's products only.
        let r = unsafe {
            set_workspace(
                handle,
                workspace as *mut c_void,
                Self::STREAM_WORKSPACE_BYTES,
            )
        };
        if r != SUCCESS {
            return Err(err("setting cuBLAS' workspace", cublas.status_text(r)));
        }
        let mode = if self.tf32 && self.dtype == DType::F32 {
            TF32_TENSOR_OP_MATH
        } else {
            DEFAULT_MATH
        };
        if math_mode != mode {
            // SAFETY: a live handle; the mode is one cuBLAS defines.
            let r = unsafe { (cublas.set_math_mode)(handle, mode) };
            if r != SUCCESS {
                return Err(err("setting cuBLAS' math mode", cublas.status_text(r)));
            }
            all.per_device.insert(device, (handle, mode));
        }
        let call = Call::new(&dims, sizes);
        for (t, pair) in inputs.chunks(2).enumerate() {
            // SAFETY: the caller's contract; as in `launch_device`.
            let r = unsafe { cublas.term(self.dtype, &call, handle, (pair, output, t == 0)) };
            if r != SUCCESS {
                return Err(err(
                    "running cublasGemmStridedBatched",
                    cublas.status_text(r),
                ));
            }
        }
        Ok(())
    }
}

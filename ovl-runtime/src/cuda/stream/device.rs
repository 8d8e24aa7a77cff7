//! The GPUs of a run on a caller's stream: each device's primary context (the one PyTorch, JAX
//! and the CUDA runtime use; `cudarc`'s `CudaContext::new` retains it), opened on first use and
//! kept for the process, with the compiled kernels loaded into it once per device; what the
//! driver says about a stream (its context, whether it is capturing) and about an address (its
//! device).

use super::error::StreamError;
use crate::cuda::operator::CudaOperator;
use cudarc::driver::{sys, CudaContext, CudaFunction};
use ovl_codegen::cuda::{no_panic, CudaBinary, KERNEL_NAME};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, OnceLock};

/// One GPU, through its primary context.
pub(crate) struct Gpu {
    pub(crate) ordinal: i32,
    pub(crate) ctx: Arc<CudaContext>,
    /// Compute capability as a number (90 for sm_90).
    pub(crate) arch: u32,
    pub(crate) multiprocessors: u32,
    /// Whether `cuMemAllocAsync` works (stream-ordered scratch).
    pub(crate) memory_pools: bool,
    /// Kernels loaded into this context, by their binary's path.
    functions: Mutex<HashMap<String, CudaFunction>>,
}

type Gpus = Result<Vec<OnceLock<Result<Gpu, StreamError>>>, StreamError>;

fn no_gpu(message: impl Into<String>) -> StreamError {
    StreamError::NoGpu {
        message: message.into(),
    }
}

/// The driver and its device count, found once.
fn gpus() -> &'static Gpus {
    static GPUS: OnceLock<Gpus> = OnceLock::new();
    GPUS.get_or_init(|| {
        // SAFETY: only tries to open the driver library by name.
        let present =
            no_panic("looking for libcuda", || unsafe { sys::is_culib_present() }).unwrap_or(false);
        if !present {
            return Err(no_gpu(
                "the NVIDIA driver library (libcuda.so.1) is not installed: this machine has no \
                 NVIDIA driver",
            ));
        }
        let count = no_panic("cuDeviceGetCount", CudaContext::device_count)
            .map_err(no_gpu)?
            .map_err(|e| no_gpu(format!("the NVIDIA driver reports no usable GPU ({e})")))?;
        if count <= 0 {
            return Err(no_gpu("the NVIDIA driver reports no GPU"));
        }
        Ok((0..count).map(|_| OnceLock::new()).collect())
    })
}

/// How many GPUs the driver reports, or why none can be used.
pub fn device_count() -> Result<i32, StreamError> {
    gpus()
        .as_ref()
        .map(|list| list.len() as i32)
        .map_err(Clone::clone)
}

/// GPU `ordinal`, its primary context retained on first use.
pub(crate) fn gpu(ordinal: i32) -> Result<&'static Gpu, StreamError> {
    let list = gpus().as_ref().map_err(Clone::clone)?;
    let slot = usize::try_from(ordinal)
        .ok()
        .and_then(|o| list.get(o))
        .ok_or(StreamError::NoSuchDevice {
            device: ordinal,
            count: list.len() as i32,
        })?;
    slot.get_or_init(|| open(ordinal))
        .as_ref()
        .map_err(Clone::clone)
}

fn open(ordinal: i32) -> Result<Gpu, StreamError> {
    // `CudaContext::new` makes the context current: the thread's own is put back after.
    let _restore = Restore::current()?;
    let ctx = no_panic("opening the GPU", || CudaContext::new(ordinal as usize))
        .map_err(|m| StreamError::driver(ordinal, "opening the GPU", m))?
        .map_err(|e| StreamError::driver(ordinal, "retaining the primary context", e))?;
    let (major, minor) = ctx
        .compute_capability()
        .map_err(|e| StreamError::driver(ordinal, "reading the compute capability", e))?;
    let attribute = |a| ctx.attribute(a).unwrap_or(0);
    let multiprocessors =
        attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT).max(1) as u32;
    let memory_pools =
        attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED) > 0;
    Ok(Gpu {
        ordinal,
        ctx,
        arch: (major.max(0) * 10 + minor.max(0)) as u32,
        multiprocessors,
        memory_pools,
        functions: Mutex::new(HashMap::new()),
    })
}

/// Puts the calling thread's current context back when dropped (the frameworks keep their
/// current device in it: a call on device 1 must not leave device 1 current).
pub(crate) struct Restore {
    previous: sys::CUcontext,
}

impl Restore {
    /// Remembers the thread's current context.
    pub(crate) fn current() -> Result<Restore, StreamError> {
        let mut previous: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        let r = no_panic("cuCtxGetCurrent", || unsafe {
            sys::cuCtxGetCurrent(&mut previous)
        })
        .map_err(no_gpu)?;
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(StreamError::driver(
                -1,
                "reading the current context",
                format!("{r:?}"),
            ));
        }
        Ok(Restore { previous })
    }
}

impl Drop for Restore {
    fn drop(&mut self) {
        let mut now: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; setting a context the thread had (or none) is always
        // allowed.
        unsafe {
            if sys::cuCtxGetCurrent(&mut now) == sys::CUresult::CUDA_SUCCESS && now != self.previous
            {
                sys::cuCtxSetCurrent(self.previous);
            }
        }
    }
}

/// Whether an address is the start of an allocation CUDA knows, and on which device.
pub fn pointer_device(ptr: u64) -> Result<i32, String> {
    let mut ordinal: i32 = -1;
    // SAFETY: the attribute is an int, written to a valid out-pointer; any address may be asked.
    let r = unsafe {
        sys::cuPointerGetAttribute(
            (&mut ordinal as *mut i32).cast::<c_void>(),
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
            ptr,
        )
    };
    match r {
        sys::CUresult::CUDA_SUCCESS => Ok(ordinal),
        r => Err(format!("the driver answers {r:?}")),
    }
}

impl Gpu {
    /// Makes this GPU's primary context current until the guard drops (then the thread's own
    /// again).
    pub(crate) fn bind(&self) -> Result<Restore, StreamError> {
        let restore = Restore::current()?;
        if restore.previous != self.ctx.cu_ctx() {
            // SAFETY: a live context (retained for the process).
            let r = unsafe { sys::cuCtxSetCurrent(self.ctx.cu_ctx()) };
            if r != sys::CUresult::CUDA_SUCCESS {
                return Err(StreamError::driver(
                    self.ordinal,
                    "binding the context",
                    format!("{r:?}"),
                ));
            }
        }
        Ok(restore)
    }

    /// Checks that `stream` belongs to this GPU's primary context (the legacy and per-thread
    /// default streams belong to the current one, which [`Gpu::bind`] made it).
    pub(crate) fn check_stream(&self, stream: usize) -> Result<(), StreamError> {
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; the driver checks the handle.
        let r = unsafe { sys::cuStreamGetCtx(stream as sys::CUstream, &mut ctx) };
        let why = match r {
            sys::CUresult::CUDA_SUCCESS if ctx == self.ctx.cu_ctx() => return Ok(()),
            sys::CUresult::CUDA_SUCCESS => "it belongs to another context".to_string(),
            r => format!("the driver answers {r:?} for it"),
        };
        Err(StreamError::ForeignStream {
            stream,
            device: self.ordinal,
            why,
        })
    }

    /// Whether `stream` is capturing a CUDA graph now (an invalidated capture counts).
    pub(crate) fn capturing(&self, stream: usize) -> Result<bool, StreamError> {
        let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: a valid out-pointer; the stream was checked by `check_stream`.
        let r = unsafe { sys::cuStreamIsCapturing(stream as sys::CUstream, &mut status) };
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(StreamError::driver(
                self.ordinal,
                "asking whether the stream is capturing",
                format!("{r:?}"),
            ));
        }
        Ok(status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
    }

    /// The kernel of `op` loaded into this GPU's context (loaded once: the same CUBIN or PTX
    /// the process compiled, which must suit this GPU's architecture). Loading while `stream`
    /// captures is refused.
    pub(crate) fn function(
        &self,
        op: &CudaOperator,
        stream: usize,
    ) -> Result<sys::CUfunction, StreamError> {
        let artifact = op.artifact();
        let key = artifact.binary_path().display().to_string();
        let mut functions = self.functions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = functions.get(&key) {
            return Ok(f.cu_function());
        }
        if self.capturing(stream)? {
            return Err(StreamError::Capturing {
                stream,
                device: self.ordinal,
                what: format!("operator `{}`", op.name()),
                action: "loading its kernel",
            });
        }
        let image = match artifact.binary() {
            CudaBinary::Cubin => cudarc::nvrtc::Ptx::from_binary(artifact.bytes().to_vec()),
            CudaBinary::Ptx => {
                cudarc::nvrtc::Ptx::from_src(String::from_utf8_lossy(artifact.bytes()).into_owned())
            }
        };
        let action = format!(
            "loading operator `{}` ({:?} for sm_{}) onto this sm_{} GPU",
            op.name(),
            artifact.binary(),
            artifact.arch(),
            self.arch
        );
        let _restore = Restore::current()?;
        let module = no_panic("loading a module", || self.ctx.load_module(image))
            .map_err(|m| StreamError::driver(self.ordinal, action.clone(), m))?
            .map_err(|e| StreamError::driver(self.ordinal, action.clone(), e))?;
        let f = module
            .load_function(KERNEL_NAME)
            .map_err(|e| StreamError::driver(self.ordinal, action, e))?;
        let raw = f.cu_function();
        functions.insert(key, f);
        Ok(raw)
    }
}

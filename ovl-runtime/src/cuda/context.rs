//! The CUDA context of this process: one context and one stream on device 0, opened on first
//! use ([`device`]), what the GPU is ([`gpu_status`]) and its copy bandwidth.

use cudarc::driver::{sys, CudaContext, CudaStream, DriverError};
use ovl_codegen::cuda::no_panic;
use ovl_codegen::CodegenError;
use std::sync::{Arc, Mutex, OnceLock};

/// The GPU this process runs on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuInfo {
    /// The device's name.
    pub name: String,
    /// Its compute capability as a number (like 90 for `sm_90`).
    pub arch: u32,
    /// Its number of streaming multiprocessors.
    pub multiprocessors: u32,
}

pub(crate) struct Device {
    pub(crate) ctx: Arc<CudaContext>,
    /// The one stream every copy and kernel of this process runs on, in order.
    pub(crate) stream: Arc<CudaStream>,
    pub(crate) info: GpuInfo,
    /// Runs are serialized: each owns the stream from its first copy to its last.
    pub(crate) busy: Mutex<()>,
}

/// The driver's own status, as text.
pub(crate) fn driver_text(e: DriverError) -> String {
    e.to_string()
}

fn open_device() -> Result<Device, String> {
    // SAFETY: only tries to open the driver library by name.
    let present =
        no_panic("looking for libcuda", || unsafe { sys::is_culib_present() }).unwrap_or(false);
    if !present {
        return Err(
            "the NVIDIA driver library (libcuda.so.1) is not installed: this machine has no \
             NVIDIA driver"
                .into(),
        );
    }
    let count = no_panic("cuDeviceGetCount", CudaContext::device_count)?.map_err(|e| {
        format!(
            "the NVIDIA driver reports no usable GPU ({})",
            driver_text(e)
        )
    })?;
    if count <= 0 {
        return Err("the NVIDIA driver reports no GPU".into());
    }
    let ctx = no_panic("creating a CUDA context", || CudaContext::new(0))?
        .map_err(|e| format!("cannot open GPU 0: {}", driver_text(e)))?;
    let (major, minor) = ctx
        .compute_capability()
        .map_err(|e| format!("cannot read GPU 0's compute capability: {}", driver_text(e)))?;
    let name = ctx.name().unwrap_or_else(|_| "GPU 0".into());
    let multiprocessors = ctx
        .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        .unwrap_or(1)
        .max(1) as u32;
    let stream = ctx
        .new_stream()
        .map_err(|e| format!("cannot create a CUDA stream: {}", driver_text(e)))?;
    Ok(Device {
        ctx,
        stream,
        info: GpuInfo {
            name,
            arch: (major.max(0) * 10 + minor.max(0)) as u32,
            multiprocessors,
        },
        busy: Mutex::new(()),
    })
}

pub(crate) fn device() -> Result<&'static Device, CodegenError> {
    static DEVICE: OnceLock<Result<Device, String>> = OnceLock::new();
    DEVICE
        .get_or_init(open_device)
        .as_ref()
        .map_err(|message| CodegenError::NoGpu {
            message: message.clone(),
        })
}

/// The GPU operators run on, or an error that says what is missing (the driver, a device).
pub fn gpu_status() -> Result<GpuInfo, CodegenError> {
    device().map(|d| d.info.clone())
}

/// GPU 0's device-to-device copy bandwidth in bytes per second, each copied byte counted twice
/// (read and written): the best of `reps` copies of `bytes` bytes (after one warm-up copy), timed
/// with CUDA events. The bandwidth reference for kernels that stream through device memory.
///
/// Without a GPU this is [`CodegenError::NoGpu`], as for running an operator.
pub fn device_copy_bandwidth(bytes: usize, reps: usize) -> Result<f64, CodegenError> {
    let dev = device()?;
    let _busy = dev.busy.lock().unwrap_or_else(|p| p.into_inner());
    let bytes = bytes.max(1);
    let copy = || -> Result<f32, DriverError> {
        let stream = &dev.stream;
        let src = stream.alloc_zeros::<u8>(bytes)?;
        let mut dst = stream.alloc_zeros::<u8>(bytes)?;
        let timing = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        let start = dev.ctx.new_event(timing)?;
        let end = dev.ctx.new_event(timing)?;
        let mut best = f32::INFINITY;
        for rep in 0..=reps.max(1) {
            start.record(stream)?;
            stream.memcpy_dtod(&src, &mut dst)?;
            end.record(stream)?;
            end.synchronize()?;
            let ms = start.elapsed_ms(&end)?;
            if rep > 0 {
                best = best.min(ms);
            }
        }
        Ok(best)
    };
    let driver_err = |message: String| CodegenError::CudaDriver {
        operator: "device-to-device copy".into(),
        action: "measuring the copy bandwidth".into(),
        message,
    };
    let best_ms = no_panic("CUDA", copy)
        .map_err(driver_err)?
        .map_err(|e| driver_err(driver_text(e)))?;
    Ok(2.0 * bytes as f64 / (f64::from(best_ms.max(1e-6)) / 1e3))
}

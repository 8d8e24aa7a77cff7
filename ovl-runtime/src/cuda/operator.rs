//! Running compiled operators on a GPU through the CUDA driver API (`cudarc`, loaded at run
//! time), on the context of [`super::context`]; per run, inputs and outputs are copied
//! to the device, the kernel is launched between two timing events, outputs and the fault status
//! are copied back.

use super::context::{device, driver_text, Device};
use super::tensor::{DeviceError, DeviceTensor};
use cudarc::driver::{sys, CudaFunction, CudaSlice, LaunchConfig};
use cudarc::driver::{DriverError, PushKernelArg as _};
use ovl_codegen::cuda::{
    compile, no_panic, workers_per_thread, CudaArtifact, CudaBinary, CudaCompileOptions,
    KERNEL_NAME,
};
use ovl_codegen::shared::fault::{fault_error, Status};
use ovl_codegen::shared::sizes;
use ovl_codegen::shared::symbols::Geometry;
use ovl_codegen::{CodegenError, RunError};
use ovl_ir::ir::{self, Op};
use ovl_ir::lru::{CacheControl, SharedLru};
use ovl_ir::names::defined_at;
use ovl_ir::{DType, HostTensor};
use std::sync::Arc;
use std::time::Duration;

/// An operator compiled for the GPU of this process and loaded into its context, ready to run
/// (from any thread; runs are serialized).
pub struct CudaOperator {
    artifact: Arc<CudaArtifact>,
    function: CudaFunction,
    defined_at: String,
    /// Tensor types, workgroup and symbols.
    geometry: Geometry,
    writes: Vec<bool>,
    block_size: u32,
    /// Workers per block: `block_size` (one thread each), 4 times that for a kernel with vector
    /// lanes, or a cooperative kernel's `workers_per_block` (`ovl_ir::cooperative`), whose
    /// block size is its own.
    workers_per_block: u32,
    /// Whether the kernel can report a fault (it has a checked index or range step); a kernel
    /// that cannot is launched on device tensors without reading the status back.
    can_fault: bool,
}

impl std::fmt::Debug for CudaOperator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaOperator")
            .field("name", &self.artifact.name())
            .field("key", &self.artifact.cache_key())
            .field("binary_path", &self.artifact.binary_path())
            .field("block_size", &self.block_size)
            .finish_non_exhaustive()
    }
}

type LoadedKey = (std::path::PathBuf, String);

fn loaded() -> &'static SharedLru<LoadedKey, CudaFunction> {
    static L: SharedLru<LoadedKey, CudaFunction> = SharedLru::new(
        "cuda_modules",
        ovl_codegen::shared::cache_entry::MODULES_CAPACITY,
    );
    &L
}

/// The CUDA functions loaded onto the GPU, for `ovl::cache_stats` and its siblings.
pub(crate) fn loaded_cache() -> &'static dyn CacheControl {
    loaded()
}

/// What this process compiles for: CUBIN for the GPU's own architecture when NVRTC knows it,
/// else PTX for the newest architecture NVRTC knows below it (the driver compiles it on load).
fn target(dev: &Device) -> Result<(u32, CudaBinary), CodegenError> {
    let nv = ovl_codegen::cuda::nvrtc_info()?;
    let arch = dev.info.arch;
    Ok(if nv.archs.contains(&arch) || nv.archs.is_empty() {
        (arch, CudaBinary::Cubin)
    } else {
        let best = nv.archs.iter().copied().filter(|&a| a <= arch).max();
        (best.unwrap_or(arch), CudaBinary::Ptx)
    })
}

/// [`load`] for each of `dags`, in order; the distinct operators that miss the cache are
/// compiled by NVRTC concurrently first (one compilation per core, the largest first; NVRTC
/// compiles different programs from several threads at once), then loaded in order. A graph's
/// kernels are many and NVRTC takes 50 ms to seconds each.
pub fn load_all(
    dags: &[&ir::ExpressionDag],
    options: &CudaCompileOptions,
) -> Vec<Result<Arc<CudaOperator>, CodegenError>> {
    if let Ok((arch, binary)) = device().and_then(target) {
        let options = options.clone().with_target(arch, binary);
        crate::cpu::pool::warm_concurrently(dags, sizes::code_hash, |dag| {
            // Kept by the memory cache; an error is met again by `load` below.
            let _ = compile(dag, &options);
        });
    }
    dags.iter().map(|dag| load(dag, options)).collect()
}

/// Compiles an operator for this process's GPU (CUBIN for its architecture when NVRTC supports
/// it, else PTX for the newest architecture NVRTC knows, which the driver compiles at load) or
/// finds it in the cache, and loads it onto the GPU. Errors say what is missing when there is no
/// GPU, no driver or no NVRTC.
pub fn load(
    dag: &ir::ExpressionDag,
    options: &CudaCompileOptions,
) -> Result<Arc<CudaOperator>, CodegenError> {
    let dev = device()?;
    let (arch, binary) = target(dev)?;
    let artifact = compile(dag, &options.clone().with_target(arch, binary))?;
    let driver_err = |action: &str, message: String| CodegenError::CudaDriver {
        operator: dag.name.clone(),
        action: action.into(),
        message,
    };
    let root = artifact
        .binary_path()
        .ancestors()
        .nth(4)
        .map(|p| p.to_path_buf())
        .unwrap_or_default();
    let key = (root, artifact.cache_key().to_string());
    let cached = loaded().get(&key);
    let function = match cached {
        Some(f) => f,
        None => {
            let image = match binary {
                CudaBinary::Cubin => cudarc::nvrtc::Ptx::from_binary(artifact.bytes().to_vec()),
                CudaBinary::Ptx => cudarc::nvrtc::Ptx::from_src(
                    String::from_utf8_lossy(artifact.bytes()).into_owned(),
                ),
            };
            let module = no_panic("loading a module", || dev.ctx.load_module(image))
                .map_err(|m| driver_err("loading the module", m))?
                .map_err(|e| {
                    driver_err(
                        &format!("loading {}", artifact.binary_path().display()),
                        driver_text(e),
                    )
                })?;
            let f = module
                .load_function(KERNEL_NAME)
                .map_err(|e| driver_err("finding the kernel", driver_text(e)))?;
            loaded().insert(key, f.clone());
            f
        }
    };
    let unsupported = |what: &str| CodegenError::Unsupported {
        operator: dag.name.clone(),
        defined_at: defined_at(dag),
        expression: None,
        message: what.into(),
    };
    // A fault check ends the worker with `goto ovl_stop`: the label is in the source only
    // where some check is (see `shared::emit`); an unreadable source: assume one, and no lanes.
    let source = std::fs::read_to_string(artifact.source_path()).ok();
    let can_fault = source.as_ref().is_none_or(|src| src.contains("ovl_stop:"));
    // A kernel whose workers cooperate was generated for its own launch shape; one with vector
    // lanes runs 4 workers per thread (`shared::emit::lanes`).
    let (block_size, workers_per_block) = match ovl_ir::cooperative::plan(dag) {
        Some(c) => (c.block(), c.workers_per_block),
        None => {
            let b = options.effective_block_size();
            let lanes = source.as_deref().map_or(1, workers_per_thread);
            (b, b * lanes as u32)
        }
    };
    Ok(Arc::new(CudaOperator {
        function,
        defined_at: defined_at(dag),
        geometry: Geometry::of(dag).map_err(|why| unsupported(&why.to_string()))?,
        writes: dag
            .expressions
            .iter()
            .map(|e| e.code == Op::Write as i32)
            .collect(),
        block_size,
        workers_per_block,
        can_fault,
        artifact,
    }))
}

/// `ovl_cuda_status` of the CUDA prelude.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CudaStatus {
    first: Status,
    lock: u32,
    pad: u32,
}

/// The bytes of one kernel's fault status on the device.
pub const STATUS_BYTES: usize = std::mem::size_of::<CudaStatus>();

/// Where a status's spin lock is (a `u32` the kernel holds while it writes a fault).
pub(crate) const STATUS_LOCK_OFFSET: usize = std::mem::offset_of!(CudaStatus, lock);

/// The fault statuses of the kernels of one run on device tensors: [`STATUS_BYTES`] zeroed
/// bytes per kernel in one device block, read back once at the end of the run.
pub struct StatusBlock {
    block: DeviceTensor,
    count: usize,
}

impl StatusBlock {
    /// Zeroed statuses for `count` kernels (from the caching allocator).
    pub fn new(count: usize) -> Result<StatusBlock, DeviceError> {
        let block = DeviceTensor::uninit(
            DType::U8,
            &[count.max(1) * STATUS_BYTES],
            "the fault status",
        )?;
        block.fill_zero()?;
        Ok(StatusBlock { block, count })
    }

    /// Zeroes every status again (queued on the stream): a CUDA graph that replays the kernels
    /// starts with this.
    pub fn reset(&self) -> Result<(), DeviceError> {
        self.block.fill_zero()
    }

    /// The device address of kernel `k`'s status.
    pub fn slot(&self, k: usize) -> u64 {
        self.block.ptr() + (k.min(self.count) * STATUS_BYTES) as u64
    }

    /// Copies the statuses back (waits for the stream).
    pub fn read(&self) -> Result<Vec<[u8; STATUS_BYTES]>, DeviceError> {
        let host = self.block.to_host()?;
        let bytes = host.as_slice::<u8>().unwrap_or_default();
        Ok(bytes
            .chunks_exact(STATUS_BYTES)
            .take(self.count)
            .map(|c| {
                let mut s = [0u8; STATUS_BYTES];
                s.copy_from_slice(c);
                s
            })
            .collect())
    }
}

/// The bytes of a host tensor.
fn bytes_of(t: &HostTensor) -> &[u8] {
    let n = t.len() * t.dtype().size();
    // SAFETY: the tensor's data holds `len` elements of `dtype` contiguously.
    unsafe { std::slice::from_raw_parts(t.data.as_ptr(), n) }
}

/// The bytes of a host tensor, mutably.
fn bytes_of_mut(t: &mut HostTensor) -> &mut [u8] {
    let n = t.len() * t.dtype().size();
    // SAFETY: as in `bytes_of`; the borrow is exclusive.
    unsafe { std::slice::from_raw_parts_mut(t.data.as_mut_ptr(), n) }
}

impl CudaOperator {
    /// The compiled code (PTX or CUBIN) and its place in the cache.
    pub fn artifact(&self) -> &Arc<CudaArtifact> {
        &self.artifact
    }

    /// The operator's name.
    pub fn name(&self) -> &str {
        self.artifact.name()
    }

    /// Threads per block at launch (for an operator whose workers cooperate, the block its
    /// code was generated for, whatever the options said).
    pub fn block_size(&self) -> u32 {
        self.block_size
    }

    /// How many symbol values [`run`](Self::run) takes (0: every size is known).
    pub fn symbol_count(&self) -> usize {
        self.geometry.symbol_count as usize
    }

    /// Runs the operator on the GPU for the symbol values `symbols` (`&[]` when it has no
    /// sizes given at run time; a wrong count, or values for which a dimension would be
    /// negative, is an error): copies `inputs` and `outputs` (elements no worker writes keep
    /// their value) to the device, launches the kernel over the workgroup for those values,
    /// copies `outputs` back. Returns the kernel's time measured by CUDA events (zero when the
    /// workgroup is empty: nothing runs). A runtime fault (index out of bounds, non-positive
    /// range step) is reported as the C++ backend reports it: the first in row-major worker
    /// order.
    pub fn run(
        &self,
        inputs: &[&HostTensor],
        outputs: &mut [HostTensor],
        symbols: &[u64],
    ) -> Result<Duration, RunError> {
        let workgroup = self.geometry.workgroup(self.name(), symbols)?;
        self.geometry
            .check(self.name(), symbols, inputs, &mut outputs.iter())?;
        let workers = sizes::product(&workgroup);
        if workers == 0 {
            return Ok(Duration::ZERO);
        }
        let dev = device().map_err(|e| self.cuda_err("opening the GPU", e.to_string()))?;
        let _busy = dev.busy.lock().unwrap_or_else(|p| p.into_inner());
        // Checked: every value is at most i64::MAX.
        let symbols: Vec<i64> = symbols.iter().map(|&v| v as i64).collect();
        let result = no_panic("CUDA", || {
            self.run_on(dev, inputs, outputs, &symbols, workers)
        })
        .map_err(|m| self.cuda_err("running", m))?;
        let (time, status) = result?;
        if status.first.code != 0 {
            return Err(fault_error(
                self.name(),
                &self.defined_at,
                &workgroup,
                &self.writes,
                &status.first,
            ));
        }
        Ok(time)
    }

    /// The grid for `workers` workers: enough blocks to cover them, at most 8 waves of blocks
    /// resident on every multiprocessor (the kernel's grid-stride loop covers the rest).
    fn launch_config(&self, dev: &Device, workers: u64) -> LaunchConfig {
        let block = self.block_size;
        let blocks_needed = workers.div_ceil(u64::from(self.workers_per_block.max(1)));
        let grid_limit = (dev.info.multiprocessors as u64) * (2048 / block as u64).max(1) * 8;
        let grid = blocks_needed.min(grid_limit).clamp(1, i32::MAX as u64) as u32;
        LaunchConfig {
            grid_dim: (grid, 1, 1),
            block_dim: (block, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    /// Whether the kernel can report a fault (a checked index or range step).
    pub fn can_fault(&self) -> bool {
        self.can_fault
    }

    /// Workers per block at launch (see the field): what a launch on another device's stream
    /// sizes its grid by.
    pub(crate) fn workers_per_block(&self) -> u32 {
        self.workers_per_block
    }

    /// Runs the operator on device tensors: `outputs` are written in place (elements no worker
    /// writes keep their value), nothing is copied to or from the host, and the call returns
    /// once the kernel is queued, except that a kernel that can fault ([`Self::can_fault`])
    /// waits for the kernel to read its status back. A fault is reported as by
    /// [`run`](Self::run). Tensors of another dtype or shape than the operator's, or a wrong
    /// count, are errors that name the tensor.
    pub fn run_device(
        &self,
        inputs: &[&DeviceTensor],
        outputs: &[&DeviceTensor],
        symbols: &[u64],
    ) -> Result<(), RunError> {
        let workgroup = self.geometry.workgroup(self.name(), symbols)?;
        self.check_device(symbols, inputs, outputs)?;
        let status = StatusBlock::new(1)
            .map_err(|e| self.cuda_err("allocating the fault status", e.to_string()))?;
        let ins: Vec<u64> = inputs.iter().map(|t| t.ptr()).collect();
        let outs: Vec<u64> = outputs.iter().map(|t| t.ptr()).collect();
        // SAFETY: the tensors were checked against the operator's types just above.
        unsafe { self.launch_device(&ins, &outs, symbols, status.slot(0)) }?;
        if self.can_fault {
            let statuses = status
                .read()
                .map_err(|e| self.cuda_err("running", e.to_string()))?;
            if let Some(s) = statuses.first() {
                self.check_status(&workgroup, s)?;
            }
        }
        Ok(())
    }

    /// Checks device tensors against the operator's types for `symbols`.
    fn check_device(
        &self,
        symbols: &[u64],
        inputs: &[&DeviceTensor],
        outputs: &[&DeviceTensor],
    ) -> Result<(), RunError> {
        let lists = [
            ("input", &self.geometry.inputs, inputs),
            ("output", &self.geometry.outputs, outputs),
        ];
        for (kind, declared, passed) in lists {
            if passed.len() != declared.len() {
                return Err(RunError::TensorCount {
                    operator: self.name().to_string(),
                    kind,
                    expected: declared.len(),
                    got: passed.len(),
                });
            }
            for (k, (t, d)) in declared.iter().zip(passed).enumerate() {
                let what = format!("{kind} {k}");
                let shape = self.geometry.shape(self.name(), symbols, &what, t)?;
                let same = d.dtype() == t.dtype
                    && d.shape().len() == shape.len()
                    && d.shape().iter().zip(&shape).all(|(&a, &b)| a as u64 == b);
                if !same {
                    return Err(RunError::TensorType {
                        operator: self.name().to_string(),
                        tensor: format!("{what} (a device tensor)"),
                        expected: format!("{}{:?}", t.dtype, shape),
                        got: format!("{}{:?}", d.dtype(), d.shape()),
                    });
                }
            }
        }
        Ok(())
    }

    /// Queues the kernel on the stream with device addresses and a zeroed status of
    /// [`STATUS_BYTES`] bytes at `status` (a [`StatusBlock::slot`]). Returns without waiting.
    ///
    /// # Safety
    /// One address per input and output, each of a live device block holding the operator's
    /// type for `symbols`; outputs distinct from each other and from the inputs.
    pub unsafe fn launch_device(
        &self,
        inputs: &[u64],
        outputs: &[u64],
        symbols: &[u64],
        status: u64,
    ) -> Result<(), RunError> {
        let workgroup = self.geometry.workgroup(self.name(), symbols)?;
        let workers = sizes::product(&workgroup);
        if workers == 0 {
            return Ok(());
        }
        let dev = device().map_err(|e| self.cuda_err("opening the GPU", e.to_string()))?;
        let symbols: Vec<i64> = symbols.iter().map(|&v| v as i64).collect();
        let cfg = self.launch_config(dev, workers);
        let launched = no_panic("CUDA", || {
            let mut launch = dev.stream.launch_builder(&self.function);
            for p in inputs.iter().chain(outputs) {
                launch.arg(p);
            }
            for v in &symbols {
                launch.arg(v);
            }
            launch.arg(&status);
            // SAFETY: the kernel takes one device pointer per input and output, each a block of
            // the declared type and size for the symbol values (the caller's contract), one
            // int64_t per symbol value, then the status pointer; the blocks stay allocated
            // until work queued after this launch (the allocator hands a block out again only
            // to work queued later on the same stream).
            unsafe { launch.launch(cfg) }
        })
        .map_err(|m| self.cuda_err("launching the kernel", m))?;
        launched.map_err(|e| self.cuda_err("launching the kernel", driver_text(e)))?;
        Ok(())
    }

    /// The fault a status holds, as an error naming the operator and the worker.
    pub fn check_status(
        &self,
        workgroup: &[u64],
        status: &[u8; STATUS_BYTES],
    ) -> Result<(), RunError> {
        // SAFETY: `CudaStatus` is plain old data of exactly `STATUS_BYTES` bytes.
        let status: CudaStatus =
            unsafe { std::ptr::read_unaligned(status.as_ptr() as *const CudaStatus) };
        if status.first.code != 0 {
            return Err(fault_error(
                self.name(),
                &self.defined_at,
                workgroup,
                &self.writes,
                &status.first,
            ));
        }
        Ok(())
    }

    /// The workgroup for `symbols` (checked).
    pub fn workgroup(&self, symbols: &[u64]) -> Result<Vec<u64>, RunError> {
        self.geometry.workgroup(self.name(), symbols)
    }

    fn cuda_err(&self, action: &str, message: String) -> RunError {
        RunError::Cuda {
            operator: self.name().to_string(),
            action: action.into(),
            message,
        }
    }

    fn run_on(
        &self,
        dev: &Device,
        inputs: &[&HostTensor],
        outputs: &mut [HostTensor],
        symbols: &[i64],
        workers: u64,
    ) -> Result<(Duration, CudaStatus), RunError> {
        let stream = &dev.stream;
        let err =
            |action: &'static str| move |e: DriverError| self.cuda_err(action, driver_text(e));
        let upload = |bytes: &[u8]| -> Result<CudaSlice<u8>, RunError> {
            if bytes.is_empty() {
                stream.alloc_zeros::<u8>(1)
            } else {
                stream.clone_htod(bytes)
            }
            .map_err(err("copying a tensor to the GPU"))
        };
        let d_in = inputs
            .iter()
            .map(|t| upload(bytes_of(t)))
            .collect::<Result<Vec<_>, _>>()?;
        let mut d_out = outputs
            .iter()
            .map(|t| upload(bytes_of(t)))
            .collect::<Result<Vec<_>, _>>()?;
        let d_status = stream
            .alloc_zeros::<u8>(STATUS_BYTES)
            .map_err(err("allocating the status"))?;
        let cfg = self.launch_config(dev, workers);
        let timing = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
        let start = dev
            .ctx
            .new_event(timing)
            .map_err(err("creating an event"))?;
        let end = dev
            .ctx
            .new_event(timing)
            .map_err(err("creating an event"))?;
        start.record(stream).map_err(err("recording an event"))?;
        {
            let mut launch = stream.launch_builder(&self.function);
            for d in &d_in {
                launch.arg(d);
            }
            for d in d_out.iter_mut() {
                launch.arg(d);
            }
            for v in symbols {
                launch.arg(v);
            }
            launch.arg(&d_status);
            // SAFETY: the kernel takes one device pointer per input and output, each to a buffer
            // of the declared type and size for the symbol values (checked above), one int64_t
            // per symbol value, then the status buffer of `STATUS_BYTES` bytes; all stay alive
            // until the stream is synchronized below.
            unsafe { launch.launch(cfg) }.map_err(err("launching the kernel"))?;
        }
        end.record(stream).map_err(err("recording an event"))?;
        for (d, h) in d_out.iter().zip(outputs.iter_mut()) {
            let host = bytes_of_mut(h);
            if !host.is_empty() {
                stream
                    .memcpy_dtoh(d, host)
                    .map_err(err("copying an output back"))?;
            }
        }
        let mut status_bytes = [0u8; STATUS_BYTES];
        stream
            .memcpy_dtoh(&d_status, &mut status_bytes[..])
            .map_err(err("copying the status back"))?;
        stream.synchronize().map_err(err("running the kernel"))?;
        let ms = start.elapsed_ms(&end).map_err(err("reading the timing"))?;
        // SAFETY: `CudaStatus` is plain old data of exactly `STATUS_BYTES` bytes.
        let status: CudaStatus =
            unsafe { std::ptr::read_unaligned(status_bytes.as_ptr() as *const CudaStatus) };
        Ok((Duration::from_secs_f64(ms.max(0.0) as f64 / 1e3), status))
    }
}

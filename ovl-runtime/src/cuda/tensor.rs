//! Device-resident tensors and the caching allocator behind them.
//!
//! A [`DeviceTensor`] is a dtype, a shape and a block of GPU 0's memory holding the row-major
//! elements. Blocks come from one [`CachingAllocator`] per process: a freed block goes back to a
//! free list of its size class instead of to `cuMemFree`, so a steady-state call allocates
//! nothing from the driver. All work (copies, kernels) runs in order on the process's one CUDA
//! stream, so a block handed back while a kernel that uses it is still queued can be handed out
//! again at once: whatever reuses it is queued after that kernel.
//!
//! Synchronization: [`DeviceTensor::upload`] returns once the host data has been taken (the
//! driver stages pageable memory), [`DeviceTensor::to_host`] waits for the stream. Kernels are
//! queued without waiting.

use super::context::{device, Device};
use cudarc::driver::{result, sys, DriverError};
use ovl_codegen::CodegenError;
use ovl_ir::{DType, HostTensor};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};

/// What went wrong with a device tensor.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// No GPU can be used (no driver, no device): the same message as for running an operator.
    #[error(transparent)]
    NoGpu(#[from] CodegenError),
    /// The GPU has not enough free memory for a tensor, even after the allocator gave back every
    /// block it kept.
    #[error(
        "out of GPU memory for {tensor} ({bytes} bytes): {message}; free device tensors you no \
         longer need, or use smaller batches"
    )]
    OutOfMemory {
        /// Which tensor was being allocated.
        tensor: String,
        /// Its size in bytes.
        bytes: usize,
        /// The driver's error.
        message: String,
    },
    /// A CUDA driver call failed.
    #[error("CUDA driver error while {action}: {message}")]
    Driver {
        /// What was attempted.
        action: String,
        /// The driver's error.
        message: String,
    },
    /// A run on a caller's stream could not be made (`cuda::stream`).
    #[error(transparent)]
    Stream(#[from] super::stream_error::StreamError),
    /// A tensor of another dtype or shape than expected.
    #[error("{tensor} is {got}, but {expected} is expected")]
    Mismatch {
        /// Which tensor.
        tensor: String,
        /// What was given, like `f32[2, 3]`.
        got: String,
        /// What is expected.
        expected: String,
    },
}

/// Why an allocation from the memory behind the allocator failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AllocFailure {
    /// Not enough free memory.
    OutOfMemory(String),
    /// Any other error.
    Other(String),
}

/// The memory a [`CachingAllocator`] takes blocks from: the CUDA driver, or a fake in tests.
pub(crate) trait Memory {
    /// Allocates `bytes` bytes; returns the block's address.
    fn alloc(&self, bytes: usize) -> Result<u64, AllocFailure>;
    /// Frees a block `alloc` returned.
    fn free(&self, ptr: u64);
}

/// What a `CachingAllocator` has done (see [`allocator_stats`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllocatorStats {
    /// Blocks allocated from the driver (`cuMemAlloc`).
    pub device_allocations: u64,
    /// Blocks given back to the driver (`cuMemFree`): only when memory ran out or on
    /// [`release_cached_memory`].
    pub device_frees: u64,
    /// Allocations served from a free list (no driver call).
    pub reused: u64,
    /// Bytes in blocks kept on free lists.
    pub cached_bytes: usize,
    /// Bytes in blocks handed out and not yet given back.
    pub in_use_bytes: usize,
}

/// The size class of a request: the block size it gets. Powers of two from 512 bytes up to
/// 64 MiB (at most half of a block is unused), then multiples of 2 MiB.
pub(crate) fn size_class(bytes: usize) -> usize {
    const BIG: usize = 64 << 20;
    const STEP: usize = 2 << 20;
    let bytes = bytes.max(1);
    if bytes <= BIG {
        bytes.next_power_of_two().max(512)
    } else {
        bytes.div_ceil(STEP).saturating_mul(STEP)
    }
}

/// Size-class free lists over a [`Memory`]. A request takes a kept block of its class, else a
/// new one; when memory runs out, every kept block is freed and the request tried once more.
pub(crate) struct CachingAllocator<M: Memory> {
    memory: M,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    free: BTreeMap<usize, Vec<u64>>,
    stats: AllocatorStats,
}

impl<M: Memory> CachingAllocator<M> {
    pub(crate) fn new(memory: M) -> Self {
        CachingAllocator {
            memory,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A block of at least `bytes` bytes: its address and size class.
    pub(crate) fn alloc(&self, bytes: usize) -> Result<(u64, usize), AllocFailure> {
        let class = size_class(bytes);
        {
            let mut s = self.state();
            if let Some(ptr) = s.free.get_mut(&class).and_then(Vec::pop) {
                s.stats.reused += 1;
                s.stats.cached_bytes -= class;
                s.stats.in_use_bytes += class;
                return Ok((ptr, class));
            }
        }
        let ptr = match self.memory.alloc(class) {
            Ok(p) => p,
            Err(AllocFailure::OutOfMemory(_)) => {
                self.release_cached();
                self.memory.alloc(class)?
            }
            Err(e) => return Err(e),
        };
        let mut s = self.state();
        s.stats.device_allocations += 1;
        s.stats.in_use_bytes += class;
        Ok((ptr, class))
    }

    /// Takes back a block [`alloc`](Self::alloc) handed out, onto its class's free list.
    pub(crate) fn give_back(&self, ptr: u64, class: usize) {
        let mut s = self.state();
        s.stats.in_use_bytes = s.stats.in_use_bytes.saturating_sub(class);
        s.stats.cached_bytes += class;
        s.free.entry(class).or_default().push(ptr);
    }

    /// Frees every kept block.
    pub(crate) fn release_cached(&self) {
        let free = std::mem::take(&mut self.state().free);
        let mut n = 0;
        let mut bytes = 0;
        for (class, ptrs) in free {
            for p in ptrs {
                self.memory.free(p);
                n += 1;
                bytes += class;
            }
        }
        let mut s = self.state();
        s.stats.device_frees += n;
        s.stats.cached_bytes = s.stats.cached_bytes.saturating_sub(bytes);
    }

    pub(crate) fn stats(&self) -> AllocatorStats {
        self.state().stats.clone()
    }
}

/// The CUDA driver's memory on GPU 0.
pub(crate) struct DriverMemory;

fn is_oom(e: &DriverError) -> bool {
    e.0 == sys::cudaError_enum::CUDA_ERROR_OUT_OF_MEMORY
}

impl Memory for DriverMemory {
    fn alloc(&self, bytes: usize) -> Result<u64, AllocFailure> {
        let dev = device().map_err(|e| AllocFailure::Other(e.to_string()))?;
        dev.ctx
            .bind_to_thread()
            .map_err(|e| AllocFailure::Other(e.to_string()))?;
        // SAFETY: a plain allocation in the bound context.
        unsafe { result::malloc_sync(bytes) }.map_err(|e| match is_oom(&e) {
            true => AllocFailure::OutOfMemory(e.to_string()),
            false => AllocFailure::Other(e.to_string()),
        })
    }

    fn free(&self, ptr: u64) {
        if let Ok(dev) = device() {
            // Blocks are freed only when none is in use by queued work: wait for the stream.
            let _ = dev.stream.synchronize();
            // SAFETY: `ptr` came from `malloc_sync` and is on no free list any more.
            let _ = unsafe { result::free_sync(ptr) };
        }
    }
}

fn allocator() -> &'static CachingAllocator<DriverMemory> {
    static A: OnceLock<CachingAllocator<DriverMemory>> = OnceLock::new();
    A.get_or_init(|| CachingAllocator::new(DriverMemory))
}

/// What the process's device allocator has done: driver allocations and frees, reuses, bytes
/// kept and in use. A steady-state loop over device tensors adds reuses only.
pub fn allocator_stats() -> AllocatorStats {
    allocator().stats()
}

/// Gives every block the device allocator keeps back to the driver (tensors in use stay).
pub fn release_cached_memory() {
    allocator().release_cached()
}

/// Waits until every copy and kernel queued on the process's CUDA stream has finished (the
/// device runs queue their kernels without waiting; `DeviceTensor::to_host` waits by itself).
/// For timing a call, or before reading device memory by other means. Without a GPU: the same
/// "no usable GPU" error as running an operator.
pub fn synchronize() -> Result<(), DeviceError> {
    bound_device()?
        .stream
        .synchronize()
        .map_err(driver_err("waiting for the GPU"))
}

/// The GPU time of the work `f` queues on the process's CUDA stream: CUDA events recorded
/// before and after `f` runs, so the time from the GPU's start of the first queued kernel or
/// copy to the end of the last, gaps between them included (what PyTorch's event timings
/// measure). Waits for that work. For `f` = one `Compiled::run_device_into`, a call's device
/// time; the host's own time is not in it.
pub fn gpu_time<T, E: From<DeviceError>>(
    f: impl FnOnce() -> Result<T, E>,
) -> Result<(T, std::time::Duration), E> {
    let dev = bound_device()?;
    let timing = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
    let start = dev
        .ctx
        .new_event(timing)
        .map_err(driver_err("creating an event"))?;
    let end = dev
        .ctx
        .new_event(timing)
        .map_err(driver_err("creating an event"))?;
    start
        .record(&dev.stream)
        .map_err(driver_err("recording an event"))?;
    let value = f()?;
    end.record(&dev.stream)
        .map_err(driver_err("recording an event"))?;
    end.synchronize()
        .map_err(driver_err("waiting for the GPU"))?;
    let ms = start
        .elapsed_ms(&end)
        .map_err(driver_err("reading the timing"))?;
    Ok((
        value,
        std::time::Duration::from_secs_f64(f64::from(ms.max(0.0)) / 1e3),
    ))
}

/// One block of device memory; back to the allocator's free list when dropped.
struct Block {
    ptr: u64,
    class: usize,
}

impl Drop for Block {
    fn drop(&mut self) {
        allocator().give_back(self.ptr, self.class);
    }
}

/// A tensor in GPU 0's memory: dtype, shape and contiguous row-major elements (like
/// [`HostTensor`]). Cloning shares the memory (the block is given back when the last clone is
/// dropped); operators never write into their inputs.
#[derive(Clone)]
pub struct DeviceTensor {
    block: Arc<Block>,
    dtype: DType,
    shape: Vec<usize>,
}

impl std::fmt::Debug for DeviceTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceTensor({})", self.describe())
    }
}

/// `f32[2, 3]`.
pub(crate) fn describe(dtype: DType, shape: &[usize]) -> String {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("{dtype}[{}]", dims.join(", "))
}

fn driver_err(action: &str) -> impl Fn(DriverError) -> DeviceError + '_ {
    move |e| DeviceError::Driver {
        action: action.into(),
        message: e.to_string(),
    }
}

pub(crate) fn bound_device() -> Result<&'static Device, DeviceError> {
    let dev = device()?;
    dev.ctx
        .bind_to_thread()
        .map_err(driver_err("binding the CUDA context"))?;
    Ok(dev)
}

impl ovl_ir::DeviceData for DeviceTensor {
    fn dtype(&self) -> DType {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn to_host(&self) -> Result<HostTensor, Box<dyn std::error::Error + Send + Sync>> {
        Ok(DeviceTensor::to_host(self)?)
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl DeviceTensor {
    /// A tensor from the caching allocator, its elements unspecified (`what` names it in an
    /// out-of-memory error).
    pub fn uninit(dtype: DType, shape: &[usize], what: &str) -> Result<Self, DeviceError> {
        let bytes = shape
            .iter()
            .try_fold(dtype.size(), |a, &d| a.checked_mul(d))
            .ok_or_else(|| DeviceError::OutOfMemory {
                tensor: what.into(),
                bytes: usize::MAX,
                message: format!(
                    "{} has more bytes than fit in memory",
                    describe(dtype, shape)
                ),
            })?;
        device()?;
        let (ptr, class) = allocator().alloc(bytes).map_err(|e| match e {
            AllocFailure::OutOfMemory(message) => DeviceError::OutOfMemory {
                tensor: format!("{what} ({})", describe(dtype, shape)),
                bytes,
                message,
            },
            AllocFailure::Other(message) => DeviceError::Driver {
                action: format!("allocating {what}"),
                message,
            },
        })?;
        Ok(DeviceTensor {
            block: Arc::new(Block { ptr, class }),
            dtype,
            shape: shape.to_vec(),
        })
    }

    /// A zero-filled tensor on the GPU.
    pub fn zeros(dtype: DType, shape: &[usize]) -> Result<Self, DeviceError> {
        let t = Self::uninit(dtype, shape, "a new device tensor")?;
        t.fill_zero()?;
        Ok(t)
    }

    /// Copies a host tensor to the GPU.
    pub fn upload(host: &HostTensor) -> Result<Self, DeviceError> {
        let bytes = host.len() * host.dtype().size();
        // SAFETY: the host tensor holds its `len` elements contiguously.
        let src = unsafe { std::slice::from_raw_parts(host.data.as_ptr(), bytes) };
        Self::upload_bytes(host.dtype(), &host.shape, src, "an uploaded tensor")
    }

    /// A tensor of `dtype` and `shape` on the GPU holding `bytes`, its row-major elements
    /// (`what` names it in an error); a byte count that does not match is an error.
    pub fn upload_bytes(
        dtype: DType,
        shape: &[usize],
        bytes: &[u8],
        what: &str,
    ) -> Result<Self, DeviceError> {
        let t = Self::uninit(dtype, shape, what)?;
        if bytes.len() != t.bytes() {
            return Err(DeviceError::Mismatch {
                tensor: what.into(),
                got: format!("{} bytes", bytes.len()),
                expected: format!("{} ({} bytes)", t.describe(), t.bytes()),
            });
        }
        if !bytes.is_empty() {
            let dev = bound_device()?;
            // SAFETY: the block holds at least `bytes.len()` bytes. Pageable memory is staged
            // by the driver before the call returns.
            unsafe { result::memcpy_htod_async(t.ptr(), bytes, dev.stream.cu_stream()) }
                .map_err(driver_err("copying a tensor to the GPU"))?;
        }
        Ok(t)
    }

    /// Copies the tensor back to host memory (waits for the queued work that writes it).
    pub fn to_host(&self) -> Result<HostTensor, DeviceError> {
        let mut host = HostTensor::zeros(self.dtype, &self.shape);
        let bytes = self.bytes();
        // SAFETY: the host tensor holds `bytes` bytes.
        let dst = unsafe { std::slice::from_raw_parts_mut(host.data.as_mut_ptr(), bytes) };
        self.download_into(dst)?;
        Ok(host)
    }

    /// Copies the tensor's bytes into `dst`, which holds exactly as many (waits for the queued
    /// work that writes it).
    pub fn download_into(&self, dst: &mut [u8]) -> Result<(), DeviceError> {
        if dst.len() != self.bytes() {
            return Err(DeviceError::Mismatch {
                tensor: "a host buffer for a device tensor".into(),
                got: format!("{} bytes", dst.len()),
                expected: format!("{} ({} bytes)", self.describe(), self.bytes()),
            });
        }
        if !dst.is_empty() {
            let dev = bound_device()?;
            // SAFETY: `dst` holds `bytes` bytes, written before the synchronization.
            unsafe { result::memcpy_dtoh_async(dst, self.ptr(), dev.stream.cu_stream()) }
                .map_err(driver_err("copying a tensor from the GPU"))?;
            dev.stream
                .synchronize()
                .map_err(driver_err("waiting for the GPU"))?;
        }
        Ok(())
    }

    /// The same memory as a tensor of `dtype` and `shape`, when that takes exactly this
    /// tensor's bytes (a block reused for another value of the same size).
    pub fn reinterpreted(&self, dtype: DType, shape: &[usize]) -> Option<DeviceTensor> {
        let bytes = shape
            .iter()
            .try_fold(dtype.size(), |a, &d| a.checked_mul(d))?;
        (bytes == self.bytes()).then(|| DeviceTensor {
            block: self.block.clone(),
            dtype,
            shape: shape.to_vec(),
        })
    }

    /// Sets every element to zero (queued on the stream).
    pub fn fill_zero(&self) -> Result<(), DeviceError> {
        if self.bytes() > 0 {
            let dev = bound_device()?;
            // SAFETY: the block holds at least `bytes` bytes.
            unsafe { result::memset_d8_async(self.ptr(), 0, self.bytes(), dev.stream.cu_stream()) }
                .map_err(driver_err("zeroing a device tensor"))?;
        }
        Ok(())
    }

    /// Copies `src`'s elements into this tensor (same byte size; queued on the stream).
    pub fn copy_from(&self, src: &DeviceTensor) -> Result<(), DeviceError> {
        let bytes = self.bytes().min(src.bytes());
        if bytes > 0 {
            let dev = bound_device()?;
            // SAFETY: both blocks hold at least `bytes` bytes.
            unsafe {
                result::memcpy_dtod_async(self.ptr(), src.ptr(), bytes, dev.stream.cu_stream())
            }
            .map_err(driver_err("copying between device tensors"))?;
        }
        Ok(())
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether it has no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The number of bytes of the elements.
    pub fn bytes(&self) -> usize {
        self.len() * self.dtype.size()
    }

    /// The device address of the first element.
    pub fn ptr(&self) -> u64 {
        self.block.ptr
    }

    /// `f32[2, 3]`.
    pub fn describe(&self) -> String {
        describe(self.dtype, &self.shape)
    }

    /// Checks the dtype and shape; the error names `tensor`.
    pub fn check(&self, tensor: &str, dtype: DType, shape: &[usize]) -> Result<(), DeviceError> {
        check_type(tensor, self.dtype, &self.shape, dtype, shape)
    }
}

/// Whether a tensor of `got_dtype[got_shape]` is the expected one; the error names `tensor`.
pub(crate) fn check_type(
    tensor: &str,
    got_dtype: DType,
    got_shape: &[usize],
    dtype: DType,
    shape: &[usize],
) -> Result<(), DeviceError> {
    if got_dtype == dtype && got_shape == shape {
        return Ok(());
    }
    Err(DeviceError::Mismatch {
        tensor: tensor.into(),
        got: describe(got_dtype, got_shape),
        expected: describe(dtype, shape),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

    /// Memory of a fixed capacity that hands out increasing addresses and counts calls.
    struct Fake {
        capacity: usize,
        used: AtomicUsize,
        next: AtomicU64,
        sizes: Mutex<BTreeMap<u64, usize>>,
        allocs: AtomicU64,
        frees: AtomicU64,
    }

    impl Fake {
        fn new(capacity: usize) -> Fake {
            Fake {
                capacity,
                used: AtomicUsize::new(0),
                next: AtomicU64::new(0x1000),
                sizes: Mutex::new(BTreeMap::new()),
                allocs: AtomicU64::new(0),
                frees: AtomicU64::new(0),
            }
        }
    }

    impl Memory for Fake {
        fn alloc(&self, bytes: usize) -> Result<u64, AllocFailure> {
            if self.used.load(Ordering::SeqCst) + bytes > self.capacity {
                return Err(AllocFailure::OutOfMemory("CUDA_ERROR_OUT_OF_MEMORY".into()));
            }
            self.used.fetch_add(bytes, Ordering::SeqCst);
            self.allocs.fetch_add(1, Ordering::SeqCst);
            let p = self.next.fetch_add(bytes as u64, Ordering::SeqCst);
            self.sizes.lock().unwrap().insert(p, bytes);
            Ok(p)
        }
        fn free(&self, ptr: u64) {
            let bytes = self
                .sizes
                .lock()
                .unwrap()
                .remove(&ptr)
                .expect("a live block");
            self.used.fetch_sub(bytes, Ordering::SeqCst);
            self.frees.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn size_classes_round_up_and_waste_at_most_half() {
        assert_eq!(size_class(0), 512);
        assert_eq!(size_class(1), 512);
        assert_eq!(size_class(512), 512);
        assert_eq!(size_class(513), 1024);
        assert_eq!(size_class(80 * 4), 512);
        assert_eq!(size_class(64 << 20), 64 << 20);
        assert_eq!(size_class((64 << 20) + 1), (64 << 20) + (2 << 20));
        for bytes in [1usize, 700, 4097, 1 << 20, 3 << 20, 100 << 20, 1 << 30] {
            let c = size_class(bytes);
            assert!(c >= bytes && (c <= 2 * bytes || c == 512), "{bytes} -> {c}");
        }
    }

    #[test]
    fn a_steady_state_loop_allocates_from_the_driver_once() {
        let a = CachingAllocator::new(Fake::new(1 << 30));
        for _ in 0..100 {
            // One "call": two outputs and a temporary, all given back at the end.
            let x = a.alloc(4000).unwrap();
            let y = a.alloc(4000).unwrap();
            let t = a.alloc(100).unwrap();
            assert_ne!(x.0, y.0, "two live blocks are distinct");
            for (p, c) in [x, y, t] {
                a.give_back(p, c);
            }
        }
        let s = a.stats();
        assert_eq!(s.device_allocations, 3);
        assert_eq!(s.reused, 297);
        assert_eq!(s.device_frees, 0);
        assert_eq!(s.in_use_bytes, 0);
        assert_eq!(s.cached_bytes, 4096 * 2 + 512);
        assert_eq!(a.memory.allocs.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn out_of_memory_frees_the_kept_blocks_and_retries_once() {
        let a = CachingAllocator::new(Fake::new(10240));
        let (p, c) = a.alloc(4096).unwrap();
        a.give_back(p, c); // kept: 4096 bytes of the device held by the cache
        let (q, d) = a.alloc(2048).unwrap(); // live: 6144 used
                                             // Class 8192 does not fit next to them; it does once the kept block is freed.
        let (r, e) = a.alloc(4097).expect("the kept block is freed to make room");
        assert_eq!(e, 8192);
        assert_eq!(a.stats().device_frees, 1);
        assert_eq!(a.memory.frees.load(Ordering::SeqCst), 1);
        assert_eq!(a.stats().cached_bytes, 0);
        // Nothing kept and nothing fits: an out-of-memory error, and the allocator still works.
        let err = a.alloc(4096).expect_err("full");
        assert!(matches!(err, AllocFailure::OutOfMemory(_)), "{err:?}");
        a.give_back(q, d);
        a.give_back(r, e);
        assert_eq!(a.stats().in_use_bytes, 0);
        assert_eq!(a.stats().cached_bytes, 2048 + 8192);
        a.release_cached();
        assert_eq!(a.memory.used.load(Ordering::SeqCst), 0, "every block freed");
        assert_eq!(a.stats().cached_bytes, 0);
        assert!(a.alloc(8192).is_ok());
    }

    #[test]
    fn type_checks_name_the_tensor() {
        assert!(check_type("input `x`", DType::F32, &[2, 3], DType::F32, &[2, 3]).is_ok());
        let e = check_type("input `x`", DType::F64, &[2, 3], DType::F32, &[2, 3]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "input `x` is f64[2, 3], but f32[2, 3] is expected"
        );
        let e = check_type("output 1", DType::F32, &[3], DType::F32, &[2, 3]).unwrap_err();
        assert!(e.to_string().contains("output 1 is f32[3]"), "{e}");
    }

    #[test]
    fn without_a_gpu_device_tensors_say_what_is_missing() {
        if device().is_ok() {
            eprintln!("device.rs: a GPU is present; the no-GPU errors were not checked");
            return;
        }
        let host = HostTensor::from_vec(&[2], vec![1.0f32, 2.0]).unwrap();
        let err = DeviceTensor::upload(&host).expect_err("no GPU");
        assert!(matches!(err, DeviceError::NoGpu(_)), "{err}");
        assert!(err.to_string().contains("libcuda"), "{err}");
        let err = DeviceTensor::zeros(DType::F32, &[4]).expect_err("no GPU");
        assert!(err.to_string().contains("no usable GPU"), "{err}");
    }
}

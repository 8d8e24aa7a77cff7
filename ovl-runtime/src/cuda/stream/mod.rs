//! Running on the caller's CUDA stream, device and memory: what a framework's custom op needs
//! (PyTorch's current stream, XLA's stream of an FFI call). `docs/streams.md` is the design.
//!
//! A [`StreamCall`] names a device ordinal, a raw `CUstream` handle (borrowed: never
//! synchronized, never destroyed) and a [`Scratch`] source. [`StreamCall::open`] binds the
//! device's primary context (the frameworks' own; the thread's current context is restored
//! when the [`OpenCall`] drops), checks that the stream belongs to it and whether it is
//! capturing a CUDA graph. `Plan::run_on_stream` then queues the program's kernels, cuBLAS
//! products, fills and copies on that stream with device addresses the caller owns: no host
//! synchronization, no copy to the host, no allocation but the scratch source's (stream-ordered),
//! no CUDA graph of ovl's own; so the call can itself be captured. What a program keeps per
//! device ([`Residents`]: its constants, uploaded once, and its fault statuses, in host-mapped
//! memory) is made at the first call on the device that is not capturing; a call that would
//! need it while capturing is refused ([`StreamError::Capturing`]). Faults are read, without
//! waiting, at the start of the next call and by an explicit check ([`Residents::take_fault`]).

mod device;
mod faults;
mod launch;
mod memory;

pub use super::stream_error::StreamError;
pub(crate) use device::Gpu;
pub use device::{device_count, pointer_device};
// The error lives beside this module (device tensors' errors carry it): named here as `error`.
use super::stream_error as error;
pub use faults::FaultBlock;
pub(crate) use launch::{grid, KernelArgs};
pub(crate) use memory::CallScratch;
pub use memory::{arena_bytes, DeviceAllocator, Scratch, SCRATCH_ALIGN};

use crate::cuda::operator::STATUS_BYTES;
use cudarc::driver::{result, sys};
use ovl_ir::HostTensor;
use std::sync::{Arc, Mutex};

/// One call on a caller's stream: the device, the stream, where scratch memory comes from.
#[derive(Clone, Copy, Debug)]
pub struct StreamCall<'a> {
    /// The CUDA device ordinal the inputs and outputs are on (any GPU, not only 0).
    pub device: i32,
    /// The raw `CUstream` (`cudaStream_t`) handle, e.g. `torch.cuda.current_stream().cuda_stream`
    /// or an XLA FFI call's stream; 0 is the legacy default stream. Borrowed.
    pub stream: usize,
    /// Where intermediates and cuBLAS' workspace come from.
    pub scratch: Scratch<'a>,
    /// Whether each feed and output address is checked to be memory of `device` (one driver
    /// query per buffer; on by default). A caller that knows it (a framework's op, whose
    /// tensors' device it read) may turn it off: the addresses are the caller's contract
    /// either way.
    pub check_pointers: bool,
}

impl<'a> StreamCall<'a> {
    /// A call on `stream` of `device` with ovl's stream-ordered scratch.
    pub fn new(device: i32, stream: usize) -> StreamCall<'a> {
        StreamCall {
            device,
            stream,
            scratch: Scratch::StreamOrdered,
            check_pointers: true,
        }
    }

    /// This call without the address checks (see [`StreamCall::check_pointers`]).
    pub fn without_pointer_checks(mut self) -> StreamCall<'a> {
        self.check_pointers = false;
        self
    }

    /// This call with scratch from `scratch`.
    pub fn with_scratch(mut self, scratch: Scratch<'a>) -> StreamCall<'a> {
        self.scratch = scratch;
        self
    }

    /// Opens the call: the device's primary context made current (until the result drops),
    /// the stream checked to belong to it, its capture state read. Errors: no GPU, no such
    /// device, a stream of another context.
    pub fn open(&self) -> Result<OpenCall<'a>, StreamError> {
        let gpu = device::gpu(self.device)?;
        let bound = gpu.bind()?;
        gpu.check_stream(self.stream)?;
        let capturing = gpu.capturing(self.stream)?;
        Ok(OpenCall {
            gpu,
            call: *self,
            capturing,
            _bound: bound,
        })
    }
}

/// A [`StreamCall`] opened ([`StreamCall::open`]): its device's context is current on this
/// thread until it drops.
pub struct OpenCall<'a> {
    pub(crate) gpu: &'static Gpu,
    pub(crate) call: StreamCall<'a>,
    capturing: bool,
    _bound: device::Restore,
}

impl std::fmt::Debug for OpenCall<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenCall")
            .field("call", &self.call)
            .field("capturing", &self.capturing)
            .finish_non_exhaustive()
    }
}

impl OpenCall<'_> {
    /// The device ordinal.
    pub fn device(&self) -> i32 {
        self.call.device
    }

    /// The stream handle.
    pub fn stream(&self) -> usize {
        self.call.stream
    }

    /// Whether the stream was capturing a CUDA graph when the call was opened.
    pub fn capturing(&self) -> bool {
        self.capturing
    }

    /// The error for `what` needing `action` while the stream captures, if it does.
    pub(crate) fn refuse_if_capturing(
        &self,
        what: &str,
        action: &'static str,
    ) -> Result<(), StreamError> {
        if self.capturing {
            return Err(StreamError::Capturing {
                stream: self.call.stream,
                device: self.call.device,
                what: what.to_string(),
                action,
            });
        }
        Ok(())
    }

    /// Checks that `ptr` (the buffer `what()` names, of `bytes` bytes) is device memory of the
    /// call's device. An empty buffer is not checked, nor any when the call turned the checks
    /// off ([`StreamCall::check_pointers`]).
    pub fn check_pointer(
        &self,
        ptr: u64,
        bytes: usize,
        what: impl FnOnce() -> String,
    ) -> Result<(), StreamError> {
        if bytes == 0 || !self.call.check_pointers {
            return Ok(());
        }
        match device::pointer_device(ptr) {
            Ok(on) if on == self.call.device => Ok(()),
            Ok(on) => Err(StreamError::WrongDevice {
                tensor: what(),
                on,
                device: self.call.device,
            }),
            Err(message) => Err(StreamError::NotDeviceMemory {
                tensor: what(),
                ptr,
                message,
            }),
        }
    }

    /// The call's scratch, bound to its device and stream.
    pub(crate) fn scratch(&self) -> CallScratch<'_> {
        CallScratch::new(
            self.call.scratch,
            self.call.device,
            self.call.stream,
            self.gpu.memory_pools,
        )
    }
}

/// Device memory from ovl's stream-ordered allocation on a call's stream (`cuMemAllocAsync`
/// from the device's default pool), given back in that stream's order when dropped
/// (`cuMemFreeAsync`): outputs for a caller without an allocator of its own.
pub struct StreamBuffer {
    ptr: u64,
    bytes: usize,
    gpu: &'static Gpu,
    stream: usize,
}

impl std::fmt::Debug for StreamBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamBuffer")
            .field("device", &self.gpu.ordinal)
            .field("bytes", &self.bytes)
            .finish_non_exhaustive()
    }
}

impl StreamBuffer {
    /// `bytes` bytes of the call's device (uninitialized), usable by work queued on its stream
    /// from now on. Refused while the stream captures (a block allocated inside a graph is the
    /// graph's; give the capture the caller's own buffers).
    ///
    /// # Safety
    /// The call's stream outlives the buffer (it is freed on that stream), and work on other
    /// streams that uses it is ordered after its allocation and before its drop by the caller.
    pub unsafe fn alloc(call: &OpenCall<'_>, bytes: usize) -> Result<StreamBuffer, StreamError> {
        call.refuse_if_capturing("an output buffer", "allocating it outside the graph")?;
        let mut scratch = CallScratch::new(
            Scratch::StreamOrdered,
            call.device(),
            call.stream(),
            call.gpu.memory_pools,
        );
        let ptr = scratch.alloc(bytes, &|| "an output buffer".into())?;
        Ok(StreamBuffer {
            ptr,
            bytes,
            gpu: call.gpu,
            stream: call.stream(),
        })
    }

    /// Its device address.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// Its length in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Its device.
    pub fn device(&self) -> i32 {
        self.gpu.ordinal
    }
}

impl Drop for StreamBuffer {
    fn drop(&mut self) {
        if let Ok(_bound) = self.gpu.bind() {
            // SAFETY: allocated on this stream by `alloc`, freed once, in the stream's order
            // (the stream outlives the buffer: `alloc`'s contract).
            let _ = unsafe { result::free_async(self.ptr, self.stream as sys::CUstream) };
        }
    }
}

/// A block of device memory ovl owns on one GPU (a program's constant there).
struct DeviceBuffer {
    ptr: u64,
    gpu: &'static Gpu,
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if self.ptr != 0 {
            if let Ok(_bound) = self.gpu.bind() {
                // SAFETY: allocated by `upload`, freed once; the program outlives its runs.
                let _ = unsafe { result::free_sync(self.ptr) };
            }
        }
    }
}

/// Copies `host` to a fresh block of the current context's device, through a private
/// non-blocking stream (the caller's stream and the legacy stream are not waited for).
fn upload(gpu: &'static Gpu, host: &HostTensor) -> Result<DeviceBuffer, StreamError> {
    let bytes = host.len() * host.dtype().size();
    let err = |action: &'static str| {
        move |e: cudarc::driver::DriverError| StreamError::driver(gpu.ordinal, action, e)
    };
    // SAFETY: a plain allocation in the current context (the call bound it).
    let ptr = unsafe { result::malloc_sync(bytes.max(1)) }.map_err(err("allocating a constant"))?;
    let buffer = DeviceBuffer { ptr, gpu };
    if bytes > 0 {
        let stream = result::stream::create(result::stream::StreamKind::NonBlocking)
            .map_err(err("creating an upload stream"))?;
        // SAFETY: the tensor's data holds `bytes` initialized bytes.
        let data = unsafe { std::slice::from_raw_parts(host.data.as_ptr(), bytes) };
        // SAFETY: `data` outlives the synchronize below; the block holds `bytes` bytes.
        let copied = unsafe {
            result::memcpy_htod_async(ptr, data, stream)
                .and_then(|_| result::stream::synchronize(stream))
        };
        // SAFETY: the stream is ours, its work done (or failed).
        let _ = unsafe { result::stream::destroy(stream) };
        copied.map_err(err("uploading a constant"))?;
    }
    Ok(buffer)
}

/// What a program keeps on one device for runs on callers' streams.
pub struct DeviceResident {
    gpu: &'static Gpu,
    constants: Vec<DeviceBuffer>,
    /// Fault statuses per set of symbol values (a fault is decoded with the values of the run
    /// that recorded it).
    faults: Mutex<Vec<(Vec<u64>, Arc<FaultBlock>)>>,
}

impl DeviceResident {
    /// The device address of constant `c` on this device.
    pub fn constant(&self, c: usize) -> u64 {
        self.constants.get(c).map_or(0, |b| b.ptr)
    }

    /// The fault statuses for runs with `symbols`, `slots` of them (made on first use, refused
    /// while the call's stream captures).
    pub fn faults(
        &self,
        call: &OpenCall<'_>,
        symbols: &[u64],
        slots: usize,
    ) -> Result<Arc<FaultBlock>, StreamError> {
        let mut all = self.faults.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, block)) = all.iter().find(|(s, _)| s == symbols) {
            return Ok(block.clone());
        }
        call.refuse_if_capturing(
            &format!("a first run with symbol values {symbols:?}"),
            "allocating its fault statuses",
        )?;
        let block = Arc::new(FaultBlock::new(self.gpu, slots)?);
        all.push((symbols.to_vec(), block.clone()));
        Ok(block)
    }
}

/// What a program keeps on each device it ran on from a caller's stream: its constants
/// (uploaded once) and its fault statuses. Freed with the program: a CUDA graph that captured
/// a run reads them, so the program must outlive the graph's replays (as its kernels must).
#[derive(Default)]
pub struct Residents {
    devices: Mutex<Vec<Arc<DeviceResident>>>,
}

impl std::fmt::Debug for Residents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let devices = self.devices.lock().map(|d| d.len()).unwrap_or(0);
        f.debug_struct("Residents")
            .field("devices", &devices)
            .finish()
    }
}

/// A fault taken from a status block: the symbol values of the run, the kernel slot, and the
/// status's bytes (`CudaOperator::check_status` decodes them).
pub type TakenFault = (Vec<u64>, usize, [u8; STATUS_BYTES]);

impl Residents {
    /// Nothing on any device yet.
    pub fn new() -> Residents {
        Residents::default()
    }

    /// The program's state on the call's device: on first use its `constants` are uploaded
    /// (refused while the stream captures: an upload allocates and waits for its own copy).
    pub fn on_device(
        &self,
        call: &OpenCall<'_>,
        constants: &[&HostTensor],
    ) -> Result<Arc<DeviceResident>, StreamError> {
        let mut devices = self.devices.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(d) = devices.iter().find(|d| d.gpu.ordinal == call.device()) {
            return Ok(d.clone());
        }
        call.refuse_if_capturing(
            "a first run on this device",
            "uploading the program's constants",
        )?;
        let constants = constants
            .iter()
            .map(|c| upload(call.gpu, c))
            .collect::<Result<Vec<_>, _>>()?;
        let d = Arc::new(DeviceResident {
            gpu: call.gpu,
            constants,
            faults: Mutex::new(Vec::new()),
        });
        devices.push(d.clone());
        Ok(d)
    }

    /// Takes the first fault recorded on any device (lowest device, then block, then slot),
    /// clearing it; others stay for the next read. Reads host-mapped memory: waits for
    /// nothing, so a fault of work still queued is found by a later read.
    pub fn take_fault(&self) -> Option<TakenFault> {
        // Under the locks: taking a status is a few reads (no driver call); `faults` never
        // takes the devices' lock, so the order cannot deadlock.
        let devices = self.devices.lock().unwrap_or_else(|p| p.into_inner());
        for d in devices.iter() {
            let blocks = d.faults.lock().unwrap_or_else(|p| p.into_inner());
            for (symbols, block) in blocks.iter() {
                if let Some((slot, status)) = block.take_first() {
                    return Some((symbols.clone(), slot, status));
                }
            }
        }
        None
    }
}

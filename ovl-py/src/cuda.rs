//! A program run on a framework's CUDA stream: what the PyTorch kernels (C++ and Python) and the
//! XLA CUDA handler share. The program is compiled for the GPU on first use
//! ([`CudaProgram::get`]: NVRTC, cached like the host operators) and run with
//! `LoadedProgram::run_on_stream` on the caller's stream and device, its outputs and its scratch
//! from the caller's allocator (a framework's, stream-ordered), nothing synchronizing the host
//! (`docs/streams.md`).

use crate::failure::Failure;
use ovl::cuda::stream::{Scratch, StreamCall};
use ovl::program::{Binding, LoadedProgram, ProgramError};
use ovl::Options;
use std::sync::{Arc, Mutex};

/// The GPU build of a program, made on first use (the first CUDA call), shared by the
/// program's PyTorch kernels and its XLA registration.
pub struct CudaProgram {
    /// The program's sealed bytes.
    sealed: Vec<u8>,
    /// What names it in errors (its bundle).
    what: String,
    loaded: Mutex<Option<Arc<LoadedProgram>>>,
}

impl CudaProgram {
    /// The GPU build of the sealed program, not compiled yet.
    pub fn new(sealed: Vec<u8>, what: String) -> Arc<CudaProgram> {
        Arc::new(CudaProgram {
            sealed,
            what,
            loaded: Mutex::new(None),
        })
    }

    /// The error of a program that could not be compiled for the GPU.
    pub fn compile_failure(&self, e: ProgramError) -> Failure {
        Failure::Runtime(format!(
            "{}: compiling its program for the GPU failed: {e}",
            self.what
        ))
    }

    /// The program compiled for the GPU (`Options::cuda()`, the operator cache of
    /// `$OVL_CACHE_DIR`), compiled now if no call made it yet. A failure (no GPU, no NVRTC) is
    /// returned, and the next call tries again.
    pub fn get(&self) -> Result<Arc<LoadedProgram>, ProgramError> {
        let mut slot = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(loaded) = &*slot {
            return Ok(loaded.clone());
        }
        let program = ovl::program::open_program(&self.sealed, &self.what)?;
        let loaded = Arc::new(LoadedProgram::new(program, &Options::cuda())?);
        *slot = Some(loaded.clone());
        Ok(loaded)
    }
}

/// Where a CUDA call's outputs and scratch come from: the caller's allocator (a framework's,
/// stream-ordered on the call's stream), asked for device memory of `bytes` bytes.
pub trait CallerMemory {
    /// Output `k` of `shape`, in the program's dtype for it: its device address (any address
    /// when it has no elements).
    fn output(&mut self, k: usize, shape: &[usize]) -> Result<u64, Failure>;
    /// A block of at least `bytes` bytes (more than 0), 256-byte aligned, alive in stream order
    /// until the queued work has run.
    fn scratch(&mut self, bytes: usize) -> Result<u64, Failure>;
}

/// One CUDA call: the inputs' device addresses and shapes, their device, the stream.
pub struct CudaCall<'a> {
    /// The device address of each input (contiguous row-major, of its program dtype).
    pub feeds: &'a [u64],
    /// Each input's shape.
    pub shapes: &'a [&'a [usize]],
    /// The CUDA device ordinal of the inputs (and outputs).
    pub device: i32,
    /// The raw `cudaStream_t` of the framework's current stream on that device.
    pub stream: usize,
}

/// Binds the shapes on `program`'s GPU build, takes the outputs and the scratch from
/// `memory` and queues the run on the call's stream; returns once queued (no host
/// synchronization). A first call on a device while the stream captures a CUDA graph is the
/// runtime's error saying to call once before the capture (the warm-up).
///
/// # Safety
/// Each feed is a live device block of `call.device` holding its input (its dtype, its shape,
/// contiguous), until the queued work has run in the stream's order; `memory` gives blocks of
/// that device, alive the same way.
pub unsafe fn run(
    program: &CudaProgram,
    call: &CudaCall<'_>,
    memory: &mut dyn CallerMemory,
) -> Result<(), Failure> {
    let loaded = program.get().map_err(|e| program.compile_failure(e))?;
    let binding = loaded.bind(call.shapes).map_err(Failure::from_program)?;
    let mut outputs = Vec::with_capacity(binding.outputs.len());
    for (k, sig) in binding.outputs.iter().enumerate() {
        outputs.push(memory.output(k, &sig.shape)?);
    }
    let bytes = loaded.scratch_bytes(&binding);
    let scratch = if bytes == 0 {
        Scratch::StreamOrdered // nothing is allocated
    } else {
        Scratch::Arena {
            ptr: memory.scratch(bytes)?,
            bytes,
        }
    };
    // The framework read the tensors' device: the driver is not asked again per buffer.
    let stream_call = StreamCall::new(call.device, call.stream)
        .with_scratch(scratch)
        .without_pointer_checks();
    // SAFETY: the caller's contract for the feeds; outputs and scratch fresh blocks of the
    // caller's allocator on that device, alive in stream order; `loaded` is kept by `program`
    // for the process (a captured graph may replay it).
    unsafe { run_bound(&loaded, &binding, call.feeds, &outputs, &stream_call) }
}

/// Queues a bound run (see [`run`]).
///
/// # Safety
/// As `LoadedProgram::run_on_stream`.
pub unsafe fn run_bound(
    loaded: &LoadedProgram,
    binding: &Binding,
    feeds: &[u64],
    outputs: &[u64],
    call: &StreamCall<'_>,
) -> Result<(), Failure> {
    // SAFETY: forwarded.
    unsafe { loaded.run_on_stream(binding, feeds, outputs, call) }.map_err(Failure::from_program)
}

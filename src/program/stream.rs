//! A program run on the caller's CUDA stream, device and memory, as a framework's custom op
//! runs it (PyTorch's current stream, an XLA FFI call's stream): [`LoadedProgram::run_on_stream`].
//! The design, and where faults surface: `docs/streams.md`.

use super::{Binding, LoadedProgram, ProgramError, Source};
use ovl_core::HostTensor;
use ovl_runtime::cuda::stream::{OpenCall, StreamBuffer, StreamCall};
use ovl_runtime::cuda::DeviceError;
use ovl_runtime::plan::{Plan, RunFailure};

impl LoadedProgram {
    /// Runs the program for `binding` on `call.stream` of GPU `call.device`: `feeds[k]` is
    /// the device address of feed `k`'s elements (row-major, of the shape bound),
    /// `outputs[k]` that of a block with room for `binding.outputs[k]`; intermediates come
    /// from `call.scratch`. The call queues the work and returns: it never waits for the
    /// stream, never copies to the host, allocates only scratch (stream-ordered on the stream),
    /// and replays no CUDA graph of ovl's own, so it can be captured into the caller's graph
    /// (`torch.cuda.graph`, XLA command buffers).
    ///
    /// Faults (an index out of bounds in a kernel) are recorded on the device and reported at
    /// the next point where the host reads them: the start of the next call of this program
    /// (on any stream or device), which then fails with the earlier call's fault and queues
    /// nothing, or [`check_faults`](Self::check_faults). The first call on a device uploads
    /// the program's constants and loads its kernels there (it waits for that upload only);
    /// doing that, or a first call with new symbol values, while the stream is capturing is
    /// an error: call once before the capture (or [`prepare_device`](Self::prepare_device)).
    ///
    /// Errors, before anything is queued: a wrong count, no GPU, no such device, a stream of
    /// another context, a feed or output on another device or not device memory (each named),
    /// a program not compiled for the GPU (`Options::cuda()`), the previous calls' fault.
    ///
    /// # Safety
    /// Each address is a live block of `call.device` holding (feeds) or with room for
    /// (outputs) its tensor, until the queued work has run (in the stream's order, as a
    /// framework's allocator keeps its tensors); outputs overlap no other buffer passed. The
    /// program outlives the queued work and any CUDA graph that captured it.
    pub unsafe fn run_on_stream(
        &self,
        binding: &Binding,
        feeds: &[u64],
        outputs: &[u64],
        call: &StreamCall<'_>,
    ) -> Result<(), ProgramError> {
        self.counts(feeds.len(), outputs.len())?;
        let open = call.open().map_err(|e| self.stream_failure(e))?;
        self.check_faults()?;
        let plan: &Plan = &binding.plan;
        plan.check_stream(&self.kernels, self.sources.len(), outputs.len())
            .map_err(|e| self.run_failure(e))?;
        for (i, source) in self.sources.iter().enumerate() {
            if let Source::Feed(k) = *source {
                let what = || format!("input {k} (`{}`)", self.feeds[k].0);
                open.check_pointer(feeds[k], plan.inputs()[i].bytes(), what)
                    .map_err(|e| self.stream_failure(e))?;
            }
        }
        for (k, (&p, sig)) in outputs.iter().zip(&binding.outputs).enumerate() {
            open.check_pointer(p, sig.bytes(), || format!("output {k}"))
                .map_err(|e| self.stream_failure(e))?;
        }
        let resident = self.resident(&open)?;
        let faults = resident
            .faults(&open, &binding.symbols, self.kernels.len())
            .map_err(|e| self.stream_failure(e))?;
        let inputs: Vec<u64> = self
            .sources
            .iter()
            .map(|s| match *s {
                Source::Feed(k) => feeds[k],
                Source::Constant(c) => resident.constant(c),
            })
            .collect();
        // SAFETY: feeds and outputs: the caller's contract; constants: uploaded to this
        // device, held by `self.streams` as long as the program lives; the fault block too.
        unsafe { plan.run_on_stream(&self.kernels, &inputs, outputs, &open, &faults) }
            .map_err(|e| self.run_failure(e))
    }

    /// Reports a fault that a kernel of an earlier [`run_on_stream`](Self::run_on_stream)
    /// recorded (on any device), as an error naming the operator and the worker, and clears
    /// it; `Ok` when none is recorded yet. Waits for nothing: a fault of work the GPU has not
    /// run yet is reported by a later check (synchronize the stream first to see all).
    pub fn check_faults(&self) -> Result<(), ProgramError> {
        match self.streams.take_fault() {
            Some(taken) => {
                Plan::stream_fault(&self.kernels, &taken).map_err(|e| self.run_failure(e))
            }
            None => Ok(()),
        }
    }

    /// Prepares runs on `call.device` for `binding` ahead of time: uploads the constants,
    /// loads the kernels and allocates the fault statuses there (what the first
    /// [`run_on_stream`](Self::run_on_stream) would do), so that the first call can be
    /// captured. Runs nothing on the stream. An error while the stream is capturing.
    pub fn prepare_device(
        &self,
        binding: &Binding,
        call: &StreamCall<'_>,
    ) -> Result<(), ProgramError> {
        let open = call.open().map_err(|e| self.stream_failure(e))?;
        let resident = self.resident(&open)?;
        resident
            .faults(&open, &binding.symbols, self.kernels.len())
            .map_err(|e| self.stream_failure(e))?;
        binding
            .plan
            .prepare_stream(&self.kernels, &open)
            .map_err(|e| self.run_failure(e))
    }

    /// Output buffers for `binding` from ovl's stream-ordered allocation on `call`'s stream
    /// (for a caller without an allocator of its own), each freed in the stream's order when
    /// dropped. Refused while the stream captures.
    ///
    /// # Safety
    /// As [`StreamBuffer::alloc`]: the stream outlives the buffers.
    pub unsafe fn stream_outputs(
        &self,
        binding: &Binding,
        call: &StreamCall<'_>,
    ) -> Result<Vec<StreamBuffer>, ProgramError> {
        let open = call.open().map_err(|e| self.stream_failure(e))?;
        binding
            .outputs
            .iter()
            // SAFETY: forwarded to the caller.
            .map(|s| unsafe { StreamBuffer::alloc(&open, s.bytes()) })
            .collect::<Result<_, _>>()
            .map_err(|e| self.stream_failure(e))
    }

    /// The scratch a run on a caller's stream takes at most for `binding`, in bytes: what a
    /// [`Scratch::Arena`](ovl_runtime::cuda::stream::Scratch::Arena) must hold.
    pub fn scratch_bytes(&self, binding: &Binding) -> usize {
        binding.plan.stream_scratch_bytes(&self.kernels)
    }

    fn resident(
        &self,
        open: &OpenCall<'_>,
    ) -> Result<std::sync::Arc<ovl_runtime::cuda::stream::DeviceResident>, ProgramError> {
        let constants: Vec<&HostTensor> = self.constants.iter().collect();
        self.streams
            .on_device(open, &constants)
            .map_err(|e| self.stream_failure(e))
    }

    fn stream_failure(&self, e: ovl_runtime::cuda::stream::StreamError) -> ProgramError {
        self.run_failure(RunFailure::Device(DeviceError::Stream(e)))
    }
}

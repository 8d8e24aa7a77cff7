//! Running a plan on a caller's CUDA stream (`cuda::stream`): the kernels, cuBLAS products,
//! fills and copies of a device run queued on the caller's stream of any device, on device
//! addresses the caller owns, with intermediates from the call's scratch source. Nothing waits
//! for the stream and nothing is allocated but scratch (stream-ordered), so the call may be
//! captured into the caller's CUDA graph. Faults are recorded in a [`FaultBlock`] and read
//! later ([`Plan::stream_fault`]).

use super::{Kernel, Plan, RunFailure, Slot};
use crate::cuda::stream::{
    arena_bytes, grid, CallScratch, FaultBlock, KernelArgs, OpenCall, StreamError, TakenFault,
};
use crate::cuda::CublasGemm;
use crate::error::Mismatch;
use cudarc::driver::{result, sys};
use ovl_codegen::shared::sizes;

fn stream_err(e: StreamError) -> RunFailure {
    RunFailure::Device(e.into())
}

impl Plan {
    /// The scratch a run on a caller's stream takes at most, in bytes: every intermediate
    /// (each rounded up to 256 bytes) and, when the graph has cuBLAS products, their workspace.
    /// What a [`Scratch::Arena`](crate::cuda::stream::Scratch::Arena) must hold.
    pub fn stream_scratch_bytes(&self, kernels: &[Kernel]) -> usize {
        let gemm = kernels.iter().any(|k| matches!(k, Kernel::CudaGemm(_)));
        let workspace = gemm.then_some(CublasGemm::STREAM_WORKSPACE_BYTES);
        arena_bytes(self.temps.iter().map(|s| s.bytes()).chain(workspace))
    }

    /// Checks the counts of a run on a caller's stream and that every operator that runs is a
    /// GPU kernel.
    pub fn check_stream(
        &self,
        kernels: &[Kernel],
        inputs: usize,
        outputs: usize,
    ) -> Result<(), RunFailure> {
        if kernels.len() != self.dag.operators.len()
            || inputs != self.inputs.len()
            || outputs != self.outputs.len()
        {
            return Err(self.counts(true, kernels.len(), inputs, outputs));
        }
        for (i, (kernel, op)) in kernels.iter().zip(&self.dag.operators).enumerate() {
            let runs_nothing = op.workgroup_shape.contains(&0);
            if !matches!(kernel, Kernel::Cuda(_) | Kernel::CudaGemm(_)) && !runs_nothing {
                return Err(Mismatch::NotCompiledForGpu {
                    operator: i,
                    name: op.name.clone(),
                }
                .into());
            }
        }
        Ok(())
    }

    /// Queues the graph on the call's stream: `inputs[i]` is the device address of graph input
    /// `i`, `outputs[k]` that of requested output `k`. Kernels that can fault record it in
    /// `faults` (slot `i` for operator `i`). Returns once everything is queued; waits for
    /// nothing. Errors before anything is queued: counts, a kernel not compiled for the GPU, a
    /// kernel or cuBLAS handle that would be loaded or created while the stream captures.
    ///
    /// # Safety
    /// Each address is a live block of the call's device holding (inputs) or with room for
    /// (outputs) its type, until the work queued here has run; outputs overlap nothing else
    /// passed; `faults` is mapped into the call's device and outlives the queued work.
    pub unsafe fn run_on_stream(
        &self,
        kernels: &[Kernel],
        inputs: &[u64],
        outputs: &[u64],
        call: &OpenCall<'_>,
        faults: &FaultBlock,
    ) -> Result<(), RunFailure> {
        self.check_stream(kernels, inputs.len(), outputs.len())?;
        let (gpu, stream) = (call.gpu, call.stream());
        // Every kernel loaded first: a load refused under capture queues nothing.
        let mut functions = Vec::with_capacity(kernels.len());
        for (i, kernel) in kernels.iter().enumerate() {
            functions.push(match kernel {
                Kernel::Cuda(k) if !self.viewed[i] => {
                    Some(gpu.function(k, stream).map_err(stream_err)?)
                }
                _ => None,
            });
        }
        let mut scratch = call.scratch();
        let gemm = kernels.iter().any(|k| matches!(k, Kernel::CudaGemm(_)));
        let workspace = match gemm {
            true => Some(
                scratch
                    .alloc(CublasGemm::STREAM_WORKSPACE_BYTES, "cuBLAS' workspace")
                    .map_err(stream_err)?,
            ),
            false => None,
        };
        let mut temps: Vec<Option<u64>> = vec![None; self.temps.len()];
        // SAFETY: forwarded (the caller's contract); `functions` are this plan's kernels.
        let queued = unsafe {
            self.queue_stream(
                kernels,
                inputs,
                outputs,
                call,
                faults,
                &functions,
                &mut scratch,
                &mut temps,
                workspace.unwrap_or(0),
            )
        };
        // Whatever happened, scratch still held goes back (in stream order).
        let mut freed = Ok(());
        for (t, p) in temps.iter().enumerate() {
            if let Some(p) = p {
                freed = freed.and(scratch.free(*p, self.temps[t].bytes()));
            }
        }
        if let Some(w) = workspace {
            freed = freed.and(scratch.free(w, CublasGemm::STREAM_WORKSPACE_BYTES));
        }
        queued?;
        freed.map_err(stream_err)
    }

    /// The operators and copies of [`Plan::run_on_stream`], in order.
    ///
    /// # Safety
    /// As [`Plan::run_on_stream`].
    #[allow(clippy::too_many_arguments)]
    unsafe fn queue_stream(
        &self,
        kernels: &[Kernel],
        inputs: &[u64],
        outputs: &[u64],
        call: &OpenCall<'_>,
        faults: &FaultBlock,
        functions: &[Option<sys::CUfunction>],
        scratch: &mut CallScratch<'_>,
        temps: &mut [Option<u64>],
        workspace: u64,
    ) -> Result<(), RunFailure> {
        let (gpu, stream, device) = (call.gpu, call.stream(), call.device());
        let cu_stream = stream as sys::CUstream;
        let driver = |action: &'static str| {
            move |e: cudarc::driver::DriverError| stream_err(StreamError::driver(device, action, e))
        };
        for (i, op) in self.dag.operators.iter().enumerate() {
            for (j, slot) in self.op_slots[i].iter().enumerate() {
                let written = self.written(i).get(j).copied().unwrap_or(false);
                let (ptr, bytes) = match *slot {
                    Slot::Temp(t) => {
                        let bytes = self.temps[t].bytes();
                        let what = format!("an intermediate of operator {i} (`{}`)", op.name);
                        let p = scratch.alloc(bytes, &what).map_err(stream_err)?;
                        temps[t] = Some(p);
                        (p, bytes)
                    }
                    Slot::Output(k) => (outputs[k], self.outputs[k].bytes()),
                    Slot::View { .. } => continue,
                    Slot::Input(_) => unreachable!("operator outputs are never placed in inputs"),
                };
                if !written && bytes > 0 {
                    // Elements no worker writes read as zero, as in a fresh output.
                    // SAFETY: the block holds `bytes` bytes (the caller's contract, or scratch
                    // just taken); stream-ordered.
                    unsafe { result::memset_d8_async(ptr, 0, bytes, cu_stream) }
                        .map_err(driver("zeroing an output"))?;
                }
            }
            let ptr = |slot: Slot| match slot {
                Slot::Input(g) => inputs[g],
                Slot::Output(k) => outputs[k],
                Slot::Temp(t) => temps[t].unwrap_or(0),
                Slot::View { base, offset, .. } => temps[base].map_or(0, |p| p + offset as u64),
            };
            let ins: Vec<u64> = self.dag.operator_inputs[i]
                .inputs
                .iter()
                .map(|v| ptr(self.slot_of(v)))
                .collect();
            let outs: Vec<u64> = self.op_slots[i].iter().map(|&s| ptr(s)).collect();
            match (&kernels[i], functions[i]) {
                _ if self.viewed[i] => {}
                (Kernel::CudaGemm(g), _) => {
                    // SAFETY: the buffers are the operator's, of its types (the plan's wiring
                    // and the caller's contract); the workspace is this call's.
                    unsafe {
                        g.launch_on_stream(
                            op,
                            &ins,
                            outs[0],
                            device,
                            stream,
                            workspace,
                            call.capturing(),
                        )
                    }?
                }
                (Kernel::Cuda(k), Some(function)) => {
                    let symbols = self.symbols_for(k.symbol_count());
                    let workers = sizes::product(&k.workgroup(symbols)?);
                    if workers > 0 {
                        let mut args = KernelArgs::new(&ins, &outs, symbols, faults.slot(i));
                        let blocks = grid(
                            workers,
                            k.workers_per_block(),
                            k.block_size(),
                            gpu.multiprocessors,
                        );
                        // SAFETY: the kernel of `k` loaded into this device's context, with
                        // the parameters the generated kernel declares (`KernelArgs`), on
                        // blocks of the operator's types (as for the device run).
                        unsafe { args.launch(function, blocks, k.block_size(), stream, device) }
                            .map_err(stream_err)?;
                    }
                }
                _ => {}
            }
            for &t in &self.freed_after[i] {
                if let Some(p) = temps[t].take() {
                    scratch.free(p, self.temps[t].bytes()).map_err(stream_err)?;
                }
            }
        }
        for &(k, slot) in &self.copies {
            let src = match slot {
                Slot::Input(g) => inputs[g],
                Slot::Output(j) => outputs[j],
                Slot::Temp(_) | Slot::View { .. } => {
                    unreachable!("a copied output's source is an input or output")
                }
            };
            let bytes = self.outputs[k].bytes();
            if bytes > 0 {
                // SAFETY: both blocks hold the output's type (the caller's contract).
                unsafe { result::memcpy_dtod_async(outputs[k], src, bytes, cu_stream) }
                    .map_err(driver("copying an output"))?;
            }
        }
        Ok(())
    }

    /// Loads the graph's kernels onto the call's device (what the first
    /// [`Plan::run_on_stream`] there does); refused while the stream captures.
    pub fn prepare_stream(
        &self,
        kernels: &[Kernel],
        call: &OpenCall<'_>,
    ) -> Result<(), RunFailure> {
        for (i, kernel) in kernels.iter().enumerate() {
            if let Kernel::Cuda(k) = kernel {
                if !self.viewed[i] {
                    call.gpu.function(k, call.stream()).map_err(stream_err)?;
                }
            }
        }
        Ok(())
    }

    /// The fault a status taken from a [`FaultBlock`] holds, as the error naming its operator
    /// and worker (`kernels` of the graph that ran; the symbol values of the run that recorded
    /// it).
    pub fn stream_fault(kernels: &[Kernel], taken: &TakenFault) -> Result<(), RunFailure> {
        let (symbols, slot, status) = taken;
        if let Some(Kernel::Cuda(k)) = kernels.get(*slot) {
            let values = symbols.get(..k.symbol_count()).unwrap_or(symbols);
            k.check_status(&k.workgroup(values)?, status)?;
        }
        Ok(())
    }
}

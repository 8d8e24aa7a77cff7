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
use ovl_core::ir;

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
        let gemm = kernels.iter().any(|k| matches!(k, Kernel::CudaGemm(_)));
        let mut ops = Driver {
            call,
            faults,
            functions: &functions,
            scratch: call.scratch(),
            workspace: 0,
        };
        if gemm {
            ops.workspace = ops.alloc(CublasGemm::STREAM_WORKSPACE_BYTES, &|| {
                "cuBLAS' workspace".into()
            })?;
        }
        // SAFETY: forwarded (the caller's contract); `ops` launches this plan's kernels.
        let queued = unsafe { self.queue_stream(kernels, inputs, outputs, &mut ops) };
        let freed = match gemm {
            true => ops.free(ops.workspace, CublasGemm::STREAM_WORKSPACE_BYTES),
            false => Ok(()),
        };
        queued.and(freed)
    }

    /// The operators and copies of [`Plan::run_on_stream`], in order, through `ops`:
    /// intermediates taken from the scratch before their producer, given back after their last
    /// reader, and whatever is still held given back at the end, error or not.
    ///
    /// # Safety
    /// As [`Plan::run_on_stream`].
    unsafe fn queue_stream<O: StreamOps>(
        &self,
        kernels: &[Kernel],
        inputs: &[u64],
        outputs: &[u64],
        ops: &mut O,
    ) -> Result<(), RunFailure> {
        let mut temps: Vec<Option<u64>> = vec![None; self.temps.len()];
        let queued = self.queue_operators(kernels, inputs, outputs, ops, &mut temps);
        let mut freed = Ok(());
        for (t, p) in temps.iter().enumerate() {
            if let Some(p) = p {
                freed = freed.and(ops.free(*p, self.temps[t].bytes()));
            }
        }
        queued.and(freed)
    }

    fn queue_operators<O: StreamOps>(
        &self,
        kernels: &[Kernel],
        inputs: &[u64],
        outputs: &[u64],
        ops: &mut O,
        temps: &mut [Option<u64>],
    ) -> Result<(), RunFailure> {
        for (i, op) in self.dag.operators.iter().enumerate() {
            for (j, slot) in self.op_slots[i].iter().enumerate() {
                let written = self.written(i).get(j).copied().unwrap_or(false);
                let (ptr, bytes) = match *slot {
                    Slot::Temp(t) => {
                        let bytes = self.temps[t].bytes();
                        let what = || format!("an intermediate of operator {i} (`{}`)", op.name);
                        let p = ops.alloc(bytes, &what)?;
                        temps[t] = Some(p);
                        (p, bytes)
                    }
                    Slot::Output(k) => (outputs[k], self.outputs[k].bytes()),
                    Slot::View { .. } => continue,
                    Slot::Input(_) => unreachable!("operator outputs are never placed in inputs"),
                };
                if !written && bytes > 0 {
                    // Elements no worker writes read as zero, as in a fresh output.
                    ops.zero(ptr, bytes)?;
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
            if !self.viewed[i] {
                let symbols = match &kernels[i] {
                    Kernel::Cuda(k) => self.symbols_for(k.symbol_count()),
                    _ => &self.symbols,
                };
                ops.operator(i, &kernels[i], op, symbols, &ins, &outs)?;
            }
            for &t in &self.freed_after[i] {
                if let Some(p) = temps[t].take() {
                    ops.free(p, self.temps[t].bytes())?;
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
                ops.copy(outputs[k], src, bytes)?;
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

/// What queuing a run on a stream does, one step at a time: the driver's calls on the caller's
/// stream ([`Driver`]), or a record of them in the tests.
trait StreamOps {
    /// A scratch block of `bytes` bytes for what `what()` names (in an error).
    fn alloc(&mut self, bytes: usize, what: &dyn Fn() -> String) -> Result<u64, RunFailure>;
    /// Gives a scratch block back (in stream order).
    fn free(&mut self, ptr: u64, bytes: usize) -> Result<(), RunFailure>;
    /// Zeroes `bytes` bytes at `ptr`.
    fn zero(&mut self, ptr: u64, bytes: usize) -> Result<(), RunFailure>;
    /// Copies `bytes` bytes from `src` to `dst`.
    fn copy(&mut self, dst: u64, src: u64, bytes: usize) -> Result<(), RunFailure>;
    /// Queues operator `i` (`op`, run by `kernel`) on `ins` into `outs`.
    fn operator(
        &mut self,
        i: usize,
        kernel: &Kernel,
        op: &ir::ExpressionDag,
        symbols: &[u64],
        ins: &[u64],
        outs: &[u64],
    ) -> Result<(), RunFailure>;
}

/// The driver's calls on an opened call's stream.
struct Driver<'c, 's> {
    call: &'c OpenCall<'s>,
    faults: &'c FaultBlock,
    /// Per operator: its kernel loaded into the call's device (compiled kernels only).
    functions: &'c [Option<sys::CUfunction>],
    scratch: CallScratch<'c>,
    /// cuBLAS' workspace for this call (when the graph has products).
    workspace: u64,
}

impl Driver<'_, '_> {
    fn driver(&self, action: &'static str) -> impl Fn(cudarc::driver::DriverError) -> RunFailure {
        let device = self.call.device();
        move |e| stream_err(StreamError::driver(device, action, e))
    }
}

impl StreamOps for Driver<'_, '_> {
    fn alloc(&mut self, bytes: usize, what: &dyn Fn() -> String) -> Result<u64, RunFailure> {
        self.scratch.alloc(bytes, what).map_err(stream_err)
    }

    fn free(&mut self, ptr: u64, bytes: usize) -> Result<(), RunFailure> {
        self.scratch.free(ptr, bytes).map_err(stream_err)
    }

    fn zero(&mut self, ptr: u64, bytes: usize) -> Result<(), RunFailure> {
        let stream = self.call.stream() as sys::CUstream;
        // SAFETY: the block holds `bytes` bytes (an output: the caller's contract; scratch:
        // just taken); stream-ordered.
        unsafe { result::memset_d8_async(ptr, 0, bytes, stream) }
            .map_err(self.driver("zeroing an output"))
    }

    fn copy(&mut self, dst: u64, src: u64, bytes: usize) -> Result<(), RunFailure> {
        let stream = self.call.stream() as sys::CUstream;
        // SAFETY: both blocks hold the output's type (the caller's contract).
        unsafe { result::memcpy_dtod_async(dst, src, bytes, stream) }
            .map_err(self.driver("copying an output"))
    }

    fn operator(
        &mut self,
        i: usize,
        kernel: &Kernel,
        op: &ir::ExpressionDag,
        symbols: &[u64],
        ins: &[u64],
        outs: &[u64],
    ) -> Result<(), RunFailure> {
        let (stream, device) = (self.call.stream(), self.call.device());
        match (kernel, self.functions.get(i).copied().flatten()) {
            // SAFETY: the buffers are the operator's, of its types (the plan's wiring and the
            // caller's contract); the workspace is this call's.
            (Kernel::CudaGemm(g), _) => unsafe {
                g.launch_on_stream(
                    op,
                    ins,
                    outs[0],
                    device,
                    stream,
                    self.workspace,
                    self.call.capturing(),
                )
            }?,
            (Kernel::Cuda(k), Some(function)) => {
                let workers = sizes::product(&k.workgroup(symbols)?);
                if workers > 0 {
                    let mut args = KernelArgs::new(ins, outs, symbols, self.faults.slot(i));
                    let (per_block, block) = (k.workers_per_block(), k.block_size());
                    let blocks = grid(workers, per_block, block, self.call.gpu.multiprocessors);
                    // SAFETY: the kernel of `k` loaded into this device's context, with the
                    // parameters the generated kernel declares (`KernelArgs`), on blocks of
                    // the operator's types (as for the device run).
                    unsafe { args.launch(function, blocks, block, stream, device) }
                        .map_err(stream_err)?;
                }
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ir::value_ref::Source;
    use std::sync::Arc;

    /// Records the steps, handing out scratch blocks at 0x1000, 0x2000, ...
    #[derive(Default)]
    struct Record {
        steps: Vec<String>,
        next: u64,
        held: Vec<u64>,
    }

    impl StreamOps for Record {
        fn alloc(&mut self, bytes: usize, _what: &dyn Fn() -> String) -> Result<u64, RunFailure> {
            self.next += 0x1000;
            self.held.push(self.next);
            self.steps
                .push(format!("alloc {bytes} -> {:#x}", self.next));
            Ok(self.next)
        }
        fn free(&mut self, ptr: u64, _bytes: usize) -> Result<(), RunFailure> {
            assert!(
                self.held.contains(&ptr),
                "{ptr:#x} freed twice or never taken"
            );
            self.held.retain(|&p| p != ptr);
            self.steps.push(format!("free {ptr:#x}"));
            Ok(())
        }
        fn zero(&mut self, ptr: u64, bytes: usize) -> Result<(), RunFailure> {
            self.steps.push(format!("zero {ptr:#x} {bytes}"));
            Ok(())
        }
        fn copy(&mut self, dst: u64, src: u64, bytes: usize) -> Result<(), RunFailure> {
            self.steps
                .push(format!("copy {dst:#x} <- {src:#x} {bytes}"));
            Ok(())
        }
        fn operator(
            &mut self,
            i: usize,
            _kernel: &Kernel,
            _op: &ir::ExpressionDag,
            _symbols: &[u64],
            ins: &[u64],
            outs: &[u64],
        ) -> Result<(), RunFailure> {
            self.steps.push(format!("op {i} {ins:x?} -> {outs:x?}"));
            if i == 1 && ins.contains(&0xbad) {
                return Err(Mismatch::OutputCount {
                    outputs: 0,
                    arrays: 0,
                }
                .into());
            }
            Ok(())
        }
    }

    fn input(g: u32) -> ir::ValueRef {
        ir::ValueRef {
            source: Some(Source::GraphInput(g)),
        }
    }

    fn output_of(operator: u32) -> ir::ValueRef {
        ir::ValueRef {
            source: Some(Source::OpOutput(ir::OperatorOutput {
                operator,
                output: 0,
            })),
        }
    }

    /// t0 = a + b; t1 = t0 + a; y = t1 + t0; outputs y, y again, and b: two intermediates freed
    /// after their last reader, a repeated output and a passed-through input copied.
    fn chain() -> Plan {
        let add = ovl_ir::fixtures::add_2d(3, 5);
        let dag = ir::OperatorDag {
            symbols: Vec::new(),
            version: ovl_ir::IR_VERSION,
            inputs: add.inputs.clone(),
            operator_inputs: [
                [input(0), input(1)],
                [output_of(0), input(0)],
                [output_of(1), output_of(0)],
            ]
            .into_iter()
            .map(|inputs| ir::OperatorInputs {
                inputs: inputs.to_vec(),
            })
            .collect(),
            outputs: vec![output_of(2), output_of(2), input(1)],
            operators: vec![add.clone(), add.clone(), add],
        };
        Plan::new(Arc::new(dag)).unwrap()
    }

    fn kernels() -> Vec<Kernel> {
        (0..3)
            .map(|_| Kernel::Interpreter {
                max_while_iterations: 0,
                reduction_order: Default::default(),
            })
            .collect()
    }

    #[test]
    fn intermediates_live_from_their_producer_to_their_last_reader() {
        let plan = chain();
        let mut ops = Record::default();
        // SAFETY: nothing is run: the steps are recorded.
        unsafe { plan.queue_stream(&kernels(), &[0xa, 0xb], &[0x10, 0x20, 0x30], &mut ops) }
            .unwrap();
        assert_eq!(
            ops.steps,
            [
                "alloc 60 -> 0x1000",
                "op 0 [a, b] -> [1000]",
                "alloc 60 -> 0x2000",
                "op 1 [1000, a] -> [2000]",
                "op 2 [2000, 1000] -> [10]",
                "free 0x1000",
                "free 0x2000",
                "copy 0x20 <- 0x10 60",
                "copy 0x30 <- 0xb 60",
            ]
        );
        assert!(ops.held.is_empty());
        assert_eq!(plan.stream_scratch_bytes(&kernels()), 512);
    }

    #[test]
    fn a_failed_step_still_gives_every_block_back() {
        let plan = chain();
        let mut ops = Record::default();
        // SAFETY: nothing is run: the steps are recorded.
        let r =
            unsafe { plan.queue_stream(&kernels(), &[0xbad, 0xb], &[0x10, 0x20, 0x30], &mut ops) };
        assert!(r.is_err());
        assert!(ops.held.is_empty(), "{:?}", ops.steps);
        assert_eq!(ops.steps.last().map(String::as_str), Some("free 0x2000"));
    }
}

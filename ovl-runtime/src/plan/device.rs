//! Running a plan on device tensors: the GPU half of the runner.

use super::{Input, Kernel, Output, Plan, RunFailure, Slot};
use crate::cuda::{DeviceError, DeviceTensor, StatusBlock};
use crate::error::Mismatch;
use ovl_core::{DeviceData, HostTensor};

/// Device data of a lazy graph (`ovl::from_device`) as a device tensor: the tensor itself (it
/// shares the memory), or, for data some other device holds, a copy through the host.
pub fn on_device(data: &dyn DeviceData) -> Result<DeviceTensor, DeviceError> {
    match data.as_any().downcast_ref::<DeviceTensor>() {
        Some(t) => Ok(t.clone()),
        None => DeviceTensor::upload(&on_host(data)?),
    }
}

/// Device data of a lazy graph copied to the host, for a backend that runs there.
pub fn on_host(data: &dyn DeviceData) -> Result<HostTensor, DeviceError> {
    match data.as_any().downcast_ref::<DeviceTensor>() {
        Some(t) => t.to_host(),
        None => data.to_host().map_err(|e| DeviceError::Driver {
            action: "copying device data to the host".into(),
            message: e.to_string(),
        }),
    }
}

/// Device runs against the recording of a CUDA graph: the process has one stream, and work
/// another thread queues on it while a graph is recorded would be recorded with it. Runs share
/// the lock; a recording holds it alone.
pub(super) static STREAM: std::sync::RwLock<()> = std::sync::RwLock::new(());

impl Plan {
    /// Whether a run of `kernels` from host data is better made on the device as a whole: every
    /// operator that runs a worker is a GPU kernel (and some operator is).
    pub(super) fn all_on_gpu(&self, kernels: &[Kernel]) -> bool {
        let mut some = false;
        for (kernel, op) in kernels.iter().zip(&self.dag.operators) {
            match kernel {
                Kernel::Cuda(_) | Kernel::CudaGemm(_) => some = true,
                _ if op.workgroup_shape.contains(&0) => {}
                _ => return false,
            }
        }
        some
    }

    /// A run from host buffers whose kernels are all on the GPU ([`Plan::all_on_gpu`]): the
    /// inputs are copied to the device once, the graph runs there as [`Plan::run_device`]
    /// (intermediates never leave the GPU), and the outputs are copied back once.
    ///
    /// # Safety
    /// As [`Plan::run`] (raw buffers hold their input's or output's bytes).
    pub(super) unsafe fn run_through_device(
        &self,
        kernels: &[Kernel],
        inputs: &[Input<'_>],
        outputs: &mut [Output<'_>],
    ) -> Result<(), RunFailure> {
        let uploads = inputs
            .iter()
            .zip(&self.inputs)
            .enumerate()
            .map(|(i, (input, sig))| {
                let ptr: *const u8 = match input {
                    Input::Host(t) => t.data.as_ptr(),
                    Input::Raw(p) => p.cast(),
                };
                // SAFETY: a host tensor checked against the input's type, or a raw buffer of
                // its bytes (the caller's contract).
                let bytes = unsafe { std::slice::from_raw_parts(ptr, sig.bytes()) };
                DeviceTensor::upload_bytes(
                    sig.dtype,
                    &sig.shape,
                    bytes,
                    &format!("graph input {i}"),
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        let results = self
            .outputs
            .iter()
            .enumerate()
            .map(|(k, sig)| DeviceTensor::uninit(sig.dtype, &sig.shape, &format!("output {k}")))
            .collect::<Result<Vec<_>, _>>()?;
        let ins: Vec<&DeviceTensor> = uploads.iter().collect();
        let outs: Vec<&DeviceTensor> = results.iter().collect();
        self.run_device(kernels, &ins, &outs)?;
        for ((output, result), sig) in outputs.iter_mut().zip(&results).zip(&self.outputs) {
            let ptr: *mut u8 = match output {
                Output::Host { tensor, .. } => tensor.data.as_mut_ptr(),
                Output::Raw(p) => p.cast(),
            };
            // SAFETY: a host tensor checked against the output's type, or a raw buffer of its
            // bytes that overlaps no other (the caller's contract).
            let bytes = unsafe { std::slice::from_raw_parts_mut(ptr, sig.bytes()) };
            result.download_into(bytes)?;
        }
        Ok(())
    }

    /// Runs the graph on device tensors (the facade's `Target::Cuda` kernels): `inputs[i]` is graph
    /// input `i`, `outputs[k]` receives requested output `k`. Everything stays on the GPU:
    /// intermediates come from the caching allocator and go back to it after their last
    /// reader, kernels are queued on the one stream without waiting, and the call waits only
    /// to read the fault statuses back when some kernel can fault (one copy of a few bytes per
    /// call). Tensors of another dtype or shape, an output sharing memory with another tensor
    /// passed, or a kernel not compiled for the GPU are errors that name them.
    pub fn run_device(
        &self,
        kernels: &[Kernel],
        inputs: &[&DeviceTensor],
        outputs: &[&DeviceTensor],
    ) -> Result<(), RunFailure> {
        self.check_device(kernels, inputs, outputs)?;
        let _shared = STREAM.read().unwrap_or_else(|p| p.into_inner());
        let statuses = StatusBlock::new(self.dag.operators.len())?;
        if self.queue_device(kernels, inputs, outputs, &statuses, None)? {
            self.check_statuses(kernels, &statuses)?;
        }
        Ok(())
    }

    /// Checks a device run's tensors and kernels (see [`Plan::run_device`]).
    pub fn check_device(
        &self,
        kernels: &[Kernel],
        inputs: &[&DeviceTensor],
        outputs: &[&DeviceTensor],
    ) -> Result<(), RunFailure> {
        if kernels.len() != self.dag.operators.len()
            || inputs.len() != self.inputs.len()
            || outputs.len() != self.outputs.len()
        {
            return Err(self.counts(true, kernels.len(), inputs.len(), outputs.len()));
        }
        for (i, (t, sig)) in inputs.iter().zip(&self.inputs).enumerate() {
            t.check(&format!("graph input {i}"), sig.dtype, &sig.shape)?;
        }
        for (k, (t, sig)) in outputs.iter().zip(&self.outputs).enumerate() {
            t.check(&format!("output {k}"), sig.dtype, &sig.shape)?;
            let shared = inputs
                .iter()
                .map(|t| t.ptr())
                .chain(
                    outputs
                        .iter()
                        .enumerate()
                        .filter(|&(j, _)| j != k)
                        .map(|(_, t)| t.ptr()),
                )
                .any(|p| p == t.ptr() && !t.is_empty());
            if shared {
                return Err(Mismatch::SharedDeviceMemory { output: k }.into());
            }
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

    /// Queues every operator of a checked device run on the stream; returns whether some kernel
    /// can fault (its status is then in `statuses`). With `keep` (a run recorded into a CUDA
    /// graph), intermediates are never given back to the allocator: one past its last reader
    /// goes into `keep` and is reused for a later intermediate of the same size, and every
    /// block used ends in `keep`, for the graph to own.
    pub(super) fn queue_device(
        &self,
        kernels: &[Kernel],
        inputs: &[&DeviceTensor],
        outputs: &[&DeviceTensor],
        statuses: &StatusBlock,
        mut keep: Option<&mut Vec<DeviceTensor>>,
    ) -> Result<bool, RunFailure> {
        let mut temps: Vec<Option<DeviceTensor>> = vec![None; self.temps.len()];
        let mut can_fault = false;
        for (i, op) in self.dag.operators.iter().enumerate() {
            for (j, slot) in self.op_slots[i].iter().enumerate() {
                let written = self.written(i).get(j).copied().unwrap_or(false);
                let t = match *slot {
                    Slot::Temp(t) => {
                        let sig = &self.temps[t];
                        let reused = keep.as_deref_mut().and_then(|pool| {
                            let k = pool.iter().position(|b| b.bytes() == sig.bytes())?;
                            pool.swap_remove(k).reinterpreted(sig.dtype, &sig.shape)
                        });
                        temps[t] = Some(match reused {
                            Some(block) => block,
                            None => {
                                let what =
                                    format!("an intermediate of operator {i} (`{}`)", op.name);
                                DeviceTensor::uninit(sig.dtype, &sig.shape, &what)?
                            }
                        });
                        temps[t].as_ref()
                    }
                    Slot::Output(k) => Some(outputs[k]),
                    Slot::View { .. } => None,
                    Slot::Input(_) => unreachable!("operator outputs are never placed in inputs"),
                };
                if let (Some(t), false) = (t, written) {
                    // Elements no worker writes read as zero, as in a fresh output.
                    t.fill_zero()?;
                }
            }
            let ptr = |slot: Slot| match slot {
                Slot::Input(g) => inputs[g].ptr(),
                Slot::Output(k) => outputs[k].ptr(),
                Slot::Temp(t) => temps[t].as_ref().map_or(0, |t| t.ptr()),
                Slot::View { base, offset, .. } => {
                    temps[base].as_ref().map_or(0, |t| t.ptr() + offset as u64)
                }
            };
            let ins: Vec<u64> = self.dag.operator_inputs[i]
                .inputs
                .iter()
                .map(|v| ptr(self.slot_of(v)))
                .collect();
            let outs: Vec<u64> = self.op_slots[i].iter().map(|&s| ptr(s)).collect();
            // SAFETY: both: every address is a live block of the type the operator declares
            // (graph inputs and outputs checked by `check_device`, intermediates allocated from
            // the plan's types, which `Plan::new` matched against the operators through the
            // wiring); the outputs are distinct from each other and from the inputs (a DAG, and
            // the sharing check). A GEMM writes its one output.
            match &kernels[i] {
                // Its outputs are read in place.
                _ if self.viewed[i] => {}
                // SAFETY: the buffers are the operator's, of its types (the plan's wiring).
                Kernel::CudaGemm(k) => unsafe { k.launch_device(op, &ins, outs[0]) }?,
                Kernel::Cuda(k) => {
                    // SAFETY: the buffers are the operator's, of its types (the plan's wiring).
                    unsafe {
                        k.launch_device(
                            &ins,
                            &outs,
                            self.symbols_for(k.symbol_count()),
                            statuses.slot(i),
                        )
                    }?;
                    can_fault |= k.can_fault();
                }
                _ => {}
            }
            for &t in &self.freed_after[i] {
                // Back to the allocator (work queued later on the stream may reuse it), or kept
                // for the graph being recorded.
                if let (Some(t), Some(pool)) = (temps[t].take(), keep.as_deref_mut()) {
                    pool.push(t);
                }
            }
        }
        if let Some(pool) = keep {
            pool.extend(temps.into_iter().flatten());
        }
        for &(k, slot) in &self.copies {
            let src = match slot {
                Slot::Input(g) => inputs[g],
                Slot::Output(j) => outputs[j],
                Slot::Temp(_) | Slot::View { .. } => {
                    unreachable!("a copied output's source is an input or output")
                }
            };
            outputs[k].copy_from(src)?;
        }
        Ok(can_fault)
    }

    /// Reads the fault statuses of a device run back (waits for the stream) and reports the
    /// first fault as an error naming its operator and worker.
    pub(super) fn check_statuses(
        &self,
        kernels: &[Kernel],
        statuses: &StatusBlock,
    ) -> Result<(), RunFailure> {
        let read = statuses.read()?;
        for (i, kernel) in kernels.iter().enumerate() {
            if let (Kernel::Cuda(k), Some(status)) = (kernel, read.get(i)) {
                let symbols = self.symbols_for(k.symbol_count());
                k.check_status(&k.workgroup(symbols)?, status)?;
            }
        }
        Ok(())
    }
}

//! Running a plan from host buffers: host tensors or memory the caller owns, operator by
//! operator on the CPU's kernels (or the interpreter, or GPU kernels through host copies when
//! timed), or as one device run when every kernel is on the GPU.

use super::{pointers::Pointers, scratch, Input, Kernel, Output, Plan, RunFailure, Slot};
use crate::error::Mismatch;
use crate::gemm::epilogue;
use ovl_core::interp;
use ovl_core::ir;
use ovl_core::{DType, HostTensor};
use std::ffi::c_void;
use std::time::{Duration, Instant};

impl Plan {
    /// Runs the graph once with host tensors only: safe, every buffer is checked.
    pub fn run_host(
        &self,
        kernels: &[Kernel],
        inputs: &[Input<'_>],
        outputs: &mut [Output<'_>],
        threads: usize,
        timings: Option<&mut Vec<Duration>>,
    ) -> Result<(), RunFailure> {
        let raw = inputs.iter().any(|i| matches!(i, Input::Raw(_)))
            || outputs.iter().any(|o| matches!(o, Output::Raw(_)));
        if raw {
            return Err(Mismatch::RawBuffers.into());
        }
        // SAFETY: no raw buffer is passed; host tensors are checked against their types.
        unsafe { self.run(kernels, inputs, outputs, threads, timings) }
    }

    /// Runs the graph once: `inputs[i]` is graph input `i`, `outputs[k]` receives requested
    /// output `k`. Outputs no worker writes in full are zero-filled first (unless known to be
    /// zero). When `timings` is given, each operator's time is appended (a GPU kernel's own
    /// time from CUDA events, else the host's wall clock).
    ///
    /// # Safety
    /// Every [`Input::Raw`] must point to the contiguous row-major elements of that graph
    /// input's type (bool: bytes 0 or 1), readable for the call; every [`Output::Raw`] to a
    /// writable buffer of that output's size that overlaps no other buffer passed. Host
    /// tensors need nothing: they are checked.
    pub unsafe fn run(
        &self,
        kernels: &[Kernel],
        inputs: &[Input<'_>],
        outputs: &mut [Output<'_>],
        threads: usize,
        mut timings: Option<&mut Vec<Duration>>,
    ) -> Result<(), RunFailure> {
        self.check_buffers(kernels, inputs, outputs)?;
        if timings.is_none() && self.all_on_gpu(kernels) {
            // SAFETY: the caller's contract, passed on.
            return unsafe { self.run_through_device(kernels, inputs, outputs) };
        }
        // Decided once per run: a GEMM deferred to its consumer must run there.
        let epilogue_mode = self.epilogue.unwrap_or_else(epilogue::mode);
        let mut temps: Vec<Option<HostTensor>> = vec![None; self.temps.len()];
        for (i, op) in self.dag.operators.iter().enumerate() {
            for (j, slot) in self.op_slots[i].iter().enumerate() {
                match *slot {
                    Slot::Temp(t) => {
                        let sig = &self.temps[t];
                        let overwritten = self.written(i).get(j).copied().unwrap_or(false);
                        temps[t] = Some(scratch::take(sig.dtype, &sig.shape, overwritten)?);
                    }
                    Slot::Output(k) => {
                        let zeroed = matches!(outputs[k], Output::Host { zeroed: true, .. });
                        if !zeroed && !self.written(i).get(j).copied().unwrap_or(false) {
                            // Elements no worker writes read as zero, as in a fresh output.
                            match &mut outputs[k] {
                                Output::Host { tensor, .. } => tensor.fill_zero(),
                                // SAFETY: the caller's buffer holds the output's bytes.
                                Output::Raw(p) => unsafe {
                                    std::ptr::write_bytes(
                                        p.cast::<u8>(),
                                        0,
                                        self.outputs[k].bytes(),
                                    )
                                },
                            }
                        }
                    }
                    Slot::View { .. } => {}
                    Slot::Input(_) => unreachable!("operator outputs are never placed in inputs"),
                }
            }
            // The clock is read only when timings are asked for (a small kernel runs in well
            // under a microsecond, and a call from TensorFlow asks for none).
            let start = timings.is_some().then(Instant::now);
            let wiring = &self.dag.operator_inputs[i].inputs;
            let pairable = |g: usize, c: usize| {
                matches!(
                    (&kernels[g], &kernels[c]),
                    (Kernel::Gemm(_), Kernel::Cpu(_))
                )
            };
            let gpu_time = if self.viewed[i] {
                // Its outputs are read in place.
                None
            } else if self.deferred[i].is_some_and(|c| pairable(i, c)) {
                // Runs at its consumer's turn, below.
                None
            } else if let (Some(g), Kernel::Cpu(k)) =
                (self.epilogue_of[i].filter(|&g| pairable(g, i)), &kernels[i])
            {
                let g_wiring = &self.dag.operator_inputs[g].inputs;
                let (g_ins, g_outs) = self.pointers(g, g_wiring, inputs, outputs, &mut temps);
                let (ins, outs) = self.pointers(i, wiring, inputs, outputs, &mut temps);
                // SAFETY: as for the two kernels below, run one after the other: C is written
                // by the GEMM and read by the consumer, rows by rows.
                unsafe {
                    epilogue::run_pair(
                        &self.dag.operators[g],
                        (&g_ins, &g_outs),
                        k,
                        (&ins, &outs),
                        self.symbols_for(k.symbol_count()),
                        threads,
                        epilogue_mode,
                    )
                }?;
                None
            } else {
                match &kernels[i] {
                    // SAFETY: both: every pointer names a buffer of the type the operator
                    // declares (host tensors checked, raw ones by the caller's contract,
                    // intermediates allocated from the plan's types, which `Plan::new` matched
                    // against the operators through the wiring); the buffers written are distinct
                    // from those read (a DAG). A GEMM reads its sizes from `op`, the planned
                    // (concrete) operator whose types the buffers have.
                    Kernel::Cpu(k) => {
                        let (ins, outs) = self.pointers(i, wiring, inputs, outputs, &mut temps);
                        // SAFETY: the buffers are the operator's, of its types (the plan's wiring).
                        unsafe {
                            k.run_raw(&ins, &outs, self.symbols_for(k.symbol_count()), threads)
                        }?;
                        None
                    }
                    Kernel::Gemm(k) => {
                        let (ins, outs) = self.pointers(i, wiring, inputs, outputs, &mut temps);
                        // SAFETY: the buffers are the operator's, of its types (the plan's wiring).
                        unsafe { k.run(op, &ins, &outs, threads) }?;
                        None
                    }
                    kernel => {
                        // The interpreter and the CUDA runtime take host tensors: this operator's
                        // outputs are moved out of their slots and back.
                        let taken: Vec<Result<HostTensor, ovl_core::AllocError>> = self.op_slots[i]
                            .iter()
                            .map(|&slot| self.take_output(slot, outputs, &mut temps))
                            .collect();
                        let owned: Result<Vec<Option<HostTensor>>, _> = wiring
                            .iter()
                            .map(|v| self.raw_copy(self.slot_of(v), inputs, outputs, &temps))
                            .collect();
                        if let Some(e) = taken.iter().find_map(|t| t.as_ref().err()).cloned() {
                            // Out of memory: the buffers taken go back where they were.
                            for (&slot, t) in self.op_slots[i].iter().zip(taken) {
                                if let Ok(t) = t {
                                    self.put_output(slot, t, outputs, &mut temps);
                                }
                            }
                            return Err(e.into());
                        }
                        let mut outs: Vec<HostTensor> = taken.into_iter().flatten().collect();
                        let owned = match owned {
                            Ok(owned) => owned,
                            Err(e) => {
                                for (&slot, t) in self.op_slots[i].iter().zip(outs) {
                                    self.put_output(slot, t, outputs, &mut temps);
                                }
                                return Err(e.into());
                            }
                        };
                        let ins: Vec<&HostTensor> = wiring
                            .iter()
                            .zip(&owned)
                            .map(|(v, own)| match own {
                                Some(t) => t,
                                None => self.host_ref(self.slot_of(v), inputs, outputs, &temps),
                            })
                            .collect();
                        let result: Result<Option<Duration>, RunFailure> = match kernel {
                            Kernel::Cuda(k) => k
                                .run(&ins, &mut outs, self.symbols_for(k.symbol_count()))
                                .map(Some)
                                .map_err(Into::into),
                            Kernel::CudaGemm(k) => {
                                k.run(op, &ins, &mut outs).map(Some).map_err(Into::into)
                            }
                            Kernel::Interpreter {
                                max_while_iterations,
                                reduction_order,
                            } => interp::interpret_with(
                                op,
                                &ins,
                                &mut outs,
                                &interp::InterpOptions {
                                    threads: None,
                                    max_while_iterations: *max_while_iterations,
                                    reduction_order: *reduction_order,
                                },
                            )
                            .map(|()| None)
                            .map_err(Into::into),
                            Kernel::Cpu(_) | Kernel::Gemm(_) => {
                                unreachable!("C++ and library kernels take raw pointers")
                            }
                        };
                        drop(ins);
                        for (&slot, t) in self.op_slots[i].iter().zip(outs) {
                            self.put_output(slot, t, outputs, &mut temps);
                        }
                        result?
                    }
                }
            };
            if let (Some(t), Some(start)) = (timings.as_deref_mut(), start) {
                t.push(gpu_time.unwrap_or_else(|| start.elapsed()));
            }
            for &t in &self.freed_after[i] {
                if let Some(t) = temps[t].take() {
                    scratch::give(t);
                }
            }
        }
        for &(k, slot) in &self.copies {
            let src = self.read_ptr(slot, inputs, outputs, &temps);
            let dst = write_ptr(Slot::Output(k), outputs, &mut temps);
            // SAFETY: both hold outputs[k]'s bytes (the plan's types), and they are distinct
            // buffers: an output is never its own source.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    src.cast::<u8>(),
                    dst.cast::<u8>(),
                    self.outputs[k].bytes(),
                )
            };
        }
        Ok(())
    }

    fn check_buffers(
        &self,
        kernels: &[Kernel],
        inputs: &[Input<'_>],
        outputs: &[Output<'_>],
    ) -> Result<(), RunFailure> {
        if kernels.len() != self.dag.operators.len()
            || inputs.len() != self.inputs.len()
            || outputs.len() != self.outputs.len()
        {
            return Err(self.counts(false, kernels.len(), inputs.len(), outputs.len()));
        }
        for (i, (input, sig)) in inputs.iter().zip(&self.inputs).enumerate() {
            if let Input::Host(t) = input {
                if !sig.fits(t) {
                    return Err(Mismatch::Input {
                        input: i,
                        given: format!("{}{:?}", t.dtype(), t.shape),
                        wanted: sig.to_string(),
                    }
                    .into());
                }
            }
        }
        for (k, (output, sig)) in outputs.iter().zip(&self.outputs).enumerate() {
            if let Output::Host { tensor, .. } = output {
                if !sig.fits(tensor) {
                    return Err(Mismatch::Output {
                        output: k,
                        given: format!("{}{:?}", tensor.dtype(), tensor.shape),
                        wanted: sig.to_string(),
                    }
                    .into());
                }
            }
        }
        Ok(())
    }

    /// The addresses of operator `i`'s inputs (`wiring`) and outputs, on the stack for the
    /// common case of few tensors (no allocation per run), for a kernel on raw buffers.
    fn pointers(
        &self,
        i: usize,
        wiring: &[ir::ValueRef],
        inputs: &[Input<'_>],
        outputs: &mut [Output<'_>],
        temps: &mut [Option<HostTensor>],
    ) -> (Pointers<*const c_void>, Pointers<*mut c_void>) {
        let mut ins = Pointers::new(wiring.len(), std::ptr::null());
        for (p, v) in ins.iter_mut().zip(wiring) {
            *p = self.read_ptr(self.slot_of(v), inputs, outputs, temps);
        }
        let mut outs = Pointers::new(self.op_slots[i].len(), std::ptr::null_mut());
        for (p, &slot) in outs.iter_mut().zip(&self.op_slots[i]) {
            *p = write_ptr(slot, outputs, temps);
        }
        (ins, outs)
    }

    fn read_ptr(
        &self,
        slot: Slot,
        inputs: &[Input<'_>],
        outputs: &[Output<'_>],
        temps: &[Option<HostTensor>],
    ) -> *const c_void {
        match slot {
            Slot::Input(g) => match inputs[g] {
                Input::Host(t) => t.data.as_ptr().cast(),
                Input::Raw(p) => p,
            },
            Slot::Output(k) => match &outputs[k] {
                Output::Host { tensor, .. } => tensor.data.as_ptr().cast(),
                Output::Raw(p) => p.cast_const(),
            },
            Slot::Temp(t) => temp(temps, t).data.as_ptr().cast(),
            Slot::View { base, offset, .. } => {
                temp(temps, base).data.as_ptr().wrapping_add(offset).cast()
            }
        }
    }

    /// A copy of data in raw memory (a raw input, a raw output read by a later operator, a
    /// view) as a host tensor, for kernels that take host tensors.
    fn raw_copy(
        &self,
        slot: Slot,
        inputs: &[Input<'_>],
        outputs: &[Output<'_>],
        temps: &[Option<HostTensor>],
    ) -> Result<Option<HostTensor>, ovl_core::AllocError> {
        let (p, sig) = match slot {
            Slot::View { own, .. } => (
                self.read_ptr(slot, inputs, outputs, temps),
                &self.temps[own],
            ),
            Slot::Input(g) => match inputs[g] {
                Input::Raw(p) => (p, &self.inputs[g]),
                Input::Host(_) => return Ok(None),
            },
            Slot::Output(k) => match &outputs[k] {
                Output::Raw(p) => (p.cast_const(), &self.outputs[k]),
                Output::Host { .. } => return Ok(None),
            },
            Slot::Temp(_) => return Ok(None),
        };
        let mut t = HostTensor::try_zeros(sig.dtype, &sig.shape)?;
        // SAFETY: the caller's buffer holds the input's bytes (the contract of `run`).
        unsafe { std::ptr::copy_nonoverlapping(p.cast::<u8>(), t.data.as_mut_ptr(), sig.bytes()) };
        Ok(Some(t))
    }

    fn host_ref<'b>(
        &self,
        slot: Slot,
        inputs: &[Input<'b>],
        outputs: &'b [Output<'_>],
        temps: &'b [Option<HostTensor>],
    ) -> &'b HostTensor {
        match slot {
            Slot::Input(g) => match inputs[g] {
                Input::Host(t) => t,
                Input::Raw(_) => unreachable!("raw inputs are copied first"),
            },
            Slot::Output(k) => match &outputs[k] {
                Output::Host { tensor, .. } => tensor,
                Output::Raw(_) => unreachable!("raw outputs are copied first"),
            },
            Slot::Temp(t) => temp(temps, t),
            Slot::View { .. } => unreachable!("views are copied first"),
        }
    }

    /// Moves an operator output's buffer out of its slot (a fresh tensor for raw memory).
    fn take_output(
        &self,
        slot: Slot,
        outputs: &mut [Output<'_>],
        temps: &mut [Option<HostTensor>],
    ) -> Result<HostTensor, ovl_core::AllocError> {
        Ok(match slot {
            Slot::Output(k) => match &mut outputs[k] {
                Output::Host { tensor, .. } => std::mem::replace(*tensor, empty()),
                Output::Raw(p) => {
                    let sig = &self.outputs[k];
                    let mut t = HostTensor::try_zeros(sig.dtype, &sig.shape)?;
                    // SAFETY: the caller's buffer holds the output's bytes (maybe zero-filled
                    // above: the kernel sees what a fresh output holds).
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            p.cast_const().cast::<u8>(),
                            t.data.as_mut_ptr(),
                            sig.bytes(),
                        )
                    };
                    t
                }
            },
            Slot::Temp(t) => temps[t].take().expect("allocated before the operator runs"),
            Slot::Input(_) | Slot::View { .. } => {
                unreachable!("operator outputs run are never placed in inputs or views")
            }
        })
    }

    /// Puts a buffer taken by [`Plan::take_output`] back (copied into raw memory).
    fn put_output(
        &self,
        slot: Slot,
        t: HostTensor,
        outputs: &mut [Output<'_>],
        temps: &mut [Option<HostTensor>],
    ) {
        match slot {
            Slot::Output(k) => match &mut outputs[k] {
                Output::Host { tensor, .. } => **tensor = t,
                Output::Raw(p) => {
                    // SAFETY: the caller's buffer holds the output's bytes.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            t.data.as_ptr(),
                            p.cast::<u8>(),
                            self.outputs[k].bytes(),
                        )
                    }
                }
            },
            Slot::Temp(i) => temps[i] = Some(t),
            Slot::Input(_) | Slot::View { .. } => {
                unreachable!("operator outputs run are never placed in inputs or views")
            }
        }
    }
}

fn write_ptr(
    slot: Slot,
    outputs: &mut [Output<'_>],
    temps: &mut [Option<HostTensor>],
) -> *mut c_void {
    match slot {
        Slot::Output(k) => match &mut outputs[k] {
            Output::Host { tensor, .. } => tensor.data.as_mut_ptr().cast(),
            Output::Raw(p) => *p,
        },
        Slot::Temp(t) => temps[t]
            .as_mut()
            .expect("allocated before the operator runs")
            .data
            .as_mut_ptr()
            .cast(),
        Slot::Input(_) | Slot::View { .. } => {
            unreachable!("operator outputs run are never placed in inputs or views")
        }
    }
}

fn temp(temps: &[Option<HostTensor>], t: usize) -> &HostTensor {
    temps[t]
        .as_ref()
        .expect("an intermediate is alive from its producer to its last reader")
}

fn empty() -> HostTensor {
    HostTensor::zeros(DType::U8, &[0])
}

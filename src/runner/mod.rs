//! The one graph runner: runs an [`ir::OperatorDag`] operator by operator on prepared
//! kernels. `evaluate`, [`crate::compile`], [`crate::program::run_program`] and the TensorFlow
//! bridge's `DynamicLib` kernel all run graphs through it.
//!
//! A [`Plan`] is made once per graph: it decides where every value lives during a run (a graph
//! input, a requested output written in place, or an intermediate the run allocates and frees
//! after its last reader) and checks that the wiring is a topological order with matching
//! types. [`Plan::run`] then feeds it buffers: host tensors ([`Input::Host`], [`Output::Host`])
//! or memory the caller owns ([`Input::Raw`], [`Output::Raw`]: TensorFlow's tensors, used
//! without copies by the C++ kernels).

use crate::error::Mismatch;
use ovl_core::interp;
use ovl_core::ir::{self, value_ref::Source};
use ovl_core::{DType, HostTensor};
use std::ffi::c_void;
use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

mod device;
mod device_graph;
mod epilogue;
mod gemm;
#[cfg(target_arch = "x86_64")]
mod gemm_large;
#[cfg(target_arch = "x86_64")]
mod gemm_small;
mod pointers;
mod scratch;
mod sig;

pub use crate::error::run::{PlanError, RunFailure, Wiring};
pub(crate) use device::{on_device, on_host};
pub use device_graph::DeviceGraph;
pub use epilogue::{set_gemm_epilogue, EpilogueMode};
pub use gemm::GemmKernel;
use pointers::Pointers;
pub use sig::Sig;

/// One operator, ready to run on a backend.
pub enum Kernel {
    /// The reference interpreter (also what `Target::CudaValidate` runs after checking), with
    /// its bound on `while` iterations (0: none).
    Interpreter {
        /// [`crate::Options::max_while_iterations`], resolved.
        max_while_iterations: u64,
        /// The order reductions run in: the CUDA backend's for `Target::CudaValidate`, so that
        /// its values are the GPU's.
        reduction_order: ovl_core::cooperative::ReductionOrder,
    },
    /// A compiled C++ library.
    Cpu(Arc<ovl_codegen::CompiledOperator>),
    /// A CUDA module (copies in and out of the GPU per operator).
    Cuda(Arc<ovl_codegen::cuda::CudaOperator>),
    /// A library call run by cuBLAS on the GPU (a GEMM on f32 or f64).
    CudaGemm(ovl_codegen::cuda::CublasGemm),
    /// A library call run by its library on the CPU (a GEMM on f32 or f64).
    Gemm(GemmKernel),
}

/// The data of one graph input for a run.
#[derive(Clone, Copy)]
pub enum Input<'a> {
    /// A host tensor (checked against the input's type).
    Host(&'a HostTensor),
    /// Memory the caller owns: the row-major elements of the input's type (see [`Plan::run`]).
    Raw(*const c_void),
}

/// Where one requested output of a run goes.
pub enum Output<'a> {
    /// A host tensor of the output's type (checked). `zeroed`: it holds zeros already (a fresh
    /// tensor), so elements no worker writes need no clearing.
    Host {
        /// The tensor written.
        tensor: &'a mut HostTensor,
        /// Whether it is all zeros.
        zeroed: bool,
    },
    /// Memory the caller owns, writable for the output's size (see [`Plan::run`]).
    Raw(*mut c_void),
}

/// Where a value lives during a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    /// Graph input `i`.
    Input(usize),
    /// Requested output `k`, written in place.
    Output(usize),
    /// An intermediate the run allocates.
    Temp(usize),
}

/// Where every value of a graph lives during a run, decided once per graph.
pub struct Plan {
    dag: Arc<ir::OperatorDag>,
    inputs: Vec<Sig>,
    outputs: Vec<Sig>,
    /// Per operator and output.
    op_slots: Vec<Vec<Slot>>,
    temps: Vec<Sig>,
    /// Per operator, the intermediates to free after it: their last reader, or their producer
    /// when nothing reads them (found once, so that a long graph frees in linear time).
    freed_after: Vec<Vec<usize>>,
    /// Per operator: which outputs every run writes in full; worked out only when an output
    /// buffer that is not known to be zero needs it.
    written: Vec<OnceLock<Vec<bool>>>,
    /// Requested outputs not written in place (repeats, graph inputs): copied after the run.
    copies: Vec<(usize, Slot)>,
    /// The symbol values this plan runs with (see [`Plan::specialized`]); empty for a concrete
    /// graph.
    symbols: Vec<u64>,
    /// Per operator: the consumer a GEMM runs with as an epilogue pair (`epilogue`), when the
    /// GEMM is a library kernel and the consumer a compiled one: the GEMM then runs at the
    /// consumer's turn, its inputs kept alive until then.
    deferred: Vec<Option<usize>>,
    /// Per operator: the GEMM a consumer runs with.
    epilogue_of: Vec<Option<usize>>,
}

impl fmt::Debug for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plan")
            .field("operators", &self.dag.operators.len())
            .field("inputs", &self.inputs)
            .field("outputs", &self.outputs)
            .finish_non_exhaustive()
    }
}

impl Plan {
    /// Plans `dag`. Errors say what is malformed: an output or operator input without a
    /// source, operators out of topological order, an operator input of another type than
    /// its source (the kernels read raw buffers, so the types must agree exactly).
    pub fn new(dag: Arc<ir::OperatorDag>) -> Result<Plan, PlanError> {
        if ovl_core::symbolic::is_symbolic_graph(&dag) {
            return Err(PlanError::Symbolic {
                symbols: dag.symbols.join(", "),
            });
        }
        let inputs = dag
            .inputs
            .iter()
            .map(Sig::from_ir)
            .collect::<Result<Vec<_>, _>>()?;
        if dag.operator_inputs.len() != dag.operators.len() {
            return Err(Wiring::OperatorCount.into());
        }
        // Requested outputs are written in place where possible: the first request of each
        // operator output; other requests (repeats, graph inputs) are copied after the run.
        let mut placed: Vec<Vec<Option<Slot>>> = dag
            .operators
            .iter()
            .map(|op| vec![None; op.outputs.len()])
            .collect();
        let mut outputs = Vec::with_capacity(dag.outputs.len());
        let mut copies = Vec::new();
        for (k, out) in dag.outputs.iter().enumerate() {
            match &out.source {
                Some(Source::GraphInput(i)) => {
                    let sig = inputs.get(*i as usize).ok_or(Wiring::NoSuchGraphInput {
                        output: k,
                        input: *i,
                    })?;
                    outputs.push(sig.clone());
                    copies.push((k, Slot::Input(*i as usize)));
                }
                Some(Source::OpOutput(o)) => {
                    let t = dag
                        .operators
                        .get(o.operator as usize)
                        .and_then(|op| op.outputs.get(o.output as usize))
                        .ok_or(Wiring::NoSuchOutput {
                            output: k,
                            operator: o.operator,
                            of: o.output,
                        })?;
                    outputs.push(Sig::from_ir(t)?);
                    let slot = &mut placed[o.operator as usize][o.output as usize];
                    match slot {
                        None => *slot = Some(Slot::Output(k)),
                        Some(s) => copies.push((k, *s)),
                    }
                }
                None => return Err(Wiring::NoSource { output: k }.into()),
            }
        }
        let mut temps = Vec::new();
        let mut op_slots = Vec::with_capacity(dag.operators.len());
        for (op, slots) in dag.operators.iter().zip(placed) {
            let mut s = Vec::with_capacity(slots.len());
            for (t, slot) in op.outputs.iter().zip(slots) {
                s.push(match slot {
                    Some(slot) => slot,
                    None => {
                        temps.push(Sig::from_ir(t)?);
                        Slot::Temp(temps.len() - 1)
                    }
                });
            }
            op_slots.push(s);
        }
        // Operator inputs name earlier operators (a topological order), with the types the
        // operator reads.
        let mut temp_last_use = vec![0; temps.len()];
        for (i, wiring) in dag.operator_inputs.iter().enumerate() {
            if wiring.inputs.len() != dag.operators[i].inputs.len() {
                return Err(Wiring::InputCount {
                    operator: i,
                    name: dag.operators[i].name.clone(),
                    takes: dag.operators[i].inputs.len(),
                    wired: wiring.inputs.len(),
                }
                .into());
            }
            for (j, (v, want)) in wiring
                .inputs
                .iter()
                .zip(&dag.operators[i].inputs)
                .enumerate()
            {
                let got = match &v.source {
                    Some(Source::OpOutput(o)) if (o.operator as usize) < i => {
                        if let Some(Slot::Temp(t)) =
                            op_slots[o.operator as usize].get(o.output as usize)
                        {
                            temp_last_use[*t] = i;
                        }
                        dag.operators[o.operator as usize]
                            .outputs
                            .get(o.output as usize)
                            .ok_or(Wiring::NoSuchOperatorOutput {
                                operator: i,
                                input: j,
                            })?
                    }
                    Some(Source::GraphInput(g)) if (*g as usize) < dag.inputs.len() => {
                        &dag.inputs[*g as usize]
                    }
                    _ => return Err(PlanError::NotTopological),
                };
                if got != want {
                    return Err(PlanError::TypeMismatch {
                        operator: i,
                        name: dag.operators[i].name.clone(),
                    });
                }
            }
        }
        // A GEMM run at its consumer's turn reads its inputs then.
        let (deferred, epilogue_of) = epilogue::pairs(&dag);
        for (g, c) in deferred.iter().enumerate() {
            let Some(c) = *c else { continue };
            for v in &dag.operator_inputs[g].inputs {
                if let Some(Source::OpOutput(o)) = &v.source {
                    if let Some(Slot::Temp(t)) =
                        op_slots[o.operator as usize].get(o.output as usize)
                    {
                        temp_last_use[*t] = temp_last_use[*t].max(c);
                    }
                }
            }
        }
        let mut freed_after: Vec<Vec<usize>> = vec![Vec::new(); dag.operators.len()];
        for (i, slots) in op_slots.iter().enumerate() {
            for slot in slots {
                if let Slot::Temp(t) = *slot {
                    freed_after[temp_last_use[t].max(i)].push(t);
                }
            }
        }
        Ok(Plan {
            written: dag.operators.iter().map(|_| OnceLock::new()).collect(),
            dag,
            inputs,
            outputs,
            op_slots,
            temps,
            freed_after,
            copies,
            symbols: Vec::new(),
            deferred,
            epilogue_of,
        })
    }

    /// Plans a graph with symbolic sizes for the symbol values `symbols`: the plan places
    /// buffers of the specialized sizes, runs interpreter kernels on the specialized operators,
    /// and passes the values to compiled kernels, which were compiled once from the symbolic
    /// operators of the same graph.
    pub fn specialized(dag: &ir::OperatorDag, symbols: &[u64]) -> Result<Plan, PlanError> {
        let concrete = ovl_core::symbolic::specialize_graph(dag, symbols)
            .map_err(|e| PlanError::Symbols(Box::new(e)))?;
        let mut plan = Plan::new(Arc::new(concrete))?;
        plan.symbols = symbols.to_vec();
        Ok(plan)
    }

    /// The symbol values this plan runs with (empty for a concrete graph).
    pub fn symbols(&self) -> &[u64] {
        &self.symbols
    }

    /// The values a kernel taking `count` symbols gets (its symbols are the graph's first
    /// ones); all of them when it asks for more, which the kernel reports as an error.
    fn symbols_for(&self, count: usize) -> &[u64] {
        self.symbols.get(..count).unwrap_or(&self.symbols)
    }

    /// The graph planned.
    pub fn dag(&self) -> &ir::OperatorDag {
        &self.dag
    }

    /// The types of the graph inputs.
    pub fn inputs(&self) -> &[Sig] {
        &self.inputs
    }

    /// The types of the requested outputs.
    pub fn outputs(&self) -> &[Sig] {
        &self.outputs
    }

    fn written(&self, operator: usize) -> &[bool] {
        self.written[operator].get_or_init(|| {
            let op = &self.dag.operators[operator];
            if op.workgroup_shape.contains(&0) {
                // No worker runs: nothing is written.
                vec![false; op.outputs.len()]
            } else {
                ovl_core::written::written_everywhere(op)
            }
        })
    }

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
        let epilogue_mode = epilogue::mode();
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
            let gpu_time = if self.deferred[i].is_some_and(|c| pairable(i, c)) {
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
                    // SAFETY (both): every pointer names a buffer of the type the operator
                    // declares (host tensors checked, raw ones by the caller's contract,
                    // intermediates allocated from the plan's types, which `Plan::new` matched
                    // against the operators through the wiring); the buffers written are distinct
                    // from those read (a DAG). A GEMM reads its sizes from `op`, the planned
                    // (concrete) operator whose types the buffers have.
                    Kernel::Cpu(k) => {
                        let (ins, outs) = self.pointers(i, wiring, inputs, outputs, &mut temps);
                        unsafe {
                            k.run_raw(&ins, &outs, self.symbols_for(k.symbol_count()), threads)
                        }?;
                        None
                    }
                    Kernel::Gemm(k) => {
                        let (ins, outs) = self.pointers(i, wiring, inputs, outputs, &mut temps);
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
                            .map(|v| self.raw_copy(self.slot_of(v), inputs, outputs))
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

    /// The error for a run given `kernels`, `inputs` and `outputs` buffers (of the device when
    /// `device`) that the graph's counts do not match.
    fn counts(&self, device: bool, kernels: usize, inputs: usize, outputs: usize) -> RunFailure {
        Mismatch::Counts {
            device,
            kernels,
            inputs,
            outputs,
            graph_kernels: self.dag.operators.len(),
            graph_inputs: self.inputs.len(),
            graph_outputs: self.outputs.len(),
        }
        .into()
    }

    fn slot_of(&self, v: &ir::ValueRef) -> Slot {
        match &v.source {
            Some(Source::GraphInput(g)) => Slot::Input(*g as usize),
            Some(Source::OpOutput(o)) => self.op_slots[o.operator as usize][o.output as usize],
            None => unreachable!("Plan::new checked every operator input's source"),
        }
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
        }
    }

    /// A copy of data in raw memory (a raw input, or a raw output read by a later operator) as
    /// a host tensor, for kernels that take host tensors.
    fn raw_copy(
        &self,
        slot: Slot,
        inputs: &[Input<'_>],
        outputs: &[Output<'_>],
    ) -> Result<Option<HostTensor>, ovl_core::AllocError> {
        let (p, sig) = match slot {
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
            Slot::Input(_) => unreachable!("operator outputs are never placed in inputs"),
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
            Slot::Input(_) => unreachable!("operator outputs are never placed in inputs"),
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
        Slot::Input(_) => unreachable!("operator outputs are never placed in inputs"),
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

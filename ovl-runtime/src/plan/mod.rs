//! The one graph runner: runs an [`ir::OperatorDag`] operator by operator on prepared
//! kernels. The facade's `evaluate`, `compile` and `program::run_program` and the TensorFlow
//! bridge's `DynamicLib` kernel all run graphs through it.
//!
//! A [`Plan`] is made once per graph: it decides where every value lives during a run (a graph
//! input, a requested output written in place, or an intermediate the run allocates and frees
//! after its last reader) and checks that the wiring is a topological order with matching
//! types (here). [`Plan::run`] then feeds it buffers (`host.rs`): host tensors
//! ([`Input::Host`], [`Output::Host`]) or memory the caller owns ([`Input::Raw`],
//! [`Output::Raw`]: TensorFlow's tensors, used without copies by the C++ kernels);
//! [`Plan::run_device`] device tensors (`device.rs`, `device_graph.rs`).

use crate::error::Mismatch;
use ovl_core::ir::{self, value_ref::Source};
use ovl_core::HostTensor;
use std::ffi::c_void;
use std::fmt;
use std::sync::{Arc, OnceLock};

mod device;
mod device_graph;
mod host;
mod pointers;
pub mod scratch;
mod sig;
mod stream;
mod views;

pub use crate::error::{PlanError, RunFailure, Wiring};
#[allow(deprecated)]
pub use crate::gemm::epilogue::set_gemm_epilogue;
pub use crate::gemm::epilogue::EpilogueMode;
pub use crate::gemm::GemmKernel;
pub use device::{on_device, on_host};
pub use device_graph::DeviceGraph;
pub use sig::Sig;

/// One operator, ready to run on a backend.
pub enum Kernel {
    /// The reference interpreter (also what `Target::CudaValidate` runs after checking), with
    /// its bound on `while` iterations (0: none).
    Interpreter {
        /// The facade's `Options::max_while_iterations`, resolved.
        max_while_iterations: u64,
        /// The order reductions run in: the CUDA backend's for `Target::CudaValidate`, so that
        /// its values are the GPU's.
        reduction_order: ovl_core::cooperative::ReductionOrder,
    },
    /// A compiled C++ library.
    Cpu(Arc<crate::CompiledOperator>),
    /// A CUDA module (copies in and out of the GPU per operator).
    Cuda(Arc<crate::cuda::CudaOperator>),
    /// A library call run by cuBLAS on the GPU (a GEMM on f32 or f64).
    CudaGemm(crate::cuda::CublasGemm),
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
    /// Part of intermediate `base` at `offset` bytes, read in place (`views`); `own` is the
    /// intermediate it would have been (its type). Never written.
    View {
        base: usize,
        offset: usize,
        own: usize,
    },
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
    /// Per operator: whether its outputs are views of its input and it does not run (`views`).
    viewed: Vec<bool>,
    /// When GEMM epilogue pairs run as one step ([`Plan::with_epilogue`]); `None`: the
    /// process default (`OVL_GEMM_EPILOGUE`, else where it pays).
    epilogue: Option<EpilogueMode>,
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
        let viewed = views::place(&dag, &mut op_slots, &temps);
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
                        if let Some(Slot::Temp(t) | Slot::View { base: t, .. }) =
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
        let (deferred, epilogue_of) = crate::gemm::epilogue::pairs(&dag);
        for (g, c) in deferred.iter().enumerate() {
            let Some(c) = *c else { continue };
            for v in &dag.operator_inputs[g].inputs {
                if let Some(Source::OpOutput(o)) = &v.source {
                    if let Some(Slot::Temp(t) | Slot::View { base: t, .. }) =
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
            viewed,
            epilogue: None,
        })
    }

    /// This plan, its GEMM epilogue pairs run as `mode` says (`None`: the process default).
    pub fn with_epilogue(mut self, mode: Option<EpilogueMode>) -> Plan {
        self.epilogue = mode;
        self
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

    /// Whether operator `operator` runs no kernel, its outputs read in place from its input
    /// (the cut of a stacked product's result; `views`).
    pub fn reads_in_place(&self, operator: usize) -> bool {
        self.viewed.get(operator).copied().unwrap_or(false)
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
}

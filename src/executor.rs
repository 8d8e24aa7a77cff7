//! Runs an [`ir::OperatorDag`] operator by operator on a backend, passing buffers between them
//! and freeing each intermediate after its last use.

use crate::options::{Options, Target};
use crate::Error;
use ovl_core::ir::{self, value_ref::Source};
use ovl_core::lazy::Graph;
use ovl_core::{DType, HostTensor};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One operator, ready to run.
pub(crate) enum Kernel {
    Interpreter,
    Cpu(Arc<ovl_codegen::CompiledOperator>),
    Cuda(Arc<ovl_codegen::cuda::CudaOperator>),
}

/// Merges the graph's operators at `options.opt_level` (the graph inputs and the requested
/// outputs are unchanged), before kernels are prepared.
pub(crate) fn fuse(graph: Graph, options: &Options) -> Result<Graph, Error> {
    if options.opt_level.get() == 0 || graph.dag.operators.len() < 2 {
        return Ok(graph);
    }
    let dag = ovl_fuse::optimize_cached(graph.dag, options.opt_level)?;
    Ok(Graph {
        dag,
        inputs: graph.inputs,
    })
}

/// Compiles (or finds in the cache) every operator of the graph for `options.target`.
pub(crate) fn prepare(graph: &Graph, options: &Options) -> Result<Vec<Kernel>, Error> {
    graph
        .dag
        .operators
        .iter()
        .map(|op| match options.target {
            Target::Interpreter => Ok(Kernel::Interpreter),
            Target::Cpu => Ok(Kernel::Cpu(ovl_codegen::compile(
                op,
                &options.compile_options(),
            )?)),
            Target::Cuda => Ok(Kernel::Cuda(ovl_codegen::cuda::load(
                op,
                &options.cuda_options(),
            )?)),
            Target::CudaValidate => {
                // NVRTC runs in this process for every operator (the PTX is compiled again even
                // when cached), then ptxas checks it for each architecture.
                let cuda = options.cuda_options().with_force_recompile(true);
                for arch in options.validate_archs() {
                    ovl_codegen::cuda::validate(op, arch, &cuda)?;
                }
                Ok(Kernel::Interpreter)
            }
        })
        .collect()
}

fn tensor_type(t: &ir::TensorType) -> Result<(DType, Vec<usize>), Error> {
    let dtype = DType::from_ir(t.dtype)
        .ok_or_else(|| Error::Internal(format!("unsupported dtype {} in the graph", t.dtype)))?;
    Ok((dtype, t.shape.iter().map(|&d| d as usize).collect()))
}

/// Runs the graph once; returns the requested outputs in order. When `timings` is given, the
/// time of each operator is appended to it.
pub(crate) fn run(
    graph: &Graph,
    kernels: &[Kernel],
    options: &Options,
    timings: Option<&mut Vec<Duration>>,
) -> Result<Vec<HostTensor>, Error> {
    run_into(graph, &[], kernels, options, timings, Vec::new())
}

/// [`run`], writing requested output `k` into `provided[k]` when that buffer is given (it must
/// have the output's dtype and shape). The buffers come back in the result, in place. Graph
/// input `i` reads `fed[i]` when that is given (data for a placeholder), else the graph's own.
pub(crate) fn run_into(
    graph: &Graph,
    fed: &[Option<&HostTensor>],
    kernels: &[Kernel],
    options: &Options,
    mut timings: Option<&mut Vec<Duration>>,
    mut provided: Vec<Option<HostTensor>>,
) -> Result<Vec<HostTensor>, Error> {
    let dag = &graph.dag;
    let n = dag.operators.len();
    // The last operator that reads each operator output; requested outputs live to the end.
    let mut last_use: Vec<Vec<usize>> = dag
        .operators
        .iter()
        .map(|op| vec![0; op.outputs.len()])
        .collect();
    for (i, wiring) in dag.operator_inputs.iter().enumerate() {
        for input in &wiring.inputs {
            if let Some(Source::OpOutput(o)) = &input.source {
                last_use[o.operator as usize][o.output as usize] = i;
            }
        }
    }
    for out in &dag.outputs {
        if let Some(Source::OpOutput(o)) = &out.source {
            last_use[o.operator as usize][o.output as usize] = usize::MAX;
        }
    }

    let mut results: Vec<Vec<Option<HostTensor>>> = Vec::with_capacity(n);
    for (i, op) in dag.operators.iter().enumerate() {
        // Which outputs every run writes in full: needed only for a caller's buffer, so worked
        // out at most once per operator and only when one is given.
        let mut written: Option<Vec<bool>> = None;
        let mut outputs = Vec::with_capacity(op.outputs.len());
        for (j, t) in op.outputs.iter().enumerate() {
            let (dtype, shape) = tensor_type(t)?;
            let buffer = take_provided(dag, &mut provided, i, j)
                .map(|mut b| {
                    if b.dtype() != dtype || b.shape != shape {
                        return Err(Error::OutputMismatch(format!(
                            "the output array for `{}` is {}{:?}, but the operator makes {dtype}{shape:?}",
                            op.name,
                            b.dtype(),
                            b.shape
                        )));
                    }
                    // Elements no worker writes must read as zero, as in a fresh output.
                    let written =
                        written.get_or_insert_with(|| ovl_core::analysis::written_everywhere(op));
                    if !written.get(j).copied().unwrap_or(false) {
                        b.fill_zero();
                    }
                    Ok(b)
                })
                .transpose()?;
            outputs.push(buffer.unwrap_or_else(|| HostTensor::zeros(dtype, &shape)));
        }
        {
            let inputs = dag.operator_inputs[i]
                .inputs
                .iter()
                .map(|v| lookup(graph, fed, &results, v))
                .collect::<Result<Vec<&HostTensor>, _>>()?;
            let start = Instant::now();
            // A GPU kernel's own time (CUDA events) replaces the host's wall clock.
            let mut gpu_time = None;
            match &kernels[i] {
                Kernel::Interpreter => ovl_core::interp::interpret(op, &inputs, &mut outputs)?,
                Kernel::Cpu(k) => k.run(&inputs, &mut outputs, options.threads)?,
                Kernel::Cuda(k) => gpu_time = Some(k.run(&inputs, &mut outputs)?),
            }
            if let Some(t) = timings.as_deref_mut() {
                t.push(gpu_time.unwrap_or_else(|| start.elapsed()));
            }
        }
        results.push(outputs.into_iter().map(Some).collect());
        // Free what no later operator reads.
        for (j, outs) in results.iter_mut().enumerate() {
            for (k, slot) in outs.iter_mut().enumerate() {
                if last_use[j][k] <= i && slot.is_some() {
                    *slot = None;
                }
            }
        }
    }

    let mut requested = Vec::with_capacity(dag.outputs.len());
    for (position, out) in dag.outputs.iter().enumerate() {
        // Move an operator output out when no later requested output names it again.
        let taken = match &out.source {
            Some(Source::OpOutput(o))
                if !dag.outputs[position + 1..].iter().any(|later| later == out) =>
            {
                results[o.operator as usize][o.output as usize].take()
            }
            _ => None,
        };
        requested.push(match taken {
            Some(t) => t,
            None => lookup(graph, fed, &results, out)?.clone(),
        });
    }
    Ok(requested)
}

/// The provided buffer for output `output` of operator `operator`, if a requested output names
/// it and the caller gave one.
fn take_provided(
    dag: &ir::OperatorDag,
    provided: &mut [Option<HostTensor>],
    operator: usize,
    output: usize,
) -> Option<HostTensor> {
    dag.outputs
        .iter()
        .zip(provided.iter_mut())
        .find_map(|(out, slot)| match &out.source {
            Some(Source::OpOutput(o))
                if o.operator as usize == operator && o.output as usize == output =>
            {
                slot.take()
            }
            _ => None,
        })
}

fn lookup<'a>(
    graph: &'a Graph,
    fed: &[Option<&'a HostTensor>],
    results: &'a [Vec<Option<HostTensor>>],
    v: &ir::ValueRef,
) -> Result<&'a HostTensor, Error> {
    match &v.source {
        Some(Source::GraphInput(i)) => {
            if let Some(t) = fed.get(*i as usize).copied().flatten() {
                return Ok(t);
            }
            match graph.inputs.get(*i as usize) {
                Some(ovl_core::GraphInput::Host(t)) => Ok(&**t),
                Some(ovl_core::GraphInput::Placeholder { name, .. }) => {
                    Err(Error::Placeholder { name: name.clone() })
                }
                None => Err(Error::Internal(format!("graph input {i} does not exist"))),
            }
        }
        Some(Source::OpOutput(o)) => results
            .get(o.operator as usize)
            .and_then(|outs| outs.get(o.output as usize))
            .and_then(|t| t.as_ref())
            .ok_or_else(|| {
                Error::Internal(format!(
                    "output {} of operator {} is not available",
                    o.output, o.operator
                ))
            }),
        None => Err(Error::Internal("a graph value has no source".into())),
    }
}

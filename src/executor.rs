//! Prepares a lazy graph for the runner ([`ovl_runtime::plan`]): fuses it, compiles a kernel per operator for
//! the target, plans it, and runs it with the graph's host data (or data fed to placeholders).

use crate::options::{Options, Target};
use crate::{Error, InternalError};
use ovl_codegen::CodegenError;
use ovl_core::ir;
use ovl_core::lazy::Graph;
use ovl_core::{GraphInput, HostTensor};
use ovl_runtime::plan::{GemmKernel, Input, Kernel, Output, Plan, RunFailure};
use ovl_runtime::CompiledOperator;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// Merges the graph's operators at `options.opt_level` (the graph inputs and the requested
/// outputs are unchanged), then keeps values a worker's later loop would compute again in row
/// buffers ([`ovl_fuse::reuse_rows`], within the target's budget), before kernels are prepared.
pub(crate) fn fuse(graph: Graph, options: &Options) -> Result<Graph, Error> {
    fuse_with(
        graph,
        options,
        ovl_fuse::RowReuse::Apply(options.row_budget()),
    )
}

/// [`fuse`], with or without row reuse (see [`ovl_fuse::RowReuse`]).
pub(crate) fn fuse_with(
    graph: Graph,
    options: &Options,
    reuse: ovl_fuse::RowReuse,
) -> Result<Graph, Error> {
    if options.opt_level.get() == 0 {
        return Ok(graph);
    }
    let dag = if graph.dag.operators.len() < 2 {
        // Nothing to merge.
        let mut dag = graph.dag;
        if let ovl_fuse::RowReuse::Apply(budget) = reuse {
            ovl_fuse::reuse_rows(&mut dag, budget);
        }
        dag
    } else {
        ovl_fuse::optimize_cached_with(graph.dag, options.opt_level, reuse)?
    };
    Ok(Graph {
        dag,
        inputs: graph.inputs,
    })
}

/// Compiles (or finds in the cache) every operator of `dag` for `options.target`.
pub(crate) fn kernels(dag: &ir::OperatorDag, options: &Options) -> Result<Vec<Kernel>, Error> {
    kernels_with_libraries(dag, &[], options)
}

/// [`kernels`], where `libraries` are compiled libraries an exported program carries (at most
/// one per operator, checked by `check_program`): on [`Target::Cpu`] an operator that has one
/// loads it when it fits this machine, and is compiled otherwise.
pub(crate) fn kernels_with_libraries(
    dag: &ir::OperatorDag,
    libraries: &[ir::CompiledLibrary],
    options: &Options,
) -> Result<Vec<Kernel>, Error> {
    // `CudaValidate` computes values in the CUDA backend's reduction order, so they are the
    // GPU's bit for bit.
    let reduction_order = match options.target {
        Target::CudaValidate => ovl_core::cooperative::ReductionOrder::Cuda,
        _ => ovl_core::cooperative::ReductionOrder::Lanes,
    };
    let interpreter = || Kernel::Interpreter {
        max_while_iterations: options.while_limit(),
        reduction_order,
    };
    let compile = options.compile_options();
    // The CPU's kernels to compile, compiled together: those that miss the cache concurrently.
    let mut compiled: HashMap<usize, Result<Arc<CompiledOperator>, CodegenError>> =
        if matches!(options.target, Target::Cpu) {
            let wanted: Vec<usize> = (0..dag.operators.len())
                .filter(|&k| {
                    let op = &dag.operators[k];
                    !op.workgroup_shape.contains(&0)
                        && GemmKernel::for_operator(op).is_none()
                        && !libraries.iter().any(|l| l.operator as usize == k)
                })
                .collect();
            let dags: Vec<&ir::ExpressionDag> = wanted.iter().map(|&k| &dag.operators[k]).collect();
            wanted
                .into_iter()
                .zip(ovl_runtime::compile_all(&dags, &compile))
                .collect()
        } else {
            HashMap::new()
        };
    // Likewise the GPU's, compiled by NVRTC concurrently (cuBLAS runs the products).
    let mut loaded: HashMap<usize, Result<Arc<ovl_runtime::cuda::CudaOperator>, CodegenError>> =
        if matches!(options.target, Target::Cuda) {
            let wanted: Vec<usize> = (0..dag.operators.len())
                .filter(|&k| {
                    let op = &dag.operators[k];
                    !op.workgroup_shape.contains(&0)
                        && ovl_runtime::cuda::CublasGemm::for_operator(op).is_none()
                })
                .collect();
            let dags: Vec<&ir::ExpressionDag> = wanted.iter().map(|&k| &dag.operators[k]).collect();
            wanted
                .into_iter()
                .zip(ovl_runtime::cuda::load_all(&dags, &options.cuda_options()))
                .collect()
        } else {
            HashMap::new()
        };
    dag.operators
        .iter()
        .enumerate()
        .map(|(k, op)| match options.target {
            // No worker to run (a workgroup with a zero dimension, e.g. on an empty tensor):
            // nothing to compile; the runner zero-fills the outputs and the interpreter runs no
            // worker, whatever the target.
            _ if op.workgroup_shape.contains(&0) => Ok(interpreter()),
            Target::Interpreter => Ok(interpreter()),
            Target::Cpu => {
                // A library call the CPU runs by its library: nothing to compile.
                if let Some(gemm) = GemmKernel::for_operator(op) {
                    return Ok(Kernel::Gemm(gemm));
                }
                Ok(Kernel::Cpu(
                    match libraries.iter().find(|l| l.operator as usize == k) {
                        Some(library) => {
                            ovl_runtime::cpu::cache::compile_embedded(op, library, &compile)?
                        }
                        None => compiled
                            .remove(&k)
                            .unwrap_or_else(|| ovl_runtime::compile(op, &compile))?,
                    },
                ))
            }
            Target::Cuda => {
                // A GEMM runs through cuBLAS where it loads, else as its reference program.
                if let Some(gemm) = ovl_runtime::cuda::CublasGemm::for_operator(op) {
                    return Ok(Kernel::CudaGemm(gemm.with_tf32(options.cuda_tf32)));
                }
                Ok(Kernel::Cuda(loaded.remove(&k).unwrap_or_else(|| {
                    ovl_runtime::cuda::load(op, &options.cuda_options())
                })?))
            }
            Target::CudaValidate => {
                // NVRTC runs in this process for every operator (the PTX is compiled again even
                // when cached), then ptxas checks it for each architecture.
                let cuda = options.cuda_options().with_force_recompile(true);
                for arch in options.validate_archs() {
                    ovl_runtime::cuda::validate(op, arch, &cuda)?;
                }
                Ok(interpreter())
            }
        })
        .collect()
}

/// A fused graph, planned, with a kernel per operator: what the plan cache keeps (no host
/// data: that is fed per run).
pub(crate) struct Planned {
    pub plan: Plan,
    pub kernels: Vec<Kernel>,
}

/// A graph ready to run: its plan and kernels (shared with the plan cache) and its graph
/// inputs' data.
pub(crate) struct Prepared {
    pub planned: Arc<Planned>,
    pub inputs: Vec<GraphInput>,
}

/// Compiles the kernels of `graph` (already fused) and plans it.
pub(crate) fn prepare(graph: Graph, options: &Options) -> Result<Prepared, Error> {
    let kernels = kernels(&graph.dag, options)?;
    let plan = Plan::new(Arc::new(graph.dag))
        .map_err(InternalError::Unplannable)?
        .with_epilogue(options.gemm_epilogue);
    Ok(Prepared {
        planned: Arc::new(Planned { plan, kernels }),
        inputs: graph.inputs,
    })
}

impl From<RunFailure> for Error {
    fn from(e: RunFailure) -> Error {
        match e {
            RunFailure::Mismatch(m) => Error::OutputMismatch(m),
            RunFailure::Interpreter(e) => Error::Interpreter(e),
            RunFailure::Run(e) => Error::Run(e),
            RunFailure::Device(e) => Error::Device(e),
            RunFailure::OutOfMemory(e) => Error::OutOfMemory(e),
        }
    }
}

impl Prepared {
    /// The plan.
    pub fn plan(&self) -> &Plan {
        &self.planned.plan
    }

    /// Runs the graph once; returns the requested outputs in order. When `timings` is given,
    /// the time of each operator is appended to it.
    pub fn run(
        &self,
        options: &Options,
        timings: Option<&mut Vec<Duration>>,
    ) -> Result<Vec<HostTensor>, Error> {
        self.run_into(&[], options, timings, Vec::new())
    }

    /// Runs the graph once on the CPU or the interpreter with graph input `i` read from
    /// `fed[i]` when given (else the graph's own data) and requested output `k` written into
    /// `outputs[k]`; raw buffers are read and written where they lie.
    ///
    /// # Safety
    /// As for [`Plan::run`]: every [`Input::Raw`] points to the row-major elements of its graph
    /// input's type, readable for the call, and every [`Output::Raw`] to a writable buffer of its
    /// output's size that overlaps no other buffer passed.
    pub unsafe fn run_in_place(
        &self,
        fed: &[Option<Input<'_>>],
        options: &Options,
        outputs: &mut [Output<'_>],
    ) -> Result<(), Error> {
        let downloaded = self.download(fed)?;
        let inputs = self.resolve(fed, &downloaded)?;
        // SAFETY: forwarded to the caller; host tensors are checked by the plan.
        unsafe {
            self.plan().run(
                &self.planned.kernels,
                &inputs,
                outputs,
                options.threads,
                None,
            )?;
        }
        Ok(())
    }

    /// [`Prepared::run`], writing requested output `k` into `provided[k]` when that buffer is
    /// given (it must have the output's dtype and shape). The buffers come back in the result,
    /// in place. Graph input `i` reads `fed[i]` when that is given (data for a placeholder),
    /// else the graph's own.
    pub fn run_into(
        &self,
        fed: &[Option<&HostTensor>],
        options: &Options,
        timings: Option<&mut Vec<Duration>>,
        mut provided: Vec<Option<HostTensor>>,
    ) -> Result<Vec<HostTensor>, Error> {
        let fed: Vec<Option<Input>> = fed.iter().map(|f| f.map(Input::Host)).collect();
        let downloaded = self.download(&fed)?;
        let inputs = self.resolve(&fed, &downloaded)?;
        let plan = self.plan();
        provided.resize_with(plan.outputs().len(), || None);
        let mut buffers: Vec<(HostTensor, bool)> = provided
            .into_iter()
            .zip(plan.outputs())
            .map(|(given, sig)| match given {
                Some(t) => Ok((t, false)),
                None => Ok((HostTensor::try_zeros(sig.dtype, &sig.shape)?, true)),
            })
            .collect::<Result<_, ovl_core::AllocError>>()?;
        let mut outputs: Vec<Output> = buffers
            .iter_mut()
            .map(|(tensor, zeroed)| Output::Host {
                tensor,
                zeroed: *zeroed,
            })
            .collect();
        plan.run_host(
            &self.planned.kernels,
            &inputs,
            &mut outputs,
            options.threads,
            timings,
        )?;
        drop(outputs);
        Ok(buffers.into_iter().map(|(t, _)| t).collect())
    }

    /// The graph's device data that `fed` does not replace, copied to the host for a run there
    /// (`None` for every other input).
    fn download(&self, fed: &[Option<Input<'_>>]) -> Result<Vec<Option<HostTensor>>, Error> {
        Ok(self
            .inputs
            .iter()
            .enumerate()
            .map(|(i, input)| match (fed.get(i).copied().flatten(), input) {
                (None, GraphInput::Device(d)) => ovl_runtime::plan::on_host(&**d).map(Some),
                _ => Ok(None),
            })
            .collect::<Result<Vec<_>, _>>()?)
    }

    /// What each graph input reads: `fed[i]` when given, else the graph's own host data, its
    /// `downloaded` copy of device data, or an error naming a placeholder left unfed.
    fn resolve<'a>(
        &'a self,
        fed: &[Option<Input<'a>>],
        downloaded: &'a [Option<HostTensor>],
    ) -> Result<Vec<Input<'a>>, Error> {
        self.inputs
            .iter()
            .zip(downloaded)
            .enumerate()
            .map(
                |(i, (input, copy))| match (fed.get(i).copied().flatten(), input) {
                    (Some(given), _) => Ok(given),
                    (None, GraphInput::Host(t)) => Ok(Input::Host(t)),
                    (None, GraphInput::Device(_)) => copy
                        .as_ref()
                        .map(Input::Host)
                        .ok_or(InternalError::NotUploaded { input: i }.into()),
                    (None, GraphInput::Placeholder { name, .. }) => {
                        Err(Error::Placeholder { name: name.clone() })
                    }
                },
            )
            .collect()
    }
}

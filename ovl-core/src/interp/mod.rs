//! The reference interpreter: the oracle every backend is tested against.
//!
//! [`interpret`] runs an operator ([`ir::ExpressionDag`]) on host tensors with exactly the
//! semantics written in `proto/ovl.proto`: the program runs once per worker of the workgroup,
//! integer arithmetic wraps, integer division by zero gives 0, casts follow Rust's `as`, f32 math
//! is computed in f32, floating-point operations are never contracted, and so on.
//!
//! The workgroup is split into contiguous row-major chunks run on several threads when it is
//! large ([`InterpOptions::threads`]). Workers of a correct operator are independent, so the
//! split does not change the result; if two workers write the same output element (a race in any
//! parallel backend), one of the written values is kept, which one is unspecified unless the
//! interpreter runs on one thread (then workers run in row-major order and the last write wins).

mod exec;
mod program;
mod value;

#[cfg(test)]
#[cfg(test)]
mod tests;

use crate::host::{AllocError, HostTensor, TensorData};
use crate::ir;
use crate::validate::{validate, ValidationError};
use exec::{Fault, FirstFault, OutView, Worker};
use ovl_ir::names::{defined_at, tensor_type_name};
use program::Program;
use thiserror::Error;

/// Why the interpreter could not run an operator, or what went wrong while it ran.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum InterpError {
    /// The operator is not valid IR (see [`crate::validate::validate`]).
    #[error("cannot interpret an invalid operator: {0}")]
    Invalid(#[from] ValidationError),
    /// The number of input or output tensors passed differs from the operator's.
    #[error("operator `{operator}` takes {expected} {kind} tensor(s), but {got} were passed")]
    TensorCount {
        /// The operator's name.
        operator: String,
        /// `"input"` or `"output"`.
        kind: &'static str,
        /// The operator's count.
        expected: usize,
        /// The count passed.
        got: usize,
    },
    /// A tensor passed has another dtype or shape than the operator declares (or its data does
    /// not have as many elements as its shape says).
    #[error("operator `{operator}`: {tensor} must be {expected}, but the tensor passed is {got}")]
    TensorType {
        /// The operator's name.
        operator: String,
        /// `input 0`, `output 1`.
        tensor: String,
        /// The declared type, like `f32[4, 8]`.
        expected: String,
        /// The type passed.
        got: String,
    },
    /// A read or write indexed outside a tensor. The access did not happen and the faulting
    /// worker stopped there; every other worker ran normally. Reported for the first faulting
    /// worker in row-major order (a worker's first fault is its only one).
    #[error(transparent)]
    IndexOutOfBounds(Box<OutOfBounds>),
    /// A RANGE loop's step was zero or negative; the faulting worker stopped there. Reported for
    /// the first faulting worker in row-major order.
    #[error(transparent)]
    NonPositiveStep(Box<NonPositiveStep>),
    /// A `while` loop ran more iterations in one worker than the bound
    /// ([`InterpOptions::max_while_iterations`]); the worker stopped there. Reported for the
    /// first faulting worker in row-major order.
    #[error(transparent)]
    WhileLimit(Box<WhileLimit>),
    /// A local tensor of the operator could not be allocated.
    #[error("operator `{operator}`: {source}")]
    OutOfMemory {
        /// The operator's name.
        operator: String,
        /// The buffer that could not be allocated.
        source: AllocError,
    },
    /// An inconsistency the interpreter did not expect after validation (a bug in ovl).
    #[error("operator `{operator}`: internal error of the interpreter: {message}")]
    Internal {
        /// The operator's name.
        operator: String,
        /// What went wrong.
        message: String,
    },
}

pub use crate::error::{Access, OutOfBounds};
pub use ovl_ir::fault::{NonPositiveStep, WhileLimit, WorkerFault};

impl From<WorkerFault> for InterpError {
    /// The variant of the same name.
    fn from(f: WorkerFault) -> Self {
        match f {
            WorkerFault::IndexOutOfBounds(f) => InterpError::IndexOutOfBounds(f),
            WorkerFault::NonPositiveStep(f) => InterpError::NonPositiveStep(f),
            WorkerFault::WhileLimit(f) => InterpError::WhileLimit(f),
        }
    }
}

/// Options of [`interpret_with`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterpOptions {
    /// Number of threads. `None`: one thread for small workgroups, else as many as the machine
    /// has (`std::thread::available_parallelism`). `Some(1)` runs the workers in row-major
    /// order on the calling thread.
    pub threads: Option<usize>,
    /// The most iterations one `while` loop may run in one worker (per entry into the loop);
    /// more is a [`InterpError::WhileLimit`] fault. 0: no bound. Default:
    /// [`ovl_ir::limits::while_iterations_from_env`].
    pub max_while_iterations: u64,
    /// The order reductions run in (`proto/ovl.proto`, "Accumulators"): the one every backend
    /// but CUDA follows (the default), or the CUDA backend's, where an operator whose workers
    /// cooperate ([`ovl_ir::cooperative::plan`]) reduces its top-level loops over the group's
    /// lanes; so the interpreter is the oracle of the GPU bit for bit too.
    pub reduction_order: ovl_ir::cooperative::ReductionOrder,
}

impl Default for InterpOptions {
    fn default() -> InterpOptions {
        InterpOptions {
            threads: None,
            max_while_iterations: ovl_ir::limits::while_iterations_from_env(),
            reduction_order: Default::default(),
        }
    }
}

/// Below this estimated number of expressions evaluated in total (workers times the program's
/// cost, where expressions inside loops count more), one thread.
const PARALLEL_THRESHOLD: u64 = 1 << 16;

/// Runs `dag` on `inputs`, writing `outputs`, with default [`InterpOptions`].
///
/// `outputs` must already be allocated with the operator's declared output types (normally
/// zero-filled: elements no worker writes keep their value). The dag is validated first. An
/// index out of bounds is a fault: the access does not happen, the faulting worker stops there
/// (its enclosing loops exit, its later writes do not happen), every other worker runs, and the
/// fault of the first faulting worker in row-major order is returned as
/// [`InterpError::IndexOutOfBounds`].
pub fn interpret(
    dag: &ir::ExpressionDag,
    inputs: &[&HostTensor],
    outputs: &mut [HostTensor],
) -> Result<(), InterpError> {
    interpret_with(dag, inputs, outputs, &InterpOptions::default())
}

fn check_tensors(
    dag: &ir::ExpressionDag,
    kind: &'static str,
    declared: &[ir::TensorType],
    passed: &mut dyn Iterator<Item = &HostTensor>,
    count: usize,
) -> Result<(), InterpError> {
    if count != declared.len() {
        return Err(InterpError::TensorCount {
            operator: dag.name.clone(),
            kind,
            expected: declared.len(),
            got: count,
        });
    }
    for (k, (t, h)) in declared.iter().zip(passed).enumerate() {
        let same_shape = t.shape.len() == h.shape.len()
            && t.shape.iter().zip(&h.shape).all(|(&a, &b)| a == b as u64);
        let consistent = h.shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)) == Some(h.len());
        if t.dtype != h.dtype().to_ir() as i32 || !same_shape || !consistent {
            let mut got = format!("{}{:?}", h.dtype(), h.shape);
            if !consistent {
                got += &format!(" holding {} elements", h.len());
            }
            return Err(InterpError::TensorType {
                operator: dag.name.clone(),
                tensor: format!("{kind} {k}"),
                expected: tensor_type_name(t),
                got,
            });
        }
    }
    Ok(())
}

/// Runs `dag` on `inputs`, writing `outputs` (see [`interpret`]), with explicit options.
pub fn interpret_with(
    dag: &ir::ExpressionDag,
    inputs: &[&HostTensor],
    outputs: &mut [HostTensor],
    options: &InterpOptions,
) -> Result<(), InterpError> {
    validate(dag)?;
    // A library call runs its reference program (`proto/ovl.proto`, "Library calls").
    let expanded = ovl_ir::library::expand(dag);
    let dag: &ir::ExpressionDag = &expanded;
    check_tensors(
        dag,
        "input",
        &dag.inputs,
        &mut inputs.iter().copied(),
        inputs.len(),
    )?;
    check_tensors(
        dag,
        "output",
        &dag.outputs,
        &mut outputs.iter(),
        outputs.len(),
    )?;
    let internal = |message: String| InterpError::Internal {
        operator: dag.name.clone(),
        message,
    };
    let prog = Program::new(dag, options.reduction_order).map_err(internal)?;
    let workers = exec::worker_count(&prog);
    let threads = match options.threads {
        Some(t) => t.max(1),
        None if workers.saturating_mul(ovl_ir::cost::WorkerCost::of(dag).at(&[]))
            < PARALLEL_THRESHOLD =>
        {
            1
        }
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let threads = (threads as u64).min(workers).max(1);

    let input_data: Vec<&TensorData> = inputs.iter().map(|h| &h.data).collect();
    let views: Vec<OutView<'_>> = outputs
        .iter_mut()
        .map(|h| OutView::new(&mut h.data))
        .collect();
    let chunk = workers.div_ceil(threads);
    let bounds = |t: u64| (t * chunk, ((t + 1) * chunk).min(workers));

    // Every thread's worker state (local tensors included) is allocated before any runs.
    let mut states = (0..threads)
        .map(|_| Worker::new(&prog, &input_data, &views, options.max_while_iterations))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| InterpError::OutOfMemory {
            operator: dag.name.clone(),
            source,
        })?;
    let first: Option<FirstFault> = if threads == 1 {
        states.pop().expect("one thread").run_chunk(0, workers)
    } else {
        let results: Vec<std::thread::Result<Option<FirstFault>>> = std::thread::scope(|s| {
            let mut states = states.into_iter();
            let own = states.next().expect("one state per thread");
            let handles: Vec<_> = states
                .zip(1..threads)
                .map(|(state, t)| {
                    let (lo, hi) = bounds(t);
                    s.spawn(move || state.run_chunk(lo, hi))
                })
                .collect();
            let (lo, hi) = bounds(0);
            let mut results = vec![Ok(own.run_chunk(lo, hi))];
            results.extend(handles.into_iter().map(|h| h.join()));
            results
        });
        let mut first = None;
        for r in results {
            match r {
                Ok(Some(f)) => {
                    first = Some(f);
                    break;
                }
                Ok(None) => {}
                Err(_) => return Err(internal("a worker thread panicked".into())),
            }
        }
        first
    };
    for v in views {
        v.finish();
    }
    match first {
        None => Ok(()),
        Some(f) => Err(fault_error(dag, &prog, f)),
    }
}

fn fault_error(dag: &ir::ExpressionDag, prog: &Program, f: FirstFault) -> InterpError {
    match f.fault {
        Fault::IndexOutOfBounds {
            expression,
            tensor,
            axis,
            index,
            size,
        } => WorkerFault::IndexOutOfBounds(Box::new(OutOfBounds {
            operator: dag.name.clone(),
            defined_at: defined_at(dag),
            expression,
            access: if prog.instrs[expression].code == program::Code::Write {
                Access::Write
            } else {
                Access::Read
            },
            tensor: prog.tensors[tensor].name(),
            axis,
            index,
            size,
            position: f.position,
        }))
        .into(),
        Fault::WhileLimit { expression, limit } => WorkerFault::WhileLimit(Box::new(WhileLimit {
            operator: dag.name.clone(),
            defined_at: defined_at(dag),
            expression,
            limit,
            position: f.position,
        }))
        .into(),
        Fault::NonPositiveStep { expression, step } => {
            WorkerFault::NonPositiveStep(Box::new(NonPositiveStep {
                operator: dag.name.clone(),
                defined_at: defined_at(dag),
                expression,
                step,
                position: f.position,
            }))
            .into()
        }
        Fault::Internal {
            expression,
            message,
        } => InterpError::Internal {
            operator: dag.name.clone(),
            message: format!(
                "{message} at expression %{expression} (worker {:?})",
                f.position
            ),
        },
    }
}

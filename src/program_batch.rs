//! Batching an exported program ([`ir::Program`]) over a new leading axis: what TensorFlow's
//! `tf.vectorized_map` and `GradientTape.jacobian` need from the `DynamicLib` op (its pfor
//! converter calls [`batch_sealed`] through the bridge library).
//!
//! [`batch_program`] is `ovl::vmap` for a program instead of a lazy graph: the fed tensors
//! marked batched gain a leading axis of `n` examples, and every operator that depends on a
//! batched value becomes its batched form ([`ovl_core::batch::batch_operator`]); an operator
//! that reads only shared values (shared feeds, constants, their consequences) stays as it is,
//! computed once. Constants stay shared. An output that depends on no batched value stays
//! unbatched, and [`BatchedProgram::batched_outputs`] says which outputs are batched (pfor keeps
//! such an output loop invariant). Slice `b` of every batched output is, bit for bit, what the
//! program computes on slice `b` of the batched feeds and the shared feeds.
//!
//! [`batch_gradient_program`] batches the program's gradient program to match, so that a
//! gradient through the batched program is right: the gradients flowing into batched outputs
//! are batched; the gradient flowing into an unbatched output is placed at example 0 (zeros
//! elsewhere, `vmap_first`), so that it is counted once; a batched feed's gradient is batched
//! (broadcast if it depends on no batched value) and a shared feed's gradient is the sum over
//! the examples of the per-example gradients (`vmap_sum`).
//!
//! The batch size ([`BatchSize`]) is known when batching ([`BatchSize::Known`]), or only when
//! the batched program runs ([`BatchSize::RunTime`]: TensorFlow's pfor inside a `tf.function`
//! whose input signature has a `None` batch). A size known only at run time is a new symbol
//! ([`PFOR_SYMBOL`], numbered after the program's own symbols): the program is batched at
//! [`crate::polymorphic::TRACE_SIZES`] and the three results unified in it
//! ([`ovl_core::unify`]); the batched feeds' leading dimension is that symbol, so running the
//! program determines it from them. The program itself may have sizes known only at run time
//! (an export of `ovl::as_tensorflow_polymorphic`): they are kept, moved one place right in
//! the batched feeds and operators.
//!
//! ```
//! use ovl::prelude::*;
//!
//! #[operator]
//! fn scale(x: Tensor<f32>, w: Tensor<f32>) -> Tensor<f32> {
//!     let i = position_in(x.shape())[0];
//!     let out = output_like(&x);
//!     out[[i]] = x[[i]] * w[[i]];
//!     out
//! }
//!
//! let (x, w) = (ovl::placeholder::<f32>("x", &[3]), ovl::placeholder::<f32>("w", &[3]));
//! let options = Options::interpreter();
//! let bundle = ovl::as_tensorflow((&x, &w), scale(&x, &w)).options(&options).build().unwrap();
//! // x batched over 2 examples, w shared.
//! let batched = ovl::program_batch::batch_program(&bundle.program, &[true, false], 2).unwrap();
//! assert_eq!(batched.batched_outputs, vec![true]);
//! let xs = ovl::HostTensor::from_vec(&[2, 3], vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
//! let w = ovl::HostTensor::from_vec(&[3], vec![10.0f32, 100.0, 1000.0]).unwrap();
//! let out = ovl::program::run_program(&batched.program, vec![xs, w], &options).unwrap();
//! let want = vec![10.0f32, 200.0, 3000.0, 40.0, 500.0, 6000.0];
//! assert_eq!(out[0], ovl::HostTensor::from_vec(&[2, 3], want).unwrap());
//! ```

use crate::program::{check_program, open_program, seal_program, MalformedProgram, SealError};
use ovl_core::batch::{batch_operator, BatchError};
use ovl_core::batch_ops::{batched_type, broadcast_operator, first_example_operator, sum_operator};
use ovl_core::ir::{self, value_ref::Source};

/// The name of the symbol a batch size known only at run time gets (`pfor2`, `pfor3`, .. when
/// the program already names a `pfor`: a loop inside a loop).
pub const PFOR_SYMBOL: &str = "pfor";

/// The number of examples a program is batched over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BatchSize {
    /// Known when batching: the batched feeds' leading dimension is this size.
    Known(u64),
    /// Known only when the batched program runs: the batched feeds' leading dimension is a new
    /// symbol ([`PFOR_SYMBOL`]), determined from them at run time.
    RunTime,
}

impl From<u64> for BatchSize {
    fn from(n: u64) -> Self {
        BatchSize::Known(n)
    }
}

impl std::fmt::Display for BatchSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BatchSize::Known(n) => write!(f, "{n}"),
            BatchSize::RunTime => f.write_str("a size known at run time"),
        }
    }
}

/// A program batched by [`batch_program`].
#[derive(Clone, Debug, PartialEq)]
pub struct BatchedProgram {
    /// The batched program: its batched feeds have a leading axis of the batch size, and so do
    /// its batched outputs. It passes [`check_program`].
    pub program: ir::Program,
    /// One per output: whether it has the leading batch axis (`false`: it depends on no
    /// batched feed and is the same for every example).
    pub batched_outputs: Vec<bool>,
}

/// A sealed program and its sealed gradient program, batched by [`batch_sealed`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SealedBatch {
    /// The sealed batched program (see [`crate::program::seal_program`]).
    pub program: Vec<u8>,
    /// The sealed batched gradient program; empty when the program has no gradient.
    pub gradient: Vec<u8>,
    /// One per output of the program: whether it is batched.
    pub batched_outputs: Vec<bool>,
}

/// Why a program could not be batched. Each message names the program.
#[derive(Debug, thiserror::Error)]
pub enum BatchProgramError {
    /// The description of the batch does not fit the program.
    #[error("cannot batch program `{program}`: {message}")]
    Description {
        /// The program.
        program: String,
        /// What does not fit.
        message: String,
    },
    /// The program is malformed (it fails [`check_program`]).
    #[error("cannot batch program `{program}`: it is not a valid program ({why})")]
    Malformed {
        /// The program.
        program: String,
        /// What [`check_program`] said.
        why: MalformedProgram,
    },
    /// The program cannot be batched as asked (for example over a batch size known only at
    /// run time, when the programs batched at the trace sizes do not unify).
    #[error("cannot batch program `{program}`: {message}")]
    Unsupported {
        /// The program.
        program: String,
        /// Why, and what to do.
        message: String,
    },
    /// An operator could not be batched (for example: the batched tensors would not fit in
    /// memory).
    #[error("cannot batch program `{program}`: {source}")]
    Operator {
        /// The program.
        program: String,
        /// The operator's error.
        source: BatchError,
    },
    /// Sealed bytes were modified or corrupted.
    #[error(transparent)]
    Sealed(#[from] SealError),
}

/// What a graph input of the program becomes in the batched graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// The same tensor for every example.
    Shared,
    /// Fed with a leading batch axis.
    Batched,
    /// Fed unbatched, used as example 0 of a batch that is zero elsewhere (`vmap_first`).
    FirstExample,
}

/// A value of the batched graph: where it is, and whether it has the batch axis.
#[derive(Clone, Debug)]
struct Value {
    at: ir::ValueRef,
    batched: bool,
}

fn op_output(operator: usize, output: u32) -> ir::ValueRef {
    ir::ValueRef {
        source: Some(Source::OpOutput(ir::OperatorOutput {
            operator: operator as u32,
            output,
        })),
    }
}

fn graph_input(i: usize) -> ir::ValueRef {
    ir::ValueRef {
        source: Some(Source::GraphInput(i as u32)),
    }
}

/// `t` without its leading (batch) axis: its symbolic dimensions move one place left.
fn example_type(t: &ir::TensorType) -> ir::TensorType {
    ir::TensorType {
        dtype: t.dtype,
        shape: t.shape.get(1..).unwrap_or_default().to_vec(),
        symbolic: t
            .symbolic
            .iter()
            .filter(|d| d.dim > 0)
            .map(|d| ir::SymbolicDim {
                dim: d.dim - 1,
                ..*d
            })
            .collect(),
    }
}

/// The batched graph under construction.
struct Batcher<'a> {
    program: &'a str,
    n: u64,
    graph: ir::OperatorDag,
    /// Per operator of the original graph: its index in the batched graph and whether it was
    /// batched.
    operators: Vec<(usize, bool)>,
    /// Per graph input of the original graph: its value in the batched graph.
    inputs: Vec<Value>,
}

impl<'a> Batcher<'a> {
    fn error(&self, source: BatchError) -> BatchProgramError {
        BatchProgramError::Operator {
            program: self.program.to_string(),
            source,
        }
    }

    /// The type of a value of the batched graph (references were checked by
    /// [`check_program`] and by construction).
    fn type_of(&self, at: &ir::ValueRef) -> ir::TensorType {
        match &at.source {
            Some(Source::GraphInput(i)) => self.graph.inputs[*i as usize].clone(),
            Some(Source::OpOutput(o)) => {
                self.graph.operators[o.operator as usize].outputs[o.output as usize].clone()
            }
            None => ir::TensorType::default(),
        }
    }

    /// Appends a one-input operator reading `input`; returns its output.
    fn push(&mut self, op: ir::ExpressionDag, input: ir::ValueRef) -> ir::ValueRef {
        self.graph.operators.push(op);
        self.graph.operator_inputs.push(ir::OperatorInputs {
            inputs: vec![input],
        });
        op_output(self.graph.operators.len() - 1, 0)
    }

    /// `value` as a batched value: itself when it is batched, else broadcast.
    fn ensure_batched(&mut self, value: Value) -> ir::ValueRef {
        if value.batched {
            return value.at;
        }
        let t = self.type_of(&value.at);
        self.push(broadcast_operator(&t, self.n), value.at)
    }

    /// The sum of `value` over the examples (a value that is not batched counts `n` times).
    fn sum_over_examples(&mut self, value: Value) -> ir::ValueRef {
        let at = self.ensure_batched(value);
        let t = example_type(&self.type_of(&at));
        self.push(sum_operator(&t, self.n), at)
    }

    /// The value of a reference of the original graph.
    fn map(&self, at: &ir::ValueRef) -> Value {
        match &at.source {
            Some(Source::GraphInput(i)) => self.inputs[*i as usize].clone(),
            Some(Source::OpOutput(o)) => {
                let (index, batched) = self.operators[o.operator as usize];
                Value {
                    at: op_output(index, o.output),
                    batched,
                }
            }
            None => Value {
                at: *at,
                batched: false,
            },
        }
    }
}

/// Batches the operators of `graph` (whose graph inputs become what `modes` says); returns the
/// batcher holding the batched graph and the map of the original operators and inputs.
fn batch_graph<'a>(
    program: &'a str,
    graph: &ir::OperatorDag,
    modes: &[Mode],
    n: u64,
) -> Result<Batcher<'a>, BatchProgramError> {
    let mut b = Batcher {
        program,
        n,
        graph: ir::OperatorDag {
            version: graph.version,
            operators: Vec::with_capacity(graph.operators.len()),
            inputs: Vec::with_capacity(graph.inputs.len()),
            operator_inputs: Vec::with_capacity(graph.operators.len()),
            outputs: Vec::new(),
            symbols: graph.symbols.clone(),
        },
        operators: Vec::with_capacity(graph.operators.len()),
        inputs: Vec::with_capacity(graph.inputs.len()),
    };
    for (i, (t, &mode)) in graph.inputs.iter().zip(modes).enumerate() {
        b.graph.inputs.push(match mode {
            Mode::Batched => batched_type(t, n),
            Mode::Shared | Mode::FirstExample => t.clone(),
        });
        let value = match mode {
            Mode::Shared | Mode::Batched => Value {
                at: graph_input(i),
                batched: mode == Mode::Batched,
            },
            Mode::FirstExample => {
                let at = b.push(first_example_operator(t, n), graph_input(i));
                Value { at, batched: true }
            }
        };
        b.inputs.push(value);
    }
    for (op, wiring) in graph.operators.iter().zip(&graph.operator_inputs) {
        let inputs: Vec<Value> = wiring.inputs.iter().map(|v| b.map(v)).collect();
        let batched: Vec<bool> = inputs.iter().map(|v| v.batched).collect();
        let any = batched.iter().any(|&x| x);
        let op = if any {
            batch_operator(op, &batched, n).map_err(|e| b.error(e))?
        } else {
            op.clone()
        };
        b.graph.operators.push(op);
        b.graph.operator_inputs.push(ir::OperatorInputs {
            inputs: inputs.into_iter().map(|v| v.at).collect(),
        });
        b.operators.push((b.graph.operators.len() - 1, any));
    }
    Ok(b)
}

/// Checks `program`; returns its graph.
fn check_batchable(program: &ir::Program) -> Result<&ir::OperatorDag, BatchProgramError> {
    let name = || program.name.clone();
    check_program(program).map_err(|why| BatchProgramError::Malformed {
        program: name(),
        why,
    })?;
    let graph = program.graph.as_ref().ok_or(BatchProgramError::Malformed {
        program: name(),
        why: MalformedProgram::NoGraph,
    })?;
    Ok(graph)
}

/// The program's libraries whose operator was not batched, renumbered.
fn kept_libraries(program: &ir::Program, b: &Batcher) -> Vec<ir::CompiledLibrary> {
    program
        .libraries
        .iter()
        .filter_map(|l| {
            let &(index, batched) = b.operators.get(l.operator as usize)?;
            (!batched).then(|| ir::CompiledLibrary {
                operator: index as u32,
                ..l.clone()
            })
        })
        .collect()
}

/// The name of a program batched over `n` examples.
fn batched_name(name: &str, n: impl std::fmt::Display) -> String {
    format!("{name} batched over {n}")
}

/// `program` batched over a new leading axis of `n` examples (see the module documentation;
/// a `u64` is a [`BatchSize::Known`]). `batched_feeds` has one entry per feed: `true` when the
/// caller passes it with the leading axis (`[n, ..]`), `false` when it is shared by every
/// example. The feeds keep their order and names; graph inputs keep their numbers; a compiled
/// library the program carries is kept for each operator that stays unbatched (when `n` is
/// known).
pub fn batch_program(
    program: &ir::Program,
    batched_feeds: &[bool],
    n: impl Into<BatchSize>,
) -> Result<BatchedProgram, BatchProgramError> {
    match n.into() {
        BatchSize::Known(n) => batch_program_at(program, batched_feeds, n),
        BatchSize::RunTime => {
            let mut outputs = None;
            let unified = at_run_time(program, |n| {
                let b = batch_program_at(program, batched_feeds, n)?;
                outputs = Some(b.batched_outputs);
                Ok(b.program)
            })?;
            Ok(BatchedProgram {
                program: unified,
                batched_outputs: outputs.unwrap_or_default(),
            })
        }
    }
}

/// The name of the symbol a batch known only at run time gets in `program`: [`PFOR_SYMBOL`],
/// or `pfor2`, `pfor3`, .. when the program already names it.
fn pfor_symbol(program: &ir::Program) -> String {
    let names = program
        .graph
        .as_ref()
        .map(|g| g.symbols.as_slice())
        .unwrap_or_default();
    std::iter::once(PFOR_SYMBOL.to_string())
        .chain((2..).map(|k| format!("{PFOR_SYMBOL}{k}")))
        .find(|s| !names.contains(s))
        .unwrap_or_default()
}

/// `program` batched (by `batch_at`) at each of [`crate::polymorphic::TRACE_SIZES`] and the
/// results unified in a new symbol (see the module documentation).
fn at_run_time(
    program: &ir::Program,
    mut batch_at: impl FnMut(u64) -> Result<ir::Program, BatchProgramError>,
) -> Result<ir::Program, BatchProgramError> {
    let sizes: Vec<u64> = crate::polymorphic::TRACE_SIZES
        .iter()
        .map(|&n| n as u64)
        .collect();
    let traces = sizes
        .iter()
        .map(|&n| batch_at(n))
        .collect::<Result<Vec<_>, _>>()?;
    let symbol = pfor_symbol(program);
    let mut unified =
        crate::polymorphic::unify_programs(&sizes, &traces, &symbol).map_err(|why| {
            BatchProgramError::Unsupported {
                program: program.name.clone(),
                message: format!(
                    "batching it over a loop whose length is known only at run time needs the \
                 batched programs at sizes {sizes:?} to differ only in that size, but {why}"
                ),
            }
        })?;
    unified.name = batched_name(&program.name, &symbol);
    Ok(unified)
}

/// `program` batched over `n` examples, `n` known.
fn batch_program_at(
    program: &ir::Program,
    batched_feeds: &[bool],
    n: u64,
) -> Result<BatchedProgram, BatchProgramError> {
    let graph = check_batchable(program)?;
    if batched_feeds.len() != program.feeds.len() {
        return Err(BatchProgramError::Description {
            program: program.name.clone(),
            message: format!(
                "it has {} feed(s) but {} were described as batched or shared; describe each \
                 feed",
                program.feeds.len(),
                batched_feeds.len()
            ),
        });
    }
    let mut modes = vec![Mode::Shared; graph.inputs.len()];
    for (feed, &batched) in program.feeds.iter().zip(batched_feeds) {
        if let (Some(i), true) = (feed.graph_input, batched) {
            modes[i as usize] = Mode::Batched;
        }
    }
    let mut b = batch_graph(&program.name, graph, &modes, n)?;
    let outputs: Vec<Value> = graph.outputs.iter().map(|v| b.map(v)).collect();
    let batched_outputs = outputs.iter().map(|v| v.batched).collect();
    b.graph.outputs = outputs.into_iter().map(|v| v.at).collect();
    finish(program, b, batched_feeds.to_vec(), n).map(|program| BatchedProgram {
        program,
        batched_outputs,
    })
}

/// The gradient program of a program batched by [`batch_program`]: `gradient` is the
/// program's gradient program (fed the program's feeds, then one upstream gradient per output;
/// one gradient per feed out), `batched_feeds` and `n` what was given to [`batch_program`], and
/// `batched_outputs` what it returned. The result is fed the batched program's feeds, then the
/// upstream gradients of the batched program's outputs (batched for batched outputs), and
/// returns one gradient per feed of the batched program: batched for a batched feed, summed
/// over the examples for a shared one.
pub fn batch_gradient_program(
    gradient: &ir::Program,
    batched_feeds: &[bool],
    batched_outputs: &[bool],
    n: impl Into<BatchSize>,
) -> Result<ir::Program, BatchProgramError> {
    match n.into() {
        BatchSize::Known(n) => {
            batch_gradient_program_at(gradient, batched_feeds, batched_outputs, n)
        }
        BatchSize::RunTime => at_run_time(gradient, |n| {
            batch_gradient_program_at(gradient, batched_feeds, batched_outputs, n)
        }),
    }
}

/// [`batch_gradient_program`] with `n` known.
fn batch_gradient_program_at(
    gradient: &ir::Program,
    batched_feeds: &[bool],
    batched_outputs: &[bool],
    n: u64,
) -> Result<ir::Program, BatchProgramError> {
    let graph = check_batchable(gradient)?;
    let expected = batched_feeds.len() + batched_outputs.len();
    if gradient.feeds.len() != expected || graph.outputs.len() != batched_feeds.len() {
        return Err(BatchProgramError::Description {
            program: gradient.name.clone(),
            message: format!(
                "it has {} feed(s) and {} output(s), but a gradient program of a program with \
                 {} feed(s) and {} output(s) has {expected} and {}",
                gradient.feeds.len(),
                graph.outputs.len(),
                batched_feeds.len(),
                batched_outputs.len(),
                batched_feeds.len()
            ),
        });
    }
    let mut modes = vec![Mode::Shared; graph.inputs.len()];
    let feed_batched: Vec<bool> = batched_feeds
        .iter()
        .copied()
        .chain(std::iter::repeat_n(true, batched_outputs.len()))
        .collect();
    for (k, feed) in gradient.feeds.iter().enumerate() {
        let Some(i) = feed.graph_input else { continue };
        modes[i as usize] = match (k.checked_sub(batched_feeds.len()), feed_batched[k]) {
            (None, false) => Mode::Shared,
            (None, true) => Mode::Batched,
            (Some(j), _) if batched_outputs[j] => Mode::Batched,
            (Some(_), _) => Mode::FirstExample,
        };
    }
    let mut b = batch_graph(&gradient.name, graph, &modes, n)?;
    let mut outputs = Vec::with_capacity(graph.outputs.len());
    for (v, &batched) in graph.outputs.iter().zip(batched_feeds) {
        let value = b.map(v);
        outputs.push(if batched {
            b.ensure_batched(value)
        } else {
            b.sum_over_examples(value)
        });
    }
    b.graph.outputs = outputs;
    // The upstream gradients of unbatched outputs are fed unbatched.
    let fed_batched: Vec<bool> = batched_feeds
        .iter()
        .chain(batched_outputs)
        .copied()
        .collect();
    finish(gradient, b, fed_batched, n)
}

/// The batched program around the batched graph; checked.
fn finish(
    program: &ir::Program,
    b: Batcher,
    batched_feeds: Vec<bool>,
    n: u64,
) -> Result<ir::Program, BatchProgramError> {
    let feeds = program
        .feeds
        .iter()
        .zip(&batched_feeds)
        .map(|(f, &batched)| ir::ProgramFeed {
            r#type: f.r#type.as_ref().map(|t| {
                if batched {
                    batched_type(t, n)
                } else {
                    t.clone()
                }
            }),
            ..f.clone()
        })
        .collect();
    let out = ir::Program {
        version: program.version,
        name: batched_name(&program.name, n),
        libraries: kept_libraries(program, &b),
        graph: Some(b.graph),
        feeds,
        constants: program.constants.clone(),
    };
    // `check_program` validates the batched graph too.
    check_program(&out).map_err(|why| BatchProgramError::Malformed {
        program: out.name.clone(),
        why,
    })?;
    Ok(out)
}

/// [`batch_program`] and [`batch_gradient_program`] on sealed programs (what the `DynamicLib`
/// op carries): verifies and decodes `program` and `gradient` (empty: no gradient), batches
/// them, and seals the results.
pub fn batch_sealed(
    program: &[u8],
    gradient: &[u8],
    batched_feeds: &[bool],
    n: impl Into<BatchSize>,
) -> Result<SealedBatch, BatchProgramError> {
    let n = n.into();
    let forward = open_program(program, "the `program` attribute")?;
    let batched = batch_program(&forward, batched_feeds, n)?;
    let gradient = if gradient.is_empty() {
        Vec::new()
    } else {
        let gradient = open_program(gradient, "the `gradient` attribute")?;
        seal_program(&batch_gradient_program(
            &gradient,
            batched_feeds,
            &batched.batched_outputs,
            n,
        )?)
    };
    Ok(SealedBatch {
        program: seal_program(&batched.program),
        gradient,
        batched_outputs: batched.batched_outputs,
    })
}

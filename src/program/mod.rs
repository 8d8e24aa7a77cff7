//! Exported programs ([`ir::Program`]): the sealed byte format ([`seal_program`],
//! [`open_program`]: a digest checked before decoding), the checks every receiver runs
//! ([`check_program`]), and [`LoadedProgram`]: a program decoded, checked, compiled for a
//! target, planned, and run on buffers the caller owns (TensorFlow's tensors, without copies)
//! or on host tensors. [`run_program`] and the TensorFlow bridge's `DynamicLib` kernel both run
//! programs through [`LoadedProgram`], and it runs graphs through the one runner ([`ovl_runtime::plan`]).
//! The exporter that makes programs is [`crate::export`].

mod check;
mod stream;

pub use crate::error::program::{MalformedProgram, ProgramError, ProgramMismatch, SealError};
use crate::{executor, Error, Options};
pub use check::check_program;
use ovl_core::ir;
use ovl_core::{DType, HostTensor};
use ovl_runtime::plan::{Input, Kernel, Output, Plan, PlanError, RunFailure, Sig};
use std::ffi::c_void;
use std::fmt;
use std::sync::{Arc, Mutex};

/// How many plans (one per set of symbol values) a program with symbolic sizes keeps.
const SPECIALIZED_PLANS: usize = 16;

/// The first bytes of a sealed program (see [`seal_program`]); the SHA-256 digest of the
/// protobuf bytes follows, then those bytes. The Python package `ovl_tf` mirrors this
/// constant as `_SEALED_PROGRAM_HEADER`.
pub const SEALED_PROGRAM_HEADER: &[u8] = b"ovl.ir.Program sha256 v1\n";

/// The length of a SHA-256 digest, in bytes.
const DIGEST_BYTES: usize = 32;

/// The program as the bundle file and the `DynamicLib` op carry it:
/// [`SEALED_PROGRAM_HEADER`], the SHA-256 digest of the protobuf bytes of `program`, then those
/// bytes. [`open_program`] checks the digest before decoding, so that an edited or corrupted
/// program is an error instead of another program.
pub fn seal_program(program: &ir::Program) -> Vec<u8> {
    use prost::Message as _;
    use sha2::Digest as _;
    let payload = program.encode_to_vec();
    let mut out = Vec::with_capacity(SEALED_PROGRAM_HEADER.len() + DIGEST_BYTES + payload.len());
    out.extend_from_slice(SEALED_PROGRAM_HEADER);
    out.extend_from_slice(&sha2::Sha256::digest(&payload));
    out.extend_from_slice(&payload);
    out
}

/// Checks the header and the digest of a sealed program (see [`seal_program`]) and returns its
/// protobuf bytes, still undecoded. `what` names the bytes in the error.
pub fn verify_sealed<'a>(sealed: &'a [u8], what: &str) -> Result<&'a [u8], SealError> {
    use sha2::Digest as _;
    let what = || what.to_string();
    let Some(rest) = sealed.strip_prefix(SEALED_PROGRAM_HEADER) else {
        return Err(SealError::NoHeader { what: what() });
    };
    if rest.len() < DIGEST_BYTES {
        return Err(SealError::Truncated {
            what: what(),
            len: sealed.len(),
        });
    }
    let (digest, payload) = rest.split_at(DIGEST_BYTES);
    if sha2::Sha256::digest(payload).as_slice() != digest {
        return Err(SealError::Digest { what: what() });
    }
    Ok(payload)
}

/// Verifies (see [`verify_sealed`]) and decodes a sealed program. The result is not checked
/// further: run [`check_program`] on it before use.
pub fn open_program(sealed: &[u8], what: &str) -> Result<ir::Program, SealError> {
    let payload = verify_sealed(sealed, what)?;
    <ir::Program as prost::Message>::decode(payload).map_err(|e| SealError::Decode {
        what: what.to_string(),
        message: e.to_string(),
    })
}

/// The dtype and shape of an IR tensor type, or why it is not supported.
pub fn tensor_type_of(t: &ir::TensorType) -> Result<(DType, Vec<usize>), PlanError> {
    Sig::from_ir(t).map(|s| (s.dtype, s.shape))
}

/// The host tensor for constant `c` of `program` (after [`check_program`], which makes every
/// error but running out of memory impossible).
pub fn constant_tensor(
    program: &ir::Program,
    c: &ir::ProgramConstant,
) -> Result<HostTensor, ProgramError> {
    use MalformedProgram as M;
    let input = c.graph_input as usize;
    let t = program
        .graph
        .as_ref()
        .and_then(|g| g.inputs.get(input))
        .ok_or_else(|| M::NoSuchInput {
            what: "a constant".into(),
            input: c.graph_input,
        })?;
    let (dtype, shape) = tensor_type_of(t).map_err(M::Type)?;
    let mut h = HostTensor::try_zeros(dtype, &shape)?;
    let len = h.len() * dtype.size();
    if c.data.len() != len {
        return Err(M::ConstantLength {
            input,
            holds: c.data.len(),
            ty: format!("{dtype}{shape:?}"),
            needs: len,
        }
        .into());
    }
    if dtype == DType::Bool && c.data.iter().any(|&b| b > 1) {
        return Err(M::BoolConstant { input }.into());
    }
    // SAFETY: `h` owns `len` bytes of initialized elements; every byte pattern is a valid
    // value of the numeric dtypes, and bool bytes were checked to be 0 or 1.
    unsafe { std::ptr::copy_nonoverlapping(c.data.as_ptr(), h.data.as_mut_ptr(), len) };
    Ok(h)
}

/// Runs an exported program on host tensors (one per feed, in order), the way the TensorFlow
/// kernel does (through the same [`crate::program::LoadedProgram`]): for tests and for callers
/// without TensorFlow. Returns the outputs in order.
pub fn run_program(
    program: &ir::Program,
    feeds: Vec<HostTensor>,
    options: &Options,
) -> Result<Vec<HostTensor>, Error> {
    let loaded = LoadedProgram::new(program.clone(), options).map_err(|e| match e {
        ProgramError::Compile { source, .. } => *source,
        e => Error::Program(Box::new(e)),
    })?;
    let feeds: Vec<&HostTensor> = feeds.iter().collect();
    loaded
        .run_host(&feeds, options.threads)
        .map_err(|e| match e {
            ProgramError::Run { source, .. } => (*source).into(),
            e => Error::Program(Box::new(e)),
        })
}

/// The TensorFlow name of a dtype (`tf.as_dtype` accepts it): the dtype table's
/// [`DType::framework_name`].
pub fn tensorflow_dtype_name(dtype: DType) -> &'static str {
    dtype.framework_name()
}

/// Where the data of one graph input comes from.
#[derive(Clone, Copy, Debug)]
enum Source {
    /// Feed `k` of the call.
    Feed(usize),
    /// Constant `c` of the program.
    Constant(usize),
}

/// A program ready to run.
///
/// A program may have sizes known only when it runs (symbolic sizes, see
/// [`crate::as_tensorflow_polymorphic`]): its operators are compiled once, and each call
/// [`bind`](Self::bind)s the shapes fed to symbol values and a plan for them (a few plans are
/// kept).
pub struct LoadedProgram {
    /// The program's name.
    pub name: String,
    /// One per feed: its name and type. A dimension sized at run time holds the size of one
    /// example here; [`feed_dims`](Self::feed_dims) says which.
    pub feeds: Vec<(String, Sig)>,
    /// One per output (sizes at run time as for `feeds`; see [`output_dims`](Self::output_dims)).
    pub outputs: Vec<Sig>,
    /// The program's graph (symbolic when the program is).
    dag: Arc<ir::OperatorDag>,
    /// The plan of a concrete program.
    plan: Option<Arc<Plan>>,
    /// Plans of a symbolic program, per symbol values.
    plans: Mutex<ovl_core::lru::Lru<Vec<u64>, Arc<Plan>>>,
    feed_types: Vec<ir::TensorType>,
    output_types: Vec<ir::TensorType>,
    kernels: Vec<Kernel>,
    constants: Vec<HostTensor>,
    /// Per graph input: where its data comes from.
    sources: Vec<Source>,
    /// What runs on callers' streams keep per device (`stream.rs`).
    streams: ovl_runtime::cuda::stream::Residents,
}

/// A program's shapes for one call: the symbol values the fed shapes give, the outputs'
/// types, and the plan that runs them ([`LoadedProgram::bind`]).
#[derive(Clone, Debug)]
pub struct Binding {
    /// The value of each of the program's symbols (empty for a concrete program).
    pub symbols: Vec<u64>,
    /// The outputs' types for this call.
    pub outputs: Vec<Sig>,
    plan: Arc<Plan>,
}

impl fmt::Debug for LoadedProgram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadedProgram")
            .field("name", &self.name)
            .field("kernels", &self.kernels.len())
            .finish_non_exhaustive()
    }
}

/// `float32[2, 3]`: a type as TensorFlow users read it.
pub fn tensorflow_type_name(sig: &Sig) -> String {
    format!("{}{:?}", tensorflow_dtype_name(sig.dtype), sig.shape)
}

impl LoadedProgram {
    /// Verifies the digest of a sealed program ([`crate::program::seal_program`]), decodes and
    /// checks it, and compiles its operators for `options.target` (or finds them in the
    /// operator cache).
    pub fn load(sealed: &[u8], options: &Options) -> Result<LoadedProgram, ProgramError> {
        let program = open_program(sealed, "the `program` attribute")?;
        LoadedProgram::new(program, options)
    }

    /// Checks a program and compiles its operators for `options.target`. On [`crate::Target::Cpu`]
    /// an operator whose compiled library the program carries (`libraries`, see
    /// [`crate::TfExport::embed_libraries`]) is loaded from it when it was compiled for this
    /// machine's target (no C++ compiler needed), and compiled otherwise.
    pub fn new(program: ir::Program, options: &Options) -> Result<LoadedProgram, ProgramError> {
        check_program(&program)?;
        let mut sources = vec![None; program.graph.as_ref().map_or(0, |g| g.inputs.len())];
        let mut feeds = Vec::with_capacity(program.feeds.len());
        for (k, f) in program.feeds.iter().enumerate() {
            let sig = Sig::from_ir(f.r#type.as_ref().unwrap_or(&Default::default()))?;
            feeds.push((f.name.clone(), sig));
            if let Some(i) = f.graph_input {
                sources[i as usize] = Some(Source::Feed(k));
            }
        }
        let mut constants = Vec::with_capacity(program.constants.len());
        for c in &program.constants {
            sources[c.graph_input as usize] = Some(Source::Constant(constants.len()));
            constants.push(constant_tensor(&program, c)?);
        }
        let sources = sources
            .iter()
            .enumerate()
            .map(|(input, s)| s.ok_or(MalformedProgram::Supplied { input, supplied: 0 }))
            .collect::<Result<Vec<_>, _>>()?;
        let name = program.name;
        let dag = program.graph.unwrap_or_default();
        let kernels =
            executor::kernels_with_libraries(&dag, &program.libraries, options).map_err(|e| {
                ProgramError::Compile {
                    program: name.clone(),
                    source: Box::new(e),
                }
            })?;
        let feed_types: Vec<ir::TensorType> = program
            .feeds
            .iter()
            .map(|f| f.r#type.clone().unwrap_or_default())
            .collect();
        let output_types = dag
            .outputs
            .iter()
            .enumerate()
            .map(|(output, o)| {
                ovl_core::validate::value_type(&dag, o)
                    .cloned()
                    .map_err(|why| MalformedProgram::Output { output, why })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let outputs = output_types
            .iter()
            .map(Sig::from_ir)
            .collect::<Result<Vec<_>, _>>()?;
        let dag = Arc::new(dag);
        let plan = if ovl_core::symbolic::is_symbolic_graph(&dag) {
            None
        } else {
            Some(Arc::new(Plan::new(dag.clone())?))
        };
        Ok(LoadedProgram {
            outputs,
            name,
            feeds,
            dag,
            plan,
            plans: Mutex::new(ovl_core::lru::Lru::new(SPECIALIZED_PLANS)),
            feed_types,
            output_types,
            kernels,
            constants,
            sources,
            streams: Default::default(),
        })
    }

    /// The names of the program's symbols (the sizes known only at run time, e.g. `batch`);
    /// empty for a program with fixed shapes.
    pub fn symbols(&self) -> &[String] {
        &self.dag.symbols
    }

    /// Each feed's dimensions: `Some(size)`, or `None` for a size known only at run time.
    pub fn feed_dims(&self) -> Vec<Vec<Option<usize>>> {
        self.feed_types.iter().map(dims_of).collect()
    }

    /// Each output's dimensions: `Some(size)`, or `None` for a size known only at run time.
    pub fn output_dims(&self) -> Vec<Vec<Option<usize>>> {
        self.output_types.iter().map(dims_of).collect()
    }

    /// A feed's or output's type as text, with run-time sizes by name: `float32[batch, 200]`.
    fn type_text(&self, t: &ir::TensorType) -> String {
        let dtype = DType::from_ir(t.dtype).map_or("?", tensorflow_dtype_name);
        let shape = ovl_core::symbolic::shape_text(&t.shape, &t.symbolic, &self.dag.symbols);
        format!("{dtype}{shape}")
    }

    /// Binds the shapes of one call's feeds: the symbol values they give (inputs that share a
    /// symbolic dimension must agree), the outputs' shapes, and the plan (made once per set of
    /// values, compiling nothing: the kernels take the values at run time).
    pub fn bind(&self, shapes: &[&[usize]]) -> Result<Binding, ProgramError> {
        if shapes.len() != self.feeds.len() {
            return Err(self.mismatch(ProgramMismatch::InputCount {
                given: shapes.len(),
                inputs: self.feeds.len(),
            }));
        }
        if let Some(plan) = &self.plan {
            for (k, shape) in shapes.iter().enumerate() {
                self.check_feed(k, self.feeds[k].1.dtype, shape)?;
            }
            return Ok(Binding {
                symbols: Vec::new(),
                outputs: self.outputs.clone(),
                plan: plan.clone(),
            });
        }
        let shapes64: Vec<Vec<u64>> = shapes
            .iter()
            .map(|s| s.iter().map(|&d| d as u64).collect())
            .collect();
        let types: Vec<&ir::TensorType> = self.feed_types.iter().collect();
        let slices: Vec<&[u64]> = shapes64.iter().map(|s| s.as_slice()).collect();
        let what = |k: usize| format!("input {k} (`{}`)", self.feeds[k].0);
        let symbols = ovl_core::symbolic::solve_symbols(&types, &slices, &self.dag.symbols, &what)
            .map_err(|e| self.mismatch(e))?;
        let cached = self.plans.lock().ok().and_then(|mut p| p.get(&symbols));
        let plan = match cached {
            Some(plan) => plan,
            None => {
                let plan =
                    Arc::new(Plan::specialized(&self.dag, &symbols).map_err(|e| self.mismatch(e))?);
                if let Ok(mut plans) = self.plans.lock() {
                    plans.insert(symbols.clone(), plan.clone());
                }
                plan
            }
        };
        Ok(Binding {
            outputs: plan.outputs().to_vec(),
            symbols,
            plan,
        })
    }

    /// The largest estimated work of one compiled kernel of a run with `binding` (its workers
    /// times the cost of a worker, see [`ovl_runtime::CompiledOperator::work`]; 0 for kernels
    /// that are not compiled C++): what a caller compares with a threshold to decide whether
    /// a run should stay on its own thread (`threads` = 1).
    pub fn largest_work(&self, binding: &Binding) -> u64 {
        let symbols = binding.plan.symbols();
        self.kernels
            .iter()
            .map(|k| match k {
                Kernel::Cpu(op) => {
                    let values = symbols.get(..op.symbol_count()).unwrap_or(symbols);
                    op.work(values).unwrap_or(u64::MAX)
                }
                _ => 0,
            })
            .max()
            .unwrap_or(0)
    }

    /// The number of kernels (compiled operators) a run launches.
    pub fn kernel_count(&self) -> usize {
        self.kernels.len()
    }

    fn mismatch(&self, problem: impl Into<ProgramMismatch>) -> ProgramError {
        ProgramError::Mismatch {
            program: self.name.clone(),
            problem: Box::new(problem.into()),
        }
    }

    /// Checks that feed `k` may be a tensor of `dtype` and `shape`.
    pub fn check_feed(&self, k: usize, dtype: DType, shape: &[usize]) -> Result<(), ProgramError> {
        let (name, sig) = self
            .feeds
            .get(k)
            .ok_or_else(|| self.mismatch(ProgramMismatch::NoSuchInput { input: k }))?;
        let t = &self.feed_types[k];
        if !t.symbolic.is_empty() {
            // The sizes known at export must match; the others are checked by `bind`.
            let fits = sig.dtype == dtype
                && shape.len() == sig.shape.len()
                && dims_of(t)
                    .iter()
                    .zip(shape)
                    .all(|(d, &n)| d.is_none_or(|d| d == n));
            if !fits {
                return Err(self.mismatch(ProgramMismatch::InputType {
                    input: k,
                    name: name.clone(),
                    given: format!("{}{shape:?}", tensorflow_dtype_name(dtype)),
                    exported: self.type_text(t),
                }));
            }
            return Ok(());
        }
        if sig.dtype != dtype || sig.shape != shape {
            return Err(self.mismatch(ProgramMismatch::InputType {
                input: k,
                name: name.clone(),
                given: format!("{}{shape:?}", tensorflow_dtype_name(dtype)),
                exported: tensorflow_type_name(sig),
            }));
        }
        Ok(())
    }

    fn inputs<'a>(&'a self, feeds: &[Input<'a>]) -> Vec<Input<'a>> {
        self.sources
            .iter()
            .map(|s| match *s {
                Source::Feed(k) => feeds[k],
                Source::Constant(c) => Input::Host(&self.constants[c]),
            })
            .collect()
    }

    fn counts(&self, feeds: usize, outputs: usize) -> Result<(), ProgramError> {
        if feeds != self.feeds.len() || outputs != self.outputs.len() {
            return Err(self.mismatch(ProgramMismatch::Counts {
                inputs: feeds,
                outputs,
                program_inputs: self.feeds.len(),
                program_outputs: self.outputs.len(),
            }));
        }
        Ok(())
    }

    fn run_failure(&self, source: RunFailure) -> ProgramError {
        match source {
            RunFailure::Mismatch(m) => self.mismatch(m),
            source => ProgramError::Run {
                program: self.name.clone(),
                source: Box::new(source),
            },
        }
    }

    /// Runs the program on `threads` threads (0: one per core).
    ///
    /// # Safety
    /// `feeds[k]` must point to the elements of feed `k` (of its declared type, as checked by
    /// [`check_feed`](Self::check_feed)), readable for the call; `outputs[k]` to a writable
    /// buffer of [`outputs`](Self::outputs)`[k]`'s size, not overlapping any other buffer.
    /// Outputs no worker writes in full are zero-filled first.
    pub unsafe fn run(
        &self,
        feeds: &[*const c_void],
        outputs: &[*mut c_void],
        threads: usize,
    ) -> Result<(), ProgramError> {
        let Some(plan) = &self.plan else {
            return Err(self.mismatch(ProgramMismatch::NotBound {
                symbols: self.symbols().to_vec(),
            }));
        };
        // SAFETY: forwarded to the caller.
        unsafe { self.run_plan(plan, feeds, outputs, threads) }
    }

    /// Runs the program for a [`Binding`] of its feeds' shapes on `threads` threads (0: one per
    /// core).
    ///
    /// # Safety
    /// `feeds[k]` must point to the elements of feed `k`, of its dtype and of the shape that was
    /// bound, readable for the call; `outputs[k]` to a writable buffer of
    /// `binding.outputs[k]`'s size, not overlapping any other buffer. Outputs no worker writes
    /// in full are zero-filled first.
    pub unsafe fn run_bound(
        &self,
        binding: &Binding,
        feeds: &[*const c_void],
        outputs: &[*mut c_void],
        threads: usize,
    ) -> Result<(), ProgramError> {
        // SAFETY: forwarded to the caller.
        unsafe { self.run_plan(&binding.plan, feeds, outputs, threads) }
    }

    /// Runs `plan` (the concrete program's, or a binding's) on the caller's buffers.
    ///
    /// # Safety
    /// As for [`run_bound`](Self::run_bound), with the shapes `plan` was made for.
    unsafe fn run_plan(
        &self,
        plan: &Plan,
        feeds: &[*const c_void],
        outputs: &[*mut c_void],
        threads: usize,
    ) -> Result<(), ProgramError> {
        self.counts(feeds.len(), outputs.len())?;
        // The graph inputs and outputs on the stack for the common case of few (a small
        // program's run allocates nothing here).
        const INLINE: usize = 8;
        if self.sources.len() <= INLINE && outputs.len() <= INLINE {
            let mut inputs = [Input::Raw(std::ptr::null()); INLINE];
            for (slot, source) in inputs.iter_mut().zip(&self.sources) {
                *slot = match *source {
                    Source::Feed(k) => Input::Raw(feeds[k]),
                    Source::Constant(c) => Input::Host(&self.constants[c]),
                };
            }
            let mut outs: [Output; INLINE] = std::array::from_fn(|k| {
                Output::Raw(outputs.get(k).copied().unwrap_or(std::ptr::null_mut()))
            });
            // SAFETY: forwarded to the caller (feeds and outputs); constants are host tensors.
            return unsafe {
                plan.run(
                    &self.kernels,
                    &inputs[..self.sources.len()],
                    &mut outs[..outputs.len()],
                    threads,
                    None,
                )
            }
            .map_err(|e| self.run_failure(e));
        }
        let feeds: Vec<Input> = feeds.iter().map(|&p| Input::Raw(p)).collect();
        let inputs = self.inputs(&feeds);
        let mut outs: Vec<Output> = outputs.iter().map(|&p| Output::Raw(p)).collect();
        // SAFETY: forwarded to the caller (feeds and outputs); constants are host tensors.
        unsafe { plan.run(&self.kernels, &inputs, &mut outs, threads, None) }
            .map_err(|e| self.run_failure(e))
    }

    /// Runs the program on host tensors (one per feed, of its type) and returns the outputs.
    pub fn run_host(
        &self,
        feeds: &[&HostTensor],
        threads: usize,
    ) -> Result<Vec<HostTensor>, ProgramError> {
        self.counts(feeds.len(), self.outputs.len())?;
        for (k, t) in feeds.iter().enumerate() {
            self.check_feed(k, t.dtype(), &t.shape)?;
        }
        let shapes: Vec<&[usize]> = feeds.iter().map(|t| t.shape.as_slice()).collect();
        let binding = self.bind(&shapes)?;
        let feeds: Vec<Input> = feeds.iter().map(|&t| Input::Host(t)).collect();
        let inputs = self.inputs(&feeds);
        let mut buffers: Vec<HostTensor> = binding
            .outputs
            .iter()
            .map(|s| HostTensor::try_zeros(s.dtype, &s.shape))
            .collect::<Result<_, _>>()
            .map_err(|e| self.run_failure(RunFailure::OutOfMemory(e)))?;
        let mut outs: Vec<Output> = buffers
            .iter_mut()
            .map(|tensor| Output::Host {
                tensor,
                zeroed: true,
            })
            .collect();
        binding
            .plan
            .run_host(&self.kernels, &inputs, &mut outs, threads, None)
            .map_err(|e| self.run_failure(e))?;
        drop(outs);
        Ok(buffers)
    }
}

/// A type's dimensions, `None` where the size is known only at run time.
fn dims_of(t: &ir::TensorType) -> Vec<Option<usize>> {
    t.shape
        .iter()
        .enumerate()
        .map(
            |(k, &n)| match ovl_core::symbolic::symbolic_dim(&t.symbolic, k) {
                Some(_) => None,
                None => Some(n as usize),
            },
        )
        .collect()
}

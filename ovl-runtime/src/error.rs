//! Why a graph cannot be planned ([`PlanError`], [`Wiring`]) or a run failed ([`RunFailure`],
//! [`Mismatch`]).

/// Why a graph cannot be planned: it is malformed (a damaged or hand-made program; fusion and
/// `evaluate` only make well-formed graphs).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// A tensor type has a dtype ovl does not know.
    #[error("unsupported dtype {0} in IR")]
    UnsupportedDType(i32),
    /// A dimension does not fit in memory addresses.
    #[error("dimension {0} is too large")]
    DimensionTooLarge(u64),
    /// The graph has sizes known only at run time.
    #[error(
        "the graph has sizes known only at run time ({symbols}); plan it with \
         `Plan::specialized` and the symbol values"
    )]
    Symbolic {
        /// The symbols' names.
        symbols: String,
    },
    /// The symbol values do not fit the graph (boxed: errors stay small).
    #[error(transparent)]
    Symbols(Box<ovl_core::symbolic::SymbolError>),
    /// The wiring does not match the operators, or names a tensor that does not exist.
    #[error(transparent)]
    Wiring(#[from] Wiring),
    /// An operator reads an input before it is computed.
    #[error("the operators are not in a topological order")]
    NotTopological,
    /// An operator input has another type than its source.
    #[error("an input of operator {operator} (`{name}`) has another type than its source")]
    TypeMismatch {
        /// The operator's index.
        operator: usize,
        /// Its name.
        name: String,
    },
}

/// What is wrong with a graph's wiring (which output or operator).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Wiring {
    /// Not one wiring entry per operator.
    #[error("the graph's operator wiring does not match its operators")]
    OperatorCount,
    /// A requested output naming a graph input that does not exist.
    #[error("output {output} names graph input {input}, which does not exist")]
    NoSuchGraphInput {
        /// The output's number.
        output: usize,
        /// The input it names.
        input: u32,
    },
    /// A requested output naming an operator output that does not exist.
    #[error("output {output} names output {of} of operator {operator}, which does not exist")]
    NoSuchOutput {
        /// The requested output's number.
        output: usize,
        /// The operator it names.
        operator: u32,
        /// The operator output it names.
        of: u32,
    },
    /// A requested output without a source.
    #[error("output {output} has no source")]
    NoSource {
        /// The output's number.
        output: usize,
    },
    /// An operator wired to another number of inputs than it takes.
    #[error("operator {operator} (`{name}`) takes {takes} inputs but is wired to {wired}")]
    InputCount {
        /// The operator's number.
        operator: usize,
        /// Its name.
        name: String,
        /// The inputs it takes.
        takes: usize,
        /// The inputs it is wired to.
        wired: usize,
    },
    /// An operator input naming an operator output that does not exist.
    #[error("input {input} of operator {operator} names an operator output that does not exist")]
    NoSuchOperatorOutput {
        /// The operator's number.
        operator: usize,
        /// Its input's number.
        input: usize,
    },
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum RunFailure {
    /// A buffer does not fit the graph (count, dtype or shape).
    #[error(transparent)]
    Mismatch(#[from] Mismatch),
    /// The interpreter failed (for example an index out of bounds).
    #[error(transparent)]
    Interpreter(#[from] ovl_core::interp::InterpError),
    /// A compiled kernel failed (for example an index out of bounds).
    #[error(transparent)]
    Run(#[from] ovl_codegen::RunError),
    /// A device tensor could not be allocated, copied, or has another type than expected.
    #[error(transparent)]
    Device(#[from] crate::cuda::DeviceError),
    /// An intermediate or output buffer could not be allocated.
    #[error(transparent)]
    OutOfMemory(#[from] ovl_core::AllocError),
}

/// What does not fit when buffers are handed to a graph's run: counts, dtypes and shapes,
/// layouts, device placement. Each names the buffer it is about.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Mismatch {
    /// A device tensor made into a lazy handle of another element type.
    #[error("the device tensor is {given}, but a Lazy<{wanted}> holds {wanted} elements")]
    DeviceDtype {
        /// The tensor's dtype and shape, e.g. `f32[2, 3]`.
        given: String,
        /// The handle's element type.
        wanted: ovl_core::DType,
    },
    /// Not as many output arrays as the graph has outputs.
    #[error("{outputs} outputs but {arrays} arrays to write them into")]
    OutputCount {
        /// The graph's outputs.
        outputs: usize,
        /// The arrays given.
        arrays: usize,
    },
    /// An output array whose elements are not its whole buffer in row-major order.
    #[error("the output array is not in row-major order or is a view into a larger buffer")]
    NotRowMajor,
    /// The plan was given other numbers of kernels, inputs or outputs than its graph has.
    #[error(
        "{kernels} kernels, {inputs} {kind}inputs and {outputs} {kind}outputs given; the graph has \
         {graph_kernels}, {graph_inputs} and {graph_outputs}",
        kind = if *.device { "device " } else { "" }
    )]
    Counts {
        /// Device tensors (rather than host buffers) were given.
        device: bool,
        /// Kernels given.
        kernels: usize,
        /// Inputs given.
        inputs: usize,
        /// Outputs given.
        outputs: usize,
        /// The graph's operators.
        graph_kernels: usize,
        /// The graph's inputs.
        graph_inputs: usize,
        /// The graph's outputs.
        graph_outputs: usize,
    },
    /// A graph input of another dtype or shape than the graph reads.
    #[error("graph input {input} is {given}, the graph reads {wanted}")]
    Input {
        /// The input's number.
        input: usize,
        /// Its dtype and shape, e.g. `f32[2, 3]`.
        given: String,
        /// What the graph reads.
        wanted: String,
    },
    /// An output array of another dtype or shape than the graph makes.
    #[error("the array for output {output} is {given}, but the graph makes {wanted}")]
    Output {
        /// The output's number.
        output: usize,
        /// Its dtype and shape.
        given: String,
        /// What the graph makes.
        wanted: String,
    },
    /// Raw buffers passed where only host tensors are taken.
    #[error("run_host takes host tensors only; raw buffers need Plan::run")]
    RawBuffers,
    /// An output device tensor sharing its memory with another tensor of the run.
    #[error(
        "output {output} shares its device memory with another tensor passed (a clone); pass a \
         tensor of its own"
    )]
    SharedDeviceMemory {
        /// The output's number.
        output: usize,
    },
    /// A library call (GEMM) whose operands do not fit it, or the kernel prepared for it.
    #[error("library call `{name}`: {problem}")]
    LibraryCall {
        /// The call's operator name.
        name: String,
        /// What does not fit.
        problem: String,
    },
    /// Device tensors given to a graph with an operator compiled for another target.
    #[error(
        "operator {operator} (`{name}`) was not compiled for the GPU: device tensors need a \
         graph compiled with `Options::cuda()`"
    )]
    NotCompiledForGpu {
        /// The operator's number in the fused graph.
        operator: usize,
        /// Its name.
        name: String,
    },
}

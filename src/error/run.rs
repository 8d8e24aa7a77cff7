//! Why a graph cannot be planned or a run failed: the runner's errors (`crate::runner`
//! re-exports them). They live here, with the facade's other errors, so that no module of the
//! crate and `error` import each other.

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
    Mismatch(#[from] super::Mismatch),
    /// The interpreter failed (for example an index out of bounds).
    #[error(transparent)]
    Interpreter(#[from] ovl_core::interp::InterpError),
    /// A compiled kernel failed (for example an index out of bounds).
    #[error(transparent)]
    Run(#[from] ovl_codegen::RunError),
    /// A device tensor could not be allocated, copied, or has another type than expected.
    #[error(transparent)]
    Device(#[from] ovl_codegen::cuda::DeviceError),
    /// An intermediate or output buffer could not be allocated.
    #[error(transparent)]
    OutOfMemory(#[from] ovl_core::AllocError),
}

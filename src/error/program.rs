//! Why a program could not be loaded or run, and why its bytes or its tensors were refused:
//! the errors of `crate::program` (which re-exports them). Here, beside [`crate::Error`], which
//! holds a `ProgramError` and which `ProgramError::Compile` holds, so that `error` and
//! `program` do not import each other.

use ovl_core::symbolic::SymbolError;
use ovl_core::validate::{BadValueRef, ValidationError};
use ovl_runtime::{PlanError, RunFailure};

/// Why sealed program bytes (a bundle's `program` or `gradient`, the `DynamicLib` op's
/// attributes) were refused before decoding. `what` names them (`bundle "x.json" (program)`,
/// "the `program` attribute of DynamicLib `node`").
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// The bytes do not start with [`crate::program::SEALED_PROGRAM_HEADER`].
    #[error(
        "{what}: the program was modified or corrupted: it does not start with the header of a \
         sealed ovl program (or an older ovl exported it); export it again"
    )]
    NoHeader {
        /// The program's origin.
        what: String,
    },
    /// The header is there but the digest is cut short.
    #[error(
        "{what}: the program was modified or corrupted: it is truncated ({len} bytes, shorter \
         than its header and digest); export it again"
    )]
    Truncated {
        /// The program's origin.
        what: String,
        /// The length of the bytes.
        len: usize,
    },
    /// The digest does not match the protobuf bytes.
    #[error(
        "{what}: the program was modified or corrupted: its SHA-256 digest does not match its \
         contents; export it again"
    )]
    Digest {
        /// The program's origin.
        what: String,
    },
    /// The digest matches but the bytes are not an `ovl.ir.Program` (an incompatible ovl).
    #[error(
        "{what}: the program's digest matches but it does not decode as ovl.ir.Program \
         ({message}): an incompatible ovl exported it; export it again"
    )]
    Decode {
        /// The program's origin.
        what: String,
        /// The decoder's message.
        message: String,
    },
}

/// Why a program could not be loaded or run.
#[derive(Debug, thiserror::Error)]
pub enum ProgramError {
    /// The sealed program was modified or corrupted: its digest does not match (checked
    /// before decoding).
    #[error(transparent)]
    Modified(#[from] SealError),
    /// The program is malformed (its digest matched): what is wrong, and where.
    #[error("the `program` attribute is not a valid ovl program ({0}); re-export the bundle")]
    Corrupt(#[from] MalformedProgram),
    /// A constant of the program could not be allocated.
    #[error(transparent)]
    OutOfMemory(#[from] ovl_core::AllocError),
    /// The program's graph cannot be planned: it is malformed (its digest matched).
    #[error("the `program` attribute is not a valid ovl program ({0}); re-export the bundle")]
    Malformed(#[from] PlanError),
    /// Generating, compiling or loading an operator failed.
    #[error("program `{program}`: {source}")]
    Compile {
        /// The program.
        program: String,
        /// The cause (carries the compiler log and the source path).
        source: Box<crate::Error>,
    },
    /// Running an operator failed (for example an index out of bounds).
    #[error("program `{program}`: {source}")]
    Run {
        /// The program.
        program: String,
        /// The cause.
        source: Box<RunFailure>,
    },
    /// A tensor passed does not fit the program.
    #[error("program `{program}`: {problem}")]
    Mismatch {
        /// The program.
        program: String,
        /// What does not fit (boxed: it names tensors and types, and errors stay small).
        problem: Box<ProgramMismatch>,
    },
}

/// Why a program breaks the invariants of `proto/ovl.proto`'s `Program` (what and where).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MalformedProgram {
    /// Another IR version than this ovl reads.
    #[error("the program has IR version {found}, this ovl reads version {reads}")]
    Version {
        /// The program's.
        found: u32,
        /// This ovl's (`IR_VERSION`).
        reads: u32,
    },
    /// No operator graph.
    #[error("the program has no graph")]
    NoGraph,
    /// A feed without a tensor type.
    #[error("feed {feed} has no type")]
    UntypedFeed {
        /// The feed's number.
        feed: usize,
    },
    /// A tensor type ovl does not support.
    #[error(transparent)]
    Type(PlanError),
    /// A feed or constant naming a graph input that does not exist.
    #[error("{what} names graph input {input}, which does not exist")]
    NoSuchInput {
        /// "feed 2", "a constant".
        what: String,
        /// The input's number.
        input: u32,
    },
    /// A feed whose type differs from the graph input it feeds.
    #[error("feed {feed} has another type than graph input {input} that it feeds")]
    FeedType {
        /// The feed's number.
        feed: usize,
        /// The input's number.
        input: u32,
    },
    /// A constant for a graph input with a size known only at run time.
    #[error(
        "the constant for graph input {input} has a size known only at run time; constants have \
         fixed sizes"
    )]
    SymbolicConstant {
        /// The input's number.
        input: usize,
    },
    /// A constant of more bytes than any buffer.
    #[error("the constant for graph input {input} is too large")]
    ConstantTooLarge {
        /// The input's number.
        input: usize,
    },
    /// A constant holding another number of bytes than its type needs.
    #[error(
        "the constant for graph input {input} holds {holds} bytes, its type {ty} needs {needs}"
    )]
    ConstantLength {
        /// The input's number.
        input: usize,
        /// Bytes held.
        holds: usize,
        /// Its dtype and shape, e.g. `f32[2, 3]`.
        ty: String,
        /// Bytes needed.
        needs: usize,
    },
    /// A bool constant with a byte other than 0 or 1.
    #[error("the bool constant for graph input {input} holds a byte other than 0 or 1")]
    BoolConstant {
        /// The input's number.
        input: usize,
    },
    /// A graph input fed or constant other than exactly once.
    #[error(
        "graph input {input} is {} by {supplied} feeds and constants; it must be fed or \
         constant exactly once",
        if *.supplied == 0 { "not supplied" } else { "supplied twice" }
    )]
    Supplied {
        /// The input's number.
        input: usize,
        /// How many feeds and constants supply it.
        supplied: u32,
    },
    /// A compiled library naming an operator that does not exist.
    #[error("a compiled library names operator {operator}, which does not exist")]
    NoSuchOperator {
        /// The operator's number.
        operator: u32,
    },
    /// Two compiled libraries for one operator.
    #[error("operator {operator} has two compiled libraries; it may have one")]
    TwoLibraries {
        /// The operator's number.
        operator: u32,
    },
    /// Operator wiring not parallel to the operators.
    #[error("the graph's operator wiring does not match its operators")]
    Wiring,
    /// The operator graph fails validation (boxed: errors stay small).
    #[error(transparent)]
    Invalid(Box<ValidationError>),
    /// A graph output names no tensor.
    #[error("graph output {output}: {why}")]
    Output {
        /// The output's number.
        output: usize,
        /// What its reference names instead.
        why: BadValueRef,
    },
}

/// Why the tensors given to a [`crate::program::LoadedProgram`] do not fit it (the program's name is in
/// [`ProgramError::Mismatch`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProgramMismatch {
    /// An input number past the program's feeds.
    #[error("there is no input {input}")]
    NoSuchInput {
        /// The number asked for.
        input: usize,
    },
    /// Not as many input shapes as the program has feeds.
    #[error("{given} inputs given, the program has {inputs}")]
    InputCount {
        /// Shapes given.
        given: usize,
        /// The program's feeds.
        inputs: usize,
    },
    /// Not as many input and output buffers as the program has feeds and outputs.
    #[error(
        "{inputs} inputs and {outputs} outputs given, the program has {program_inputs} and \
         {program_outputs}"
    )]
    Counts {
        /// Inputs given.
        inputs: usize,
        /// Outputs given.
        outputs: usize,
        /// The program's feeds.
        program_inputs: usize,
        /// The program's outputs.
        program_outputs: usize,
    },
    /// An input of another dtype or shape than the program was exported for.
    #[error("input {input} (`{name}`) is {given}, but the program was exported for {exported}")]
    InputType {
        /// The input's number.
        input: usize,
        /// Its name.
        name: String,
        /// Its dtype and shape as TensorFlow spells them, e.g. `float32[4, 6]`.
        given: String,
        /// What the program takes, run-time sizes by name: `float32[batch, 6]`.
        exported: String,
    },
    /// The fed shapes give no consistent value of a size known only at run time.
    #[error(transparent)]
    Symbols(#[from] SymbolError),
    /// The program's graph does not fit the symbol values the fed shapes give.
    #[error(transparent)]
    Specialize(#[from] PlanError),
    /// A buffer given to a run does not fit its plan.
    #[error(transparent)]
    Run(#[from] crate::Mismatch),
    /// A program with run-time sizes run without binding its inputs' shapes first.
    #[error(
        "the program has sizes known only at run time ({}): bind the shapes of the inputs first \
         (`bind`, then `run_bound`)",
        .symbols.join(", ")
    )]
    NotBound {
        /// The names of its sizes known only at run time.
        symbols: Vec<String>,
    },
}

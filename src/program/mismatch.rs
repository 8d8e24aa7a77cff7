//! What does not fit when a loaded program is bound or run: counts, types, symbol values.

use crate::runner::PlanError;
use ovl_core::symbolic::SymbolError;

/// Why the tensors given to a [`super::LoadedProgram`] do not fit it (the program's name is in
/// [`super::ProgramError::Mismatch`]).
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

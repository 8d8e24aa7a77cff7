//! Why an export (`ovl::as_tensorflow`, `ovl::as_tensorflow_polymorphic`) failed: the reason
//! that [`crate::Error::Export`] carries with the exported program's name.

use super::program::MalformedProgram;
use super::CompiledError;
use crate::options::Target;
use thiserror::Error;

/// What was wrong with the inputs, outputs or gradient of an export.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ExportError {
    /// Compiled libraries can be embedded for the CPU only.
    #[error("embedding compiled libraries needs Target::Cpu, the options say {target:?}")]
    EmbedNeedsCpu {
        /// The options' target.
        target: Target,
    },
    /// No output to export.
    #[error("there is no output to export")]
    NoOutput,
    /// Not one gradient tensor per output (upstream) or per input.
    #[error("{given} {what}(s) given for {expected} {of}(s); give one per {of}")]
    GradientCount {
        /// "upstream gradient" or "input gradient".
        what: &'static str,
        /// How many were given.
        given: usize,
        /// "output" or "input".
        of: &'static str,
        /// How many there are.
        expected: usize,
    },
    /// A gradient tensor of another type than its output or input.
    #[error("{what} {index} is {given}, but {of} {index} is {expected}")]
    GradientType {
        /// "upstream gradient" or "input gradient".
        what: &'static str,
        /// Its number.
        index: usize,
        /// Its type, e.g. `f32[3]`.
        given: String,
        /// "output" or "input".
        of: &'static str,
        /// The type of the output or input, e.g. `f32[2]`.
        expected: String,
    },
    /// The inputs are not the graph's placeholders (one listed twice, one missing, ...).
    #[error(transparent)]
    Inputs(CompiledError),
    /// Constants are written little-endian.
    #[error("exporting constants is only supported on little-endian machines")]
    BigEndian,
    /// The packed program breaks the program invariants (boxed: errors stay small).
    #[error(transparent)]
    Malformed(Box<MalformedProgram>),
    /// The export function given to `as_tensorflow_polymorphic` failed (its message: the
    /// function's error type is the caller's).
    #[error("the export function failed: {0}")]
    ExportFunction(String),
    /// Nothing in a polymorphic export depends on the traced size.
    #[error(
        "nothing in the program depends on the size passed to the export function (traced at \
         {sizes:?}); give the placeholders a dimension of that size, or export with \
         `ovl::as_tensorflow`"
    )]
    SizeIndependent {
        /// The sizes it was traced at.
        sizes: Vec<usize>,
    },
    /// The outputs have no gradient with respect to an input the exported gradient needs
    /// (`ovl::backward` gave none: nothing flows from it to the outputs).
    #[error("the outputs have no gradient with respect to input `{input}`")]
    NoGradient {
        /// The input's name.
        input: String,
    },
    /// A polymorphic export gives a gradient at some traced sizes only.
    #[error("the export function gives a gradient at some sizes only")]
    GradientAtSomeSizes,
    /// The programs traced at several sizes do not unify into one.
    #[error("{}{why}", if *.gradient { "the gradient program: " } else { "" })]
    Unify {
        /// Whether it is the gradient program.
        gradient: bool,
        /// Why not.
        why: UnifyProgramError,
    },
}

/// Why programs packed at several sizes are not one program with a size known at run time
/// ([`crate::polymorphic::unify_programs`]).
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum UnifyProgramError {
    /// A trace without an operator graph.
    #[error("a trace has no graph")]
    NoGraph,
    /// The graphs do not unify.
    #[error(transparent)]
    Graphs(#[from] ovl_core::unify::UnifyError),
    /// The number of feeds depends on the size.
    #[error("the number of inputs depends on the size")]
    InputCount,
    /// A feed's name or graph input differs between the traces.
    #[error("input {input} (`{name}`) differs between the traces")]
    InputDiffers {
        /// The feed's number.
        input: usize,
        /// Its name.
        name: String,
    },
    /// A feed without a type.
    #[error("a feed has no type")]
    UntypedFeed,
    /// A feed's types at the traced sizes do not unify (the unifier's reason).
    #[error("input {input} (`{name}`): {why}")]
    InputType {
        /// The feed's number.
        input: usize,
        /// Its name.
        name: String,
        /// Why its types do not unify.
        why: String,
    },
    /// A constant differs between the traced sizes.
    #[error(
        "a constant (a tensor made from host data) differs between the sizes {sizes:?}; a \
         program sized at run time can only bake in data of fixed size: pass it as an input"
    )]
    ConstantDiffers {
        /// The traced sizes.
        sizes: Vec<u64>,
    },
    /// The unified program breaks the program invariants (boxed: errors stay small).
    #[error(transparent)]
    Malformed(Box<MalformedProgram>),
}

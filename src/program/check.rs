//! The invariants of an exported program, checked before it is planned: [`check_program`].

use super::tensor_type_of;
use ovl_core::{ir, DType};

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
    /// A tensor type ovl does not support (the reason).
    #[error("{0}")]
    Type(String),
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
    /// The operator graph fails validation (the validator's message).
    #[error("{0}")]
    Invalid(String),
}

/// Checks the invariants of a program (see `proto/ovl.proto`): the version, that every graph
/// input is fed or constant exactly once with matching types, that constants hold the right
/// number of bytes (and only 0 or 1 for bool), and that every operator passes
/// [`ovl_core::validate::validate`].
pub fn check_program(program: &ir::Program) -> Result<(), MalformedProgram> {
    use MalformedProgram as M;
    if program.version != ovl_core::IR_VERSION {
        return Err(M::Version {
            found: program.version,
            reads: ovl_core::IR_VERSION,
        });
    }
    let graph = program.graph.as_ref().ok_or(M::NoGraph)?;
    let mut source = vec![0u32; graph.inputs.len()];
    for (k, feed) in program.feeds.iter().enumerate() {
        let t = feed.r#type.as_ref().ok_or(M::UntypedFeed { feed: k })?;
        tensor_type_of(t).map_err(|e| M::Type(e.to_string()))?;
        if let Some(i) = feed.graph_input {
            let slot = source.get_mut(i as usize).ok_or_else(|| M::NoSuchInput {
                what: format!("feed {k}"),
                input: i,
            })?;
            *slot += 1;
            if graph.inputs[i as usize] != *t {
                return Err(M::FeedType { feed: k, input: i });
            }
        }
    }
    for c in &program.constants {
        let i = c.graph_input as usize;
        let t = graph.inputs.get(i).ok_or_else(|| M::NoSuchInput {
            what: "a constant".into(),
            input: c.graph_input,
        })?;
        source[i] += 1;
        if !t.symbolic.is_empty() {
            return Err(M::SymbolicConstant { input: i });
        }
        let (dtype, shape) = tensor_type_of(t).map_err(|e| M::Type(e.to_string()))?;
        let len = shape
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d))
            .and_then(|n| n.checked_mul(dtype.size()))
            .ok_or(M::ConstantTooLarge { input: i })?;
        if c.data.len() != len {
            return Err(M::ConstantLength {
                input: i,
                holds: c.data.len(),
                ty: format!("{dtype}{shape:?}"),
                needs: len,
            });
        }
        if dtype == DType::Bool && c.data.iter().any(|&b| b > 1) {
            return Err(M::BoolConstant { input: i });
        }
    }
    if let Some(i) = source.iter().position(|&n| n != 1) {
        return Err(M::Supplied {
            input: i,
            supplied: source[i],
        });
    }
    let mut embedded = vec![false; graph.operators.len()];
    for l in &program.libraries {
        let slot = embedded
            .get_mut(l.operator as usize)
            .ok_or(M::NoSuchOperator {
                operator: l.operator,
            })?;
        if std::mem::replace(slot, true) {
            return Err(M::TwoLibraries {
                operator: l.operator,
            });
        }
    }
    if graph.operator_inputs.len() != graph.operators.len() {
        return Err(M::Wiring);
    }
    ovl_core::validate::validate_operator_dag(graph).map_err(|e| M::Invalid(e.to_string()))
}

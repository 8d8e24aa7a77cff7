//! The invariants of an exported program, checked before it is planned: [`check_program`].

use super::{tensor_type_of, MalformedProgram};
use ovl_core::{ir, DType};

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
        tensor_type_of(t).map_err(M::Type)?;
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
        let (dtype, shape) = tensor_type_of(t).map_err(M::Type)?;
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
    ovl_core::validate::validate_operator_dag(graph).map_err(|e| M::Invalid(Box::new(e)))
}

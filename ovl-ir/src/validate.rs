//! Validation of the IR against the invariants written in `proto/ovl.proto`.
//!
//! [`validate`] checks one operator (an [`ir::ExpressionDag`]), [`validate_operator_dag`] a graph
//! of operators. Every backend and the reference interpreter may assume that a DAG that passed
//! validation is well formed: operands refer to earlier, visible, value-producing expressions,
//! dtypes agree, tensor references are in range, control flow is properly nested.

use crate::dtype::DType;
use crate::ir::{self, value_ref::Source, Op};
use crate::names::{at, dtype_name, tensor_type_name};
use crate::ops::{self};
use thiserror::Error;

mod checker;
mod expressions;

pub use checker::validate;

/// Why an operator or an operator DAG is not valid IR.
///
/// The messages name the operator (and where it is defined, when the IR records it), the
/// expression (`%index`, as printed by [`crate::text::to_text`]) and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ValidationError {
    /// The IR was produced for another version of the schema or its semantics.
    #[error(
        "operator `{operator}`{}: IR version {found} is not supported: this build of ovl reads IR \
         version {expected}; trace the operator again with this version of ovl",
        at(.defined_at)
    )]
    Version {
        /// The operator's name.
        operator: String,
        /// `file:line` of the operator's function, or empty when unknown.
        defined_at: String,
        /// The version found in the IR.
        found: u32,
        /// [`crate::IR_VERSION`].
        expected: u32,
    },
    /// Something wrong with the operator as a whole (workgroup, tensor types, nesting).
    #[error("operator `{operator}`{}: {message}", at(.defined_at))]
    Operator {
        /// The operator's name.
        operator: String,
        /// `file:line` of the operator's function, or empty when unknown.
        defined_at: String,
        /// What is wrong.
        message: String,
    },
    /// Something wrong with one expression.
    #[error("operator `{operator}`{}: expression %{index} ({op}): {message}", at(.defined_at))]
    Expression {
        /// The operator's name.
        operator: String,
        /// `file:line` of the operator's function, or empty when unknown.
        defined_at: String,
        /// Index of the expression in `ExpressionDAG.expressions`.
        index: usize,
        /// The expression's opcode in lower case (`add`, `read`, ...).
        op: String,
        /// What is wrong.
        message: String,
    },
    /// Something wrong with the wiring of an operator DAG.
    #[error("operator DAG: {message}")]
    Graph {
        /// What is wrong.
        message: String,
    },
    /// An operator of an operator DAG is not valid.
    #[error("operator DAG: operator {index}: {error}")]
    GraphOperator {
        /// Index of the operator in `OperatorDAG.operators`.
        index: usize,
        /// What is wrong with it.
        error: Box<ValidationError>,
    },
}

/// Whether an expression with this opcode produces a value (can be an operand).
pub fn produces_value(op: Op) -> bool {
    ops::info(op).is_some_and(|row| row.produces_value())
}

fn describe_value_ref(dag: &ir::OperatorDag, v: &ir::ValueRef) -> String {
    match &v.source {
        Some(Source::GraphInput(k)) => format!("graph input {k}"),
        Some(Source::OpOutput(o)) => {
            let name = dag
                .operators
                .get(o.operator as usize)
                .map(|op| format!(" (`{}`)", op.name))
                .unwrap_or_default();
            format!("operator {}{name} output {}", o.operator, o.output)
        }
        None => "nothing".into(),
    }
}

/// Why a value reference of an operator graph names no tensor (a consumer's input or a graph
/// output; the caller says which).
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum BadValueRef {
    /// Neither a graph input nor an operator output.
    #[error("the reference is empty (neither a graph input nor an operator output)")]
    Empty,
    /// A graph input past the graph's inputs.
    #[error("it refers to graph input {input}, but the graph has {inputs} input(s)")]
    NoSuchInput {
        /// The input named.
        input: u32,
        /// The graph's inputs.
        inputs: usize,
    },
    /// An operator that is not listed before the consumer.
    #[error(
        "it refers to operator {operator}, which does not come before it; operators must be \
         listed in a topological order"
    )]
    NotBefore {
        /// The operator named.
        operator: usize,
    },
    /// An operator past the graph's operators.
    #[error("it refers to operator {operator}, but the graph has {operators} operator(s)")]
    NoSuchOperator {
        /// The operator named.
        operator: usize,
        /// The graph's operators.
        operators: usize,
    },
    /// An output past the operator's outputs.
    #[error(
        "it refers to output {output} of operator {operator} (`{name}`), which has {outputs} \
         output(s)"
    )]
    NoSuchOutput {
        /// The operator.
        operator: usize,
        /// Its name.
        name: String,
        /// The output named.
        output: u32,
        /// The operator's outputs.
        outputs: usize,
    },
}

/// The type of the value `v` names in `dag` (a graph input or an operator output), or why it
/// names none.
pub fn value_type<'a>(
    dag: &'a ir::OperatorDag,
    v: &ir::ValueRef,
) -> Result<&'a ir::TensorType, BadValueRef> {
    resolve(dag, v, dag.operators.len())
}

/// Resolves a value reference of the graph, visible to a consumer at operator index `before`
/// (graph outputs pass `operators.len()`), to its tensor type.
fn resolve<'a>(
    dag: &'a ir::OperatorDag,
    v: &ir::ValueRef,
    before: usize,
) -> Result<&'a ir::TensorType, BadValueRef> {
    match &v.source {
        None => Err(BadValueRef::Empty),
        Some(Source::GraphInput(k)) => {
            dag.inputs.get(*k as usize).ok_or(BadValueRef::NoSuchInput {
                input: *k,
                inputs: dag.inputs.len(),
            })
        }
        Some(Source::OpOutput(o)) => {
            let p = o.operator as usize;
            if p >= before {
                return Err(if p < dag.operators.len() {
                    BadValueRef::NotBefore { operator: p }
                } else {
                    BadValueRef::NoSuchOperator {
                        operator: p,
                        operators: dag.operators.len(),
                    }
                });
            }
            let producer = &dag.operators[p];
            producer
                .outputs
                .get(o.output as usize)
                .ok_or_else(|| BadValueRef::NoSuchOutput {
                    operator: p,
                    name: producer.name.clone(),
                    output: o.output,
                    outputs: producer.outputs.len(),
                })
        }
    }
}

/// Checks an operator DAG: its version, every operator (with [`validate`]), that
/// `operator_inputs` is parallel to `operators` with one reference per operator input, that each
/// reference names an existing graph input or an output of an *earlier* operator (the list is in
/// topological order) whose tensor type equals the consuming operator's declared input type, and
/// that the graph outputs are valid references.
pub fn validate_operator_dag(dag: &ir::OperatorDag) -> Result<(), ValidationError> {
    let graph = |message: String| ValidationError::Graph { message };
    if dag.version != crate::IR_VERSION {
        return Err(graph(format!(
            "IR version {} is not supported: this build of ovl reads IR version {}; build the \
             graph again with this version of ovl",
            dag.version,
            crate::IR_VERSION
        )));
    }
    for (k, t) in dag.inputs.iter().enumerate() {
        if DType::from_ir(t.dtype).is_none() {
            return Err(graph(format!(
                "graph input {k} has dtype {}, which is not supported",
                dtype_name(t.dtype)
            )));
        }
    }
    crate::symbolic::check_graph(dag).map_err(graph)?;
    if dag.operator_inputs.len() != dag.operators.len() {
        return Err(graph(format!(
            "operator_inputs has {} entries but there are {} operators; it must be parallel to \
             `operators`",
            dag.operator_inputs.len(),
            dag.operators.len()
        )));
    }
    for (i, op) in dag.operators.iter().enumerate() {
        validate(op).map_err(|e| ValidationError::GraphOperator {
            index: i,
            error: Box::new(e),
        })?;
        let refs = &dag.operator_inputs[i].inputs;
        if refs.len() != op.inputs.len() {
            return Err(graph(format!(
                "operator {i} (`{}`) declares {} input(s) but is wired to {}",
                op.name,
                op.inputs.len(),
                refs.len()
            )));
        }
        for (k, (v, declared)) in refs.iter().zip(&op.inputs).enumerate() {
            let t = resolve(dag, v, i)
                .map_err(|m| graph(format!("input {k} of operator {i} (`{}`): {m}", op.name)))?;
            if t != declared {
                return Err(graph(format!(
                    "input {k} of operator {i} (`{}`) is declared as {} but is fed {} of type {}",
                    op.name,
                    tensor_type_name(declared),
                    describe_value_ref(dag, v),
                    tensor_type_name(t)
                )));
            }
        }
    }
    for (k, v) in dag.outputs.iter().enumerate() {
        resolve(dag, v, dag.operators.len())
            .map_err(|m| graph(format!("graph output {k}: {m}")))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;

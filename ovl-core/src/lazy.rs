//! The lazy operator graph: calling an operator records a node; nothing runs until the graph is
//! evaluated. [`Lazy<T>`] is a typed handle on one output of a node (or on a host array).

use crate::dtype::{DType, Scalar};
use crate::error::TraceError;
use crate::host::HostTensor;
use crate::ir;
use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

/// A node of the lazy graph.
#[derive(Debug)]
pub enum Node {
    /// Data supplied by the host.
    Host(Arc<HostTensor>),
    /// One call of an operator.
    Operator(OperatorNode),
}

/// A recorded operator call.
#[derive(Debug)]
pub struct OperatorNode {
    /// The traced operator.
    pub dag: Arc<ir::ExpressionDag>,
    /// Its inputs, in the order of `dag.inputs`.
    pub inputs: Vec<LazyTensor>,
    /// The error found while tracing, reported when the graph is evaluated.
    pub error: Option<Arc<TraceError>>,
}

/// An untyped handle on one tensor of the lazy graph.
#[derive(Clone, Debug)]
pub struct LazyTensor {
    pub node: Arc<Node>,
    pub output: usize,
    pub dtype: DType,
    pub shape: Arc<[usize]>,
}

impl LazyTensor {
    /// A handle on host data.
    pub fn host(tensor: HostTensor) -> LazyTensor {
        let dtype = tensor.dtype();
        let shape: Arc<[usize]> = tensor.shape.clone().into();
        LazyTensor {
            node: Arc::new(Node::Host(Arc::new(tensor))),
            output: 0,
            dtype,
            shape,
        }
    }

    /// The operator that produces this tensor, if any.
    pub fn operator(&self) -> Option<&OperatorNode> {
        match &*self.node {
            Node::Operator(op) => Some(op),
            Node::Host(_) => None,
        }
    }
}

/// A lazy tensor of element type `T`: an output of an operator call, or host data.
///
/// Pass it to other operators, then get its value with `ovl::evaluate`.
pub struct Lazy<T> {
    pub(crate) inner: LazyTensor,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for Lazy<T> {
    fn clone(&self) -> Self {
        Lazy {
            inner: self.inner.clone(),
            _t: PhantomData,
        }
    }
}

impl<T: Scalar> fmt::Debug for Lazy<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let from = match self.inner.operator() {
            Some(op) => format!("output {} of `{}`", self.inner.output, op.dag.name),
            None => "host data".to_string(),
        };
        write!(f, "Lazy<{}>{:?} ({from})", T::DTYPE, self.inner.shape)
    }
}

impl<T: Scalar> Lazy<T> {
    pub(crate) fn from_untyped(inner: LazyTensor) -> Self {
        Lazy {
            inner,
            _t: PhantomData,
        }
    }

    /// Wraps host data as a graph input. The data is moved, not copied.
    pub fn from_host(tensor: HostTensor) -> Result<Self, HostTensor> {
        if tensor.dtype() != T::DTYPE {
            return Err(tensor);
        }
        Ok(Lazy::from_untyped(LazyTensor::host(tensor)))
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.inner.shape
    }

    /// The untyped handle.
    pub fn untyped(&self) -> &LazyTensor {
        &self.inner
    }

    /// The traced operator that produces this tensor (`None` for host data).
    pub fn operator_ir(&self) -> Option<&ir::ExpressionDag> {
        self.inner.operator().map(|op| &*op.dag)
    }
}

impl<T: Scalar, D: ndarray::Dimension> From<ndarray::Array<T, D>> for Lazy<T> {
    fn from(a: ndarray::Array<T, D>) -> Self {
        Lazy::from_untyped(LazyTensor::host(host_from_array(a)))
    }
}

/// Moves an ndarray into a host tensor (copying only if it is not in standard layout).
pub fn host_from_array<T: Scalar, D: ndarray::Dimension>(a: ndarray::Array<T, D>) -> HostTensor {
    let shape = a.shape().to_vec();
    let data = if a.is_standard_layout() {
        let (v, offset) = a.into_raw_vec_and_offset();
        match offset {
            Some(0) | None => v,
            Some(o) => v[o..].to_vec(),
        }
    } else {
        a.iter().copied().collect()
    };
    HostTensor {
        shape,
        data: T::wrap(data),
    }
}

/// Anything an operator accepts as a tensor input: lazy handles and `ndarray` arrays (copied).
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be an input tensor of element type `{T}`",
    note = "operators take `Lazy<{T}>` handles (outputs of other operators) or ndarray arrays of `{T}`"
)]
pub trait IntoLazy<T> {
    fn into_lazy(self) -> Lazy<T>;
}

impl<T> IntoLazy<T> for Lazy<T> {
    fn into_lazy(self) -> Lazy<T> {
        self
    }
}

impl<T> IntoLazy<T> for &Lazy<T> {
    fn into_lazy(self) -> Lazy<T> {
        self.clone()
    }
}

impl<T: Scalar, D: ndarray::Dimension> IntoLazy<T> for ndarray::Array<T, D> {
    fn into_lazy(self) -> Lazy<T> {
        self.into()
    }
}

impl<T: Scalar, S: ndarray::Data<Elem = T>, D: ndarray::Dimension> IntoLazy<T>
    for &ndarray::ArrayBase<S, D>
{
    fn into_lazy(self) -> Lazy<T> {
        self.to_owned().into()
    }
}

/// The requested tensors of a graph, flattened into an [`ir::OperatorDag`] in topological order.
#[derive(Debug)]
pub struct Graph {
    /// Operators (in a topological order), their wiring, graph inputs and outputs.
    pub dag: ir::OperatorDag,
    /// The host data for each of `dag.inputs`.
    pub inputs: Vec<Arc<HostTensor>>,
}

/// Collects everything `outputs` depend on. Returns the first trace error found (in
/// topological order), if any operator failed to trace.
pub fn build_graph(outputs: &[&LazyTensor]) -> Result<Graph, TraceError> {
    let mut builder = GraphBuilder::default();
    let mut refs = Vec::with_capacity(outputs.len());
    for out in outputs {
        refs.push(builder.visit(out)?);
    }
    let mut dag = builder.dag;
    dag.version = crate::IR_VERSION;
    dag.outputs = refs;
    Ok(Graph {
        dag,
        inputs: builder.inputs,
    })
}

#[derive(Default)]
struct GraphBuilder {
    dag: ir::OperatorDag,
    inputs: Vec<Arc<HostTensor>>,
    /// Node address -> graph input index or operator index.
    seen: HashMap<usize, Seen>,
}

#[derive(Clone, Copy)]
enum Seen {
    Input(u32),
    Operator(u32),
}

impl GraphBuilder {
    fn visit(&mut self, t: &LazyTensor) -> Result<ir::ValueRef, TraceError> {
        use ir::value_ref::Source;
        let key = Arc::as_ptr(&t.node) as usize;
        let seen = match self.seen.get(&key) {
            Some(&s) => s,
            None => {
                // Iterative post-order walk: graphs can be deep (long chains).
                self.visit_new(t)?;
                self.seen[&key]
            }
        };
        Ok(ir::ValueRef {
            source: Some(match seen {
                Seen::Input(i) => Source::GraphInput(i),
                Seen::Operator(op) => Source::OpOutput(ir::OperatorOutput {
                    operator: op,
                    output: t.output as u32,
                }),
            }),
        })
    }

    fn visit_new(&mut self, root: &LazyTensor) -> Result<(), TraceError> {
        // Stack of (node, next input to visit).
        let mut stack: Vec<(Arc<Node>, usize)> = vec![(root.node.clone(), 0)];
        while let Some((node, next)) = stack.pop() {
            let key = Arc::as_ptr(&node) as usize;
            if self.seen.contains_key(&key) {
                continue;
            }
            match &*node {
                Node::Host(h) => {
                    let i = self.inputs.len() as u32;
                    self.inputs.push(h.clone());
                    self.dag.inputs.push(ir::TensorType {
                        dtype: h.dtype().to_ir() as i32,
                        shape: h.shape.iter().map(|&d| d as u64).collect(),
                    });
                    self.seen.insert(key, Seen::Input(i));
                }
                Node::Operator(op) => {
                    if let Some(pending) = op.inputs[next..]
                        .iter()
                        .position(|i| !self.seen.contains_key(&(Arc::as_ptr(&i.node) as usize)))
                    {
                        let child = op.inputs[next + pending].node.clone();
                        stack.push((node.clone(), next + pending + 1));
                        stack.push((child, 0));
                        continue;
                    }
                    if let Some(e) = &op.error {
                        return Err((**e).clone());
                    }
                    let inputs = op
                        .inputs
                        .iter()
                        .map(|i| self.visit(i))
                        .collect::<Result<Vec<_>, _>>()?;
                    let index = self.dag.operators.len() as u32;
                    self.dag.operators.push((*op.dag).clone());
                    self.dag.operator_inputs.push(ir::OperatorInputs { inputs });
                    self.seen.insert(key, Seen::Operator(index));
                }
            }
        }
        Ok(())
    }
}

//! A lazy graph flattened into an [`ir::OperatorDag`] (`build_graph`) and identified by its
//! structure without walking any IR (`graph_key`).

use super::{LazyTensor, Node};
use crate::dtype::DType;
use crate::error::TraceError;
use crate::host::{DeviceData, HostTensor};
use crate::ir;
use std::collections::HashMap;
use std::sync::Arc;

/// The requested tensors of a graph, flattened into an [`ir::OperatorDag`] in topological order.
#[derive(Debug)]
pub struct Graph {
    /// Operators (in a topological order), their wiring, graph inputs and outputs.
    pub dag: ir::OperatorDag,
    /// What feeds each of `dag.inputs`: host data, or a placeholder.
    pub inputs: Vec<GraphInput>,
}

/// The source of one graph input.
#[derive(Clone, Debug)]
pub enum GraphInput {
    /// Host data known when the graph was built.
    Host(Arc<HostTensor>),
    /// Device data known when the graph was built (see [`Node::Device`]).
    Device(Arc<dyn DeviceData>),
    /// A placeholder (its `PlaceholderNode::id` and name): data supplied at call time.
    Placeholder {
        /// `PlaceholderNode::id`.
        id: u64,
        /// `PlaceholderNode::name`.
        name: String,
    },
}

impl GraphInput {
    /// The host data, or `None` for a placeholder.
    pub fn host(&self) -> Option<&Arc<HostTensor>> {
        match self {
            GraphInput::Host(h) => Some(h),
            GraphInput::Device(_) | GraphInput::Placeholder { .. } => None,
        }
    }
}

/// Collects everything `outputs` depend on. Returns the first trace error found (in
/// topological order), if any operator failed to trace.
pub fn build_graph(outputs: &[&LazyTensor]) -> Result<Graph, TraceError> {
    let (dag, inputs, _) = walk(outputs, true)?;
    Ok(Graph { dag, inputs })
}

/// What [`graph_key`] returns: the key of a graph and the sources of its graph inputs.
#[derive(Debug)]
pub struct GraphKey {
    /// Identifies the graph [`build_graph`] would build: every operator's `operator_key`, the
    /// wiring, the dtype and shape of every graph input (placeholders also by id) and the
    /// outputs, as a self-delimiting byte string to compare exactly (each operator by its
    /// 32-byte key, the rest as written). Host data is not part of it.
    pub bytes: Vec<u8>,
    /// What feeds each graph input, in the order of [`build_graph`]'s `dag.inputs`.
    pub inputs: Vec<GraphInput>,
}

/// The key of the graph behind `outputs`, without building its IR: a walk of the lazy nodes
/// that reads each operator's precomputed key (no work proportional to the operators' IR).
/// Reports the same first trace error as [`build_graph`].
pub fn graph_key(outputs: &[&LazyTensor]) -> Result<GraphKey, TraceError> {
    let (_, inputs, bytes) = walk(outputs, false)?;
    Ok(GraphKey { bytes, inputs })
}

/// A graph walked as [`graph_key`] walks it, with its nodes in the key's numbering: what the
/// cache of backward graphs maps a recorded backward graph onto.
pub(crate) struct Walked {
    /// [`GraphKey::bytes`].
    pub(crate) bytes: Vec<u8>,
    /// The node of each graph input, in order.
    pub(crate) inputs: Vec<Arc<Node>>,
    /// The node of each operator, in order.
    pub(crate) operators: Vec<Arc<Node>>,
}

/// [`graph_key`] with the nodes behind the numbering.
pub(crate) fn walk_nodes(outputs: &[&LazyTensor]) -> Result<Walked, TraceError> {
    let mut builder = GraphBuilder::new(outputs, false);
    builder.nodes = Some((Vec::new(), Vec::new()));
    let (_, _, bytes, nodes) = builder.run(outputs)?;
    let (inputs, operators) = nodes.unwrap_or_default();
    Ok(Walked {
        bytes,
        inputs,
        operators,
    })
}

/// The walk behind [`build_graph`] and [`graph_key`]: one traversal, so that both number the
/// graph inputs and operators identically. The IR is built only when `build` is set.
fn walk(
    outputs: &[&LazyTensor],
    build: bool,
) -> Result<(ir::OperatorDag, Vec<GraphInput>, Vec<u8>), TraceError> {
    let (dag, inputs, bytes, _) = GraphBuilder::new(outputs, build).run(outputs)?;
    Ok((dag, inputs, bytes))
}

/// The nodes of a walk's graph inputs and operators, in order (when collected).
type WalkNodes = Option<(Vec<Arc<Node>>, Vec<Arc<Node>>)>;

impl GraphBuilder {
    fn new(outputs: &[&LazyTensor], build: bool) -> GraphBuilder {
        GraphBuilder {
            build,
            dag: Default::default(),
            inputs: Vec::new(),
            // Sized for graphs of a few dozen operators (a training step), so that the walk
            // of such a graph does not grow them: growing was a tenth of the walk's time.
            seen: HashMap::with_capacity_and_hasher(128, Default::default()),
            key: KeyBytes(Vec::with_capacity(64 * outputs.len() + 4096)),
            operators: 0,
            nodes: None,
        }
    }

    #[allow(clippy::type_complexity)]
    fn run(
        mut self,
        outputs: &[&LazyTensor],
    ) -> Result<(ir::OperatorDag, Vec<GraphInput>, Vec<u8>, WalkNodes), TraceError> {
        self.key.update(b"ovl.lazy.graph_key");
        let mut refs = Vec::with_capacity(outputs.len());
        for out in outputs {
            refs.push(self.visit(out)?);
        }
        self.key.update([4u8]);
        self.key.update((refs.len() as u64).to_le_bytes());
        for r in &refs {
            key_ref(&mut self.key, r);
        }
        let mut dag = self.dag;
        dag.version = crate::IR_VERSION;
        dag.outputs = refs;
        Ok((dag, self.inputs, self.key.0, self.nodes))
    }
}

/// The graph key's bytes: a self-delimiting encoding, compared exactly by the plan cache.
struct KeyBytes(Vec<u8>);

impl KeyBytes {
    fn update(&mut self, bytes: impl AsRef<[u8]>) {
        self.0.extend_from_slice(bytes.as_ref());
    }
}

fn key_ref(key: &mut KeyBytes, r: &ir::ValueRef) {
    use ir::value_ref::Source;
    match &r.source {
        Some(Source::GraphInput(i)) => {
            key.update([1u8]);
            key.update(i.to_le_bytes());
        }
        Some(Source::OpOutput(o)) => {
            key.update([2u8]);
            key.update(o.operator.to_le_bytes());
            key.update(o.output.to_le_bytes());
        }
        None => key.update([0u8]),
    }
}

fn key_tensor_type(key: &mut KeyBytes, dtype: DType, shape: &[usize]) {
    key.update([dtype.to_ir() as u8]);
    key.update((shape.len() as u64).to_le_bytes());
    for &d in shape {
        key.update((d as u64).to_le_bytes());
    }
}

struct GraphBuilder {
    /// Whether to build the IR (else only the key and the inputs).
    build: bool,
    dag: ir::OperatorDag,
    inputs: Vec<GraphInput>,
    /// Node address -> graph input index or operator index.
    seen: HashMap<usize, Seen, crate::fast_hash::FastBuild>,
    /// The graph key, fed in the order nodes are numbered.
    key: KeyBytes,
    /// Operators numbered so far.
    operators: u32,
    /// The nodes of the graph inputs and operators in order, when asked for ([`walk_nodes`]).
    nodes: WalkNodes,
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
                    self.inputs.push(GraphInput::Host(h.clone()));
                    self.key.update([1u8]);
                    key_tensor_type(&mut self.key, h.dtype(), &h.shape);
                    if self.build {
                        self.dag.inputs.push(ir::TensorType {
                            symbolic: Vec::new(),
                            dtype: h.dtype().to_ir() as i32,
                            shape: h.shape.iter().map(|&d| d as u64).collect(),
                        });
                    }
                    self.seen.insert(key, Seen::Input(i));
                    if let Some((inputs, _)) = &mut self.nodes {
                        inputs.push(node.clone());
                    }
                }
                Node::Device(d) => {
                    let i = self.inputs.len() as u32;
                    self.inputs.push(GraphInput::Device(d.clone()));
                    self.key.update([5u8]);
                    key_tensor_type(&mut self.key, d.dtype(), d.shape());
                    if self.build {
                        self.dag.inputs.push(ir::TensorType {
                            symbolic: Vec::new(),
                            dtype: d.dtype().to_ir() as i32,
                            shape: d.shape().iter().map(|&n| n as u64).collect(),
                        });
                    }
                    self.seen.insert(key, Seen::Input(i));
                    if let Some((inputs, _)) = &mut self.nodes {
                        inputs.push(node.clone());
                    }
                }
                Node::Placeholder(p) => {
                    let i = self.inputs.len() as u32;
                    self.inputs.push(GraphInput::Placeholder {
                        id: p.id,
                        name: p.name.clone(),
                    });
                    self.key.update([2u8]);
                    self.key.update(p.id.to_le_bytes());
                    key_tensor_type(&mut self.key, p.dtype, &p.shape);
                    if self.build {
                        self.dag.inputs.push(ir::TensorType {
                            symbolic: Vec::new(),
                            dtype: p.dtype.to_ir() as i32,
                            shape: p.shape.iter().map(|&d| d as u64).collect(),
                        });
                    }
                    self.seen.insert(key, Seen::Input(i));
                    if let Some((inputs, _)) = &mut self.nodes {
                        inputs.push(node.clone());
                    }
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
                    let index = self.operators;
                    self.operators += 1;
                    self.key.update([3u8]);
                    self.key.update(op.key.0);
                    self.key.update((inputs.len() as u64).to_le_bytes());
                    for r in &inputs {
                        key_ref(&mut self.key, r);
                    }
                    if self.build {
                        self.dag.operators.push((*op.dag).clone());
                        self.dag.operator_inputs.push(ir::OperatorInputs { inputs });
                    }
                    self.seen.insert(key, Seen::Operator(index));
                    if let Some((_, operators)) = &mut self.nodes {
                        operators.push(node.clone());
                    }
                }
            }
        }
        Ok(())
    }
}

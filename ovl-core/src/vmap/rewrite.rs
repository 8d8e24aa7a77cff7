//! The rewrite of a per-example graph into its batched form, and the gradient functions of
//! batched calls (which batch the per-example gradient graph with the same rewrite).

use super::ops::{broadcast_op, failed_tensor, sum_op};
use super::VmapError;
use crate::batch::{batch_operator, BatchError};
use crate::error::TraceError;
use crate::hash::Digest;
use crate::ir;
use crate::lazy::{
    operator_key, Gradient, GradientCall, GradientFn, LazyTensor, Node, OperatorNode,
};
use crate::lru::{CacheControl, SharedLru};
use std::collections::HashMap;
use std::sync::Arc;

/// What a node of the per-example graph becomes.
#[derive(Clone)]
pub(super) enum Mapped {
    /// Itself: it does not depend on a batched input.
    Shared,
    /// Its batched counterpart: output `k` of the node is output `k` of this one, with the batch
    /// axis in front.
    Node(Arc<Node>),
    /// A per-example stand-in (placeholder) of this batched tensor.
    Tensor(LazyTensor),
}

/// A node's identity while the graph is alive: its address.
fn node_id(node: &Arc<Node>) -> usize {
    Arc::as_ptr(node) as *const u8 as usize
}

fn with_batch(batch: usize, shape: &[usize]) -> Arc<[usize]> {
    std::iter::once(batch)
        .chain(shape.iter().copied())
        .collect()
}

/// The rewrite of a per-example graph into its batched form.
pub(super) struct Batcher {
    batch: usize,
    map: HashMap<usize, Mapped>,
    /// Keeps alive every node whose address is a key of `map`.
    alive: Vec<Arc<Node>>,
}

impl Batcher {
    pub(super) fn new(batch: usize) -> Batcher {
        Batcher {
            batch,
            map: HashMap::new(),
            alive: Vec::new(),
        }
    }

    pub(super) fn seed(&mut self, node: &Arc<Node>, mapped: Mapped) {
        self.map.insert(node_id(node), mapped);
        self.alive.push(node.clone());
    }

    /// The batched counterpart of `t`, and whether it is batched.
    fn tensor(&self, t: &LazyTensor) -> (LazyTensor, bool) {
        match self.map.get(&node_id(&t.node)) {
            Some(Mapped::Node(n)) => (
                LazyTensor {
                    node: n.clone(),
                    output: t.output,
                    dtype: t.dtype,
                    shape: with_batch(self.batch, &t.shape),
                },
                true,
            ),
            Some(Mapped::Tensor(b)) => (b.clone(), true),
            Some(Mapped::Shared) | None => (t.clone(), false),
        }
    }

    /// Maps everything `outputs` depend on; returns their counterparts.
    pub(super) fn run(
        &mut self,
        outputs: &[LazyTensor],
    ) -> Result<Vec<(LazyTensor, bool)>, VmapError> {
        for o in outputs {
            self.visit(o.node.clone())?;
        }
        Ok(outputs.iter().map(|o| self.tensor(o)).collect())
    }

    fn visit(&mut self, root: Arc<Node>) -> Result<(), VmapError> {
        // Iterative post-order: graphs can be deep (long chains).
        let mut stack: Vec<(Arc<Node>, bool)> = vec![(root, false)];
        while let Some((node, expanded)) = stack.pop() {
            let id = node_id(&node);
            if self.map.contains_key(&id) {
                continue;
            }
            let mapped = match &*node {
                Node::Host(_) | Node::Device(_) | Node::Placeholder(_) => Mapped::Shared,
                Node::Operator(op) if !expanded => {
                    stack.push((node.clone(), true));
                    for input in op.inputs.iter().rev() {
                        if !self.map.contains_key(&node_id(&input.node)) {
                            stack.push((input.node.clone(), false));
                        }
                    }
                    continue;
                }
                Node::Operator(op) => {
                    if let Some(e) = &op.error {
                        return Err(VmapError::Trace((**e).clone()));
                    }
                    self.batch_call(op)?
                }
            };
            self.map.insert(id, mapped);
            self.alive.push(node);
        }
        Ok(())
    }

    /// The batched form of one call (or `Shared` when no input is batched).
    fn batch_call(&mut self, op: &OperatorNode) -> Result<Mapped, VmapError> {
        let (inputs, mask): (Vec<LazyTensor>, Vec<bool>) =
            op.inputs.iter().map(|t| self.tensor(t)).unzip();
        if !mask.iter().any(|&b| b) {
            return Ok(Mapped::Shared);
        }
        let (dag, key) = batched_ir(op, &mask, self.batch)?;
        let node = OperatorNode::with_key(dag, key, inputs, None);
        if let Some(gradient) = op.gradient.get() {
            // Identified by the original gradient's identity, the operator, the batched
            // inputs and the batch size (everything the batched closure captures).
            let mut key = op.key.0.to_vec();
            key.extend(mask.iter().map(|&b| b as u8));
            key.extend((self.batch as u64).to_le_bytes());
            let func = batched_gradient(
                gradient.func.clone(),
                op.dag.clone(),
                op.key,
                mask,
                self.batch,
            );
            let batched = Gradient::derived::<BatchedGradient>(func, gradient.id.as_ref(), key);
            let _ = node.gradient.set(batched);
        }
        Ok(Mapped::Node(Arc::new(Node::Operator(node))))
    }
}

/// (the per-example operator's key, which inputs are batched, the batch size).
type MemoKey = (Digest, Vec<bool>, usize);

/// Batched operators and their keys, by [`MemoKey`].
static MEMO: SharedLru<MemoKey, (Arc<ir::ExpressionDag>, Digest)> =
    SharedLru::new("vmap_operators", MEMO_CAPACITY);

/// The most batched operators [`MEMO`] keeps unless `ovl::set_cache_capacity` says otherwise
/// (a batched operator is small).
pub const MEMO_CAPACITY: usize = 4096;

/// The memo of batched operators, for `ovl::cache_stats`, `ovl::clear_caches` and
/// `ovl::set_cache_capacity`.
pub fn cache() -> &'static dyn CacheControl {
    &MEMO
}

/// The batched IR of `op` and its key. Batched operators are remembered by (the per-example
/// operator's key, the batched inputs, the batch size), which determine them: calls of one traced
/// operator share one batched IR, and a repeated `vmap` reuses it, so that the plan cache
/// recognises the batched graph without hashing its IR again.
fn batched_ir(
    op: &OperatorNode,
    mask: &[bool],
    batch: usize,
) -> Result<(Arc<ir::ExpressionDag>, Digest), BatchError> {
    let memo_key = (op.key, mask.to_vec(), batch);
    if let Some(hit) = MEMO.get(&memo_key) {
        return Ok(hit);
    }
    let dag = Arc::new(batch_operator(&op.dag, mask, batch as u64)?);
    let key = operator_key(&dag);
    MEMO.insert(memo_key, (dag.clone(), key));
    Ok((dag, key))
}

/// The gradient function of a batched call, made from the per-example call's `gradient`.
/// The derivation of a batched gradient from a per-example one (its identity's type).
struct BatchedGradient;

fn batched_gradient(
    gradient: Arc<GradientFn>,
    dag: Arc<ir::ExpressionDag>,
    key: Digest,
    mask: Vec<bool>,
    batch: usize,
) -> Arc<GradientFn> {
    Arc::new(move |call: &GradientCall| {
        match per_example_gradient(&gradient, &dag, key, &mask, batch, call) {
            Ok(grads) => grads,
            // Reported when a gradient is evaluated, like a trace error (never a panic).
            Err(e) => {
                let error = Arc::new(gradient_error(&dag, &e));
                call.inputs
                    .iter()
                    .map(|t| Some(failed_tensor(&dag.name, t, error.clone())))
                    .collect()
            }
        }
    })
}

fn per_example_gradient(
    gradient: &Arc<GradientFn>,
    dag: &Arc<ir::ExpressionDag>,
    key: Digest,
    mask: &[bool],
    batch: usize,
    call: &GradientCall,
) -> Result<Vec<Option<LazyTensor>>, VmapError> {
    let Some(first_output) = call.outputs.first() else {
        return Ok(vec![None; call.inputs.len()]);
    };
    let batched_call = first_output.node.clone();
    let unbatch = |name: String, t: &LazyTensor| {
        LazyTensor::placeholder(&name, t.dtype, t.shape.get(1..).unwrap_or(&[]))
    };
    let inputs: Vec<LazyTensor> = call
        .inputs
        .iter()
        .zip(mask)
        .enumerate()
        .map(|(i, (t, &batched))| {
            if batched {
                unbatch(format!("example of input {i} of `{}`", dag.name), t)
            } else {
                t.clone()
            }
        })
        .collect();
    let node = Arc::new(Node::Operator(OperatorNode::with_key(
        dag.clone(),
        key,
        inputs.clone(),
        None,
    )));
    let outputs = LazyTensor::outputs_of(&node, dag);
    let output_grads: Vec<Option<LazyTensor>> = call
        .output_grads
        .iter()
        .enumerate()
        .map(|(i, g)| {
            g.as_ref().map(|g| {
                unbatch(
                    format!("example of the gradient of output {i} of `{}`", dag.name),
                    g,
                )
            })
        })
        .collect();
    let per_example = GradientCall {
        name: call.name,
        inputs: &inputs,
        outputs,
        output_grads: output_grads.clone(),
    };
    let grads = gradient(&per_example);
    if grads.len() != call.inputs.len() {
        // `backward` reports the wrong count, naming the operator.
        return Ok(grads);
    }

    let mut batcher = Batcher::new(batch);
    batcher.seed(&node, Mapped::Node(batched_call));
    for ((stand_in, t), &batched) in inputs.iter().zip(call.inputs).zip(mask) {
        if batched {
            batcher.seed(&stand_in.node, Mapped::Tensor(t.clone()));
        } else {
            batcher.seed(&t.node, Mapped::Shared);
        }
    }
    for (stand_in, g) in output_grads.iter().zip(&call.output_grads) {
        if let (Some(s), Some(g)) = (stand_in, g) {
            batcher.seed(&s.node, Mapped::Tensor(g.clone()));
        }
    }
    let wanted: Vec<LazyTensor> = grads.iter().flatten().cloned().collect();
    let mut mapped = batcher.run(&wanted)?.into_iter();
    grads
        .iter()
        .zip(mask)
        .map(|(g, &batched_input)| {
            let Some(_) = g else { return Ok(None) };
            let (t, batched) = mapped.next().expect("one mapped tensor per gradient");
            let t = if batched { t } else { broadcast_op(&t, batch)? };
            Ok(Some(if batched_input { t } else { sum_op(&t)? }))
        })
        .collect()
}

/// A trace error for a gradient of `dag` that could not be batched.
fn gradient_error(dag: &ir::ExpressionDag, e: &VmapError) -> TraceError {
    match e {
        VmapError::Trace(t) => t.clone(),
        other => {
            let (file, line) = dag
                .source
                .as_ref()
                .map_or((String::new(), 0), |s| (s.file.clone(), s.line));
            TraceError {
                operator: dag.name.clone(),
                operator_file: file.clone(),
                operator_line: line,
                file,
                line,
                column: 0,
                message: format!("the gradient of a batched (vmap) call failed: {other}"),
            }
        }
    }
}

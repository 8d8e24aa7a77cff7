//! `vmap`: a lazy graph of operators written for one example, batched over a new leading axis.
//!
//! [`vmap`] calls a function once on per-example stand-ins of its inputs (placeholders shaped
//! like one example, for the inputs marked [`Batched`]; the tensors themselves for those marked
//! [`Shared`]) and records the lazy graph it builds. Then it rewrites that graph: every operator
//! that depends on a batched input is replaced by its batched form
//! ([`crate::batch::batch_operator`]: the workgroup gains a leading axis of the batch size, reads
//! of batched inputs and every write gain the example's number as a leading index), wired to the
//! batched inputs. The result is an ordinary lazy graph: `evaluate`, `compile`, fusion and
//! `backward` take it as usual.
//!
//! **Shared-only operators stay unbatched.** An operator that reads only shared tensors (say a
//! transposed weight matrix) computes the same value for every example; it is left as it is,
//! computed once, and the batched operators read its output as a shared input (as JAX does). So
//! no work and no memory is multiplied by the batch size for it. The price: such an operator
//! cannot fuse into a batched consumer (their workgroups differ), so a graph with a shared-only
//! chain may run one more kernel than the unbatched graph; every operator that depends on a
//! batched input keeps its workgroup relation and index patterns (both gain the same leading
//! axis), so those fuse exactly as they do unbatched.
//!
//! **Outputs** are all batched: an output that does not depend on any batched input is
//! broadcast along the new axis (a small `vmap_broadcast` operator).
//!
//! **Gradients.** A batched call of an operator with a gradient function (from
//! [`crate::autodiff::set_gradient`] or `#[operator(gradient = ..)]`) gets a batched gradient
//! function: it calls the original gradient function on per-example stand-ins of the call's
//! inputs, outputs and output gradients, and batches the gradient graph that builds, wired to
//! the batched call (its outputs are the batched call's own outputs, not a recomputation). The
//! gradient of a batched input is batched; the gradient of a shared input is the sum over the
//! examples of the per-example gradients (a `vmap_sum` operator, an accumulator over the batch
//! axis). So `backward` of a vmapped graph equals the vmapped backward.
//!
//! **Invariant:** for every example `b`, slice `b` of each output of `vmap(f, args)` equals, bit
//! for bit, `f` applied to slice `b` of the batched inputs and to the shared inputs.

use crate::batch::{batch_operator, BatchError};
use crate::dtype::{DType, Literal};
use crate::error::TraceError;
use crate::hash::Digest;
use crate::host::Scalar;
use crate::ir;
use crate::lazy::{operator_key, GradientCall, GradientFn, Lazy, LazyTensor, Node, OperatorNode};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use thiserror::Error;

/// Why [`vmap`] could not batch a function.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum VmapError {
    /// No input was marked [`Batched`]: the batch size is the leading dimension of the batched
    /// inputs.
    #[error(
        "vmap needs at least one `Batched` input: the batch size is the leading dimension of \
         the batched inputs"
    )]
    NoBatchedInput,
    /// A 0-d tensor was marked [`Batched`].
    #[error(
        "vmap: input {index} is marked `Batched` but is a 0-d tensor: a batched input needs a \
         leading axis to batch over (mark it `Shared`, or give it a leading axis)"
    )]
    ScalarBatched {
        /// The input's position in the arguments (counting from 0).
        index: usize,
    },
    /// Two batched inputs have different leading dimensions.
    #[error(
        "vmap: batched input {index} has shape {shape:?}, whose leading dimension is not the \
         batch size {batch} of batched input {first}: every batched input must have the same \
         leading dimension"
    )]
    BatchMismatch {
        /// The input's position in the arguments.
        index: usize,
        /// Its shape.
        shape: Vec<usize>,
        /// The first batched input, which set the batch size.
        first: usize,
        /// The batch size.
        batch: usize,
    },
    /// An operator of the function's graph failed to trace.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// An operator of the function's graph could not be batched.
    #[error("vmap: {0}")]
    Batch(#[from] BatchError),
}

/// An input of [`vmap`] batched along its leading axis: the function sees one example (the
/// shape without the leading axis).
pub struct Batched<'a, T>(pub &'a Lazy<T>);

/// An input of [`vmap`] shared by every example: the function sees the tensor itself.
pub struct Shared<'a, T>(pub &'a Lazy<T>);

/// An untyped input of [`vmap`] (a `Vec` or slice of them is an argument list whose function
/// takes a `Vec<LazyTensor>`).
#[derive(Clone, Copy, Debug)]
pub enum VmapInput<'a> {
    /// Batched along its leading axis.
    Batched(&'a LazyTensor),
    /// Shared by every example.
    Shared(&'a LazyTensor),
}

/// The arguments of [`vmap`]: a [`Batched`] or [`Shared`] input, a tuple of up to six of
/// them (tuples nest), or a `Vec`/slice of [`VmapInput`].
pub trait VmapArgs {
    /// What the function receives: the per-example stand-ins, in the same arrangement.
    type PerExample;
    /// Each input, and whether it is batched, in order.
    fn describe(&self) -> Vec<(LazyTensor, bool)>;
    /// Builds the function's argument from the stand-ins, in the order of [`Self::describe`].
    fn per_example(&self, stand_ins: &mut dyn Iterator<Item = LazyTensor>) -> Self::PerExample;
}

fn next(stand_ins: &mut dyn Iterator<Item = LazyTensor>) -> LazyTensor {
    stand_ins
        .next()
        .expect("vmap makes one stand-in per described input")
}

impl<T: Scalar> VmapArgs for Batched<'_, T> {
    type PerExample = Lazy<T>;
    fn describe(&self) -> Vec<(LazyTensor, bool)> {
        vec![(self.0.inner.clone(), true)]
    }
    fn per_example(&self, stand_ins: &mut dyn Iterator<Item = LazyTensor>) -> Lazy<T> {
        Lazy::from_untyped(next(stand_ins))
    }
}

impl<T: Scalar> VmapArgs for Shared<'_, T> {
    type PerExample = Lazy<T>;
    fn describe(&self) -> Vec<(LazyTensor, bool)> {
        vec![(self.0.inner.clone(), false)]
    }
    fn per_example(&self, stand_ins: &mut dyn Iterator<Item = LazyTensor>) -> Lazy<T> {
        Lazy::from_untyped(next(stand_ins))
    }
}

impl VmapArgs for [VmapInput<'_>] {
    type PerExample = Vec<LazyTensor>;
    fn describe(&self) -> Vec<(LazyTensor, bool)> {
        self.iter()
            .map(|i| match i {
                VmapInput::Batched(t) => ((*t).clone(), true),
                VmapInput::Shared(t) => ((*t).clone(), false),
            })
            .collect()
    }
    fn per_example(&self, stand_ins: &mut dyn Iterator<Item = LazyTensor>) -> Vec<LazyTensor> {
        (0..self.len()).map(|_| next(stand_ins)).collect()
    }
}

impl<A: VmapArgs + ?Sized> VmapArgs for &A {
    type PerExample = A::PerExample;
    fn describe(&self) -> Vec<(LazyTensor, bool)> {
        (**self).describe()
    }
    fn per_example(&self, stand_ins: &mut dyn Iterator<Item = LazyTensor>) -> A::PerExample {
        (**self).per_example(stand_ins)
    }
}

impl VmapArgs for Vec<VmapInput<'_>> {
    type PerExample = Vec<LazyTensor>;
    fn describe(&self) -> Vec<(LazyTensor, bool)> {
        self.as_slice().describe()
    }
    fn per_example(&self, stand_ins: &mut dyn Iterator<Item = LazyTensor>) -> Vec<LazyTensor> {
        self.as_slice().per_example(stand_ins)
    }
}

macro_rules! tuple_args {
    ($($name:ident $idx:tt),+) => {
        impl<$($name: VmapArgs),+> VmapArgs for ($($name,)+) {
            type PerExample = ($($name::PerExample,)+);
            fn describe(&self) -> Vec<(LazyTensor, bool)> {
                let mut v = Vec::new();
                $(v.extend(self.$idx.describe());)+
                v
            }
            fn per_example(
                &self,
                stand_ins: &mut dyn Iterator<Item = LazyTensor>,
            ) -> Self::PerExample {
                ($(self.$idx.per_example(stand_ins),)+)
            }
        }
    };
}
tuple_args!(A 0);
tuple_args!(A 0, B 1);
tuple_args!(A 0, B 1, C 2);
tuple_args!(A 0, B 1, C 2, D 3);
tuple_args!(A 0, B 1, C 2, D 3, E 4);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5);

/// What the function given to [`vmap`] returns: a `Lazy<T>`, a `LazyTensor`, a `Vec` of either,
/// or a tuple of up to six of these. [`vmap`] returns the batched outputs in the same
/// arrangement.
pub trait VmapOutputs: Sized {
    /// The output tensors, in order.
    fn tensors(&self) -> Vec<LazyTensor>;
    /// The same arrangement holding `batched` (in the order of [`Self::tensors`]).
    fn with_tensors(&self, batched: &mut dyn Iterator<Item = LazyTensor>) -> Self;
}

impl<T: Scalar> VmapOutputs for Lazy<T> {
    fn tensors(&self) -> Vec<LazyTensor> {
        vec![self.inner.clone()]
    }
    fn with_tensors(&self, batched: &mut dyn Iterator<Item = LazyTensor>) -> Self {
        Lazy::from_untyped(next(batched))
    }
}

impl VmapOutputs for LazyTensor {
    fn tensors(&self) -> Vec<LazyTensor> {
        vec![self.clone()]
    }
    fn with_tensors(&self, batched: &mut dyn Iterator<Item = LazyTensor>) -> Self {
        next(batched)
    }
}

impl<O: VmapOutputs> VmapOutputs for Vec<O> {
    fn tensors(&self) -> Vec<LazyTensor> {
        self.iter().flat_map(|o| o.tensors()).collect()
    }
    fn with_tensors(&self, batched: &mut dyn Iterator<Item = LazyTensor>) -> Self {
        self.iter().map(|o| o.with_tensors(batched)).collect()
    }
}

macro_rules! tuple_outputs {
    ($($name:ident $idx:tt),+) => {
        impl<$($name: VmapOutputs),+> VmapOutputs for ($($name,)+) {
            fn tensors(&self) -> Vec<LazyTensor> {
                let mut v = Vec::new();
                $(v.extend(self.$idx.tensors());)+
                v
            }
            fn with_tensors(&self, batched: &mut dyn Iterator<Item = LazyTensor>) -> Self {
                ($(self.$idx.with_tensors(batched),)+)
            }
        }
    };
}
tuple_outputs!(A 0);
tuple_outputs!(A 0, B 1);
tuple_outputs!(A 0, B 1, C 2);
tuple_outputs!(A 0, B 1, C 2, D 3);
tuple_outputs!(A 0, B 1, C 2, D 3, E 4);
tuple_outputs!(A 0, B 1, C 2, D 3, E 4, F 5);

/// Batches `f` over a new leading axis: `f` is written for one example, and `vmap` returns its
/// outputs for every example of the batch, each with the batch axis in front.
///
/// `args` marks each input [`Batched`] (the function sees one example: the shape without the
/// leading axis, which is the batch size and must be equal for every batched input) or
/// [`Shared`] (every example sees the same tensor). `f` is called once, on placeholders of one
/// example, and records a lazy graph; `vmap` rewrites it into its batched form (see the module
/// documentation). Nothing runs: evaluate, compile, fuse or differentiate the result as usual.
/// A batch of 0 gives empty outputs.
///
/// ```
/// use ovl_core::vmap::{vmap, Batched, Shared};
/// use ovl_core::Lazy;
///
/// // Rows of x (batched) scaled by w (shared): each example is one row.
/// let x = Lazy::from(ndarray::array![[1.0f32, 2.0], [3.0, 4.0], [5.0, 6.0]]);
/// let w = Lazy::from(ndarray::array![10.0f32, 100.0]);
/// let y: Lazy<f32> = vmap(|(row, w): (Lazy<f32>, Lazy<f32>)| &row * &w, (Batched(&x), Shared(&w)))
///     .unwrap();
/// assert_eq!(y.shape(), &[3, 2]);
/// ```
pub fn vmap<A: VmapArgs, O: VmapOutputs>(
    f: impl FnOnce(A::PerExample) -> O,
    args: A,
) -> Result<O, VmapError> {
    let inputs = args.describe();
    let mut batch = None;
    for (index, (t, batched)) in inputs.iter().enumerate() {
        if !batched {
            continue;
        }
        let Some(&lead) = t.shape.first() else {
            return Err(VmapError::ScalarBatched { index });
        };
        match batch {
            None => batch = Some((index, lead)),
            Some((first, b)) if b != lead => {
                return Err(VmapError::BatchMismatch {
                    index,
                    shape: t.shape.to_vec(),
                    first,
                    batch: b,
                })
            }
            Some(_) => {}
        }
    }
    let Some((_, batch)) = batch else {
        return Err(VmapError::NoBatchedInput);
    };
    let stand_ins: Vec<LazyTensor> = inputs
        .iter()
        .enumerate()
        .map(|(i, (t, batched))| {
            if *batched {
                LazyTensor::placeholder(
                    &format!("vmap example of input {i}"),
                    t.dtype,
                    &t.shape[1..],
                )
            } else {
                t.clone()
            }
        })
        .collect();
    let per_example = args.per_example(&mut stand_ins.iter().cloned());
    let outputs = f(per_example);
    let mut batcher = Batcher::new(batch);
    for ((t, batched), s) in inputs.iter().zip(&stand_ins) {
        if *batched {
            batcher.seed(&s.node, Mapped::Tensor(t.clone()));
        } else {
            batcher.seed(&t.node, Mapped::Shared);
        }
    }
    let mapped = batcher.run(&outputs.tensors())?;
    let batched: Vec<LazyTensor> = mapped
        .into_iter()
        .map(|(t, is_batched)| {
            if is_batched {
                Ok(t)
            } else {
                broadcast_op(&t, batch)
            }
        })
        .collect::<Result<_, VmapError>>()?;
    Ok(outputs.with_tensors(&mut batched.into_iter()))
}

/// What a node of the per-example graph becomes.
#[derive(Clone)]
enum Mapped {
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
struct Batcher {
    batch: usize,
    map: HashMap<usize, Mapped>,
    /// Keeps alive every node whose address is a key of `map`.
    alive: Vec<Arc<Node>>,
}

impl Batcher {
    fn new(batch: usize) -> Batcher {
        Batcher {
            batch,
            map: HashMap::new(),
            alive: Vec::new(),
        }
    }

    fn seed(&mut self, node: &Arc<Node>, mapped: Mapped) {
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
    fn run(&mut self, outputs: &[LazyTensor]) -> Result<Vec<(LazyTensor, bool)>, VmapError> {
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
                Node::Host(_) | Node::Placeholder(_) => Mapped::Shared,
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
        if let Some(gradient) = op.gradient.0.get() {
            let batched =
                batched_gradient(gradient.clone(), op.dag.clone(), op.key, mask, self.batch);
            let _ = node.gradient.0.set(batched);
        }
        Ok(Mapped::Node(Arc::new(Node::Operator(node))))
    }
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
    type Memo = HashMap<(Digest, Vec<bool>, usize), (Arc<ir::ExpressionDag>, Digest)>;
    /// Entries kept before the memo starts again (a batched operator is small; this bounds it).
    const CAPACITY: usize = 4096;
    static MEMO: OnceLock<Mutex<Memo>> = OnceLock::new();
    let memo = MEMO.get_or_init(Default::default);
    let memo_key = (op.key, mask.to_vec(), batch);
    if let Some(hit) = memo
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&memo_key)
    {
        return Ok(hit.clone());
    }
    let dag = Arc::new(batch_operator(&op.dag, mask, batch as u64)?);
    let key = operator_key(&dag);
    let mut memo = memo.lock().unwrap_or_else(|e| e.into_inner());
    if memo.len() >= CAPACITY {
        memo.clear();
    }
    memo.insert(memo_key, (dag.clone(), key));
    Ok((dag, key))
}

/// The gradient function of a batched call, made from the per-example call's `gradient`.
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
    let outputs: Vec<LazyTensor> = dag
        .outputs
        .iter()
        .enumerate()
        .map(|(i, t)| LazyTensor {
            node: node.clone(),
            output: i,
            dtype: DType::from_ir(t.dtype).unwrap_or(DType::F32),
            shape: t.shape.iter().map(|&d| d as usize).collect(),
        })
        .collect();
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

fn source_here(line: u32) -> Option<ir::SourceLocation> {
    Some(ir::SourceLocation {
        file: file!().into(),
        line,
        column: 1,
    })
}

/// Records an operator built by hand (validated) on `inputs`; returns its only output.
fn record(
    dag: ir::ExpressionDag,
    inputs: Vec<LazyTensor>,
    gradient: Option<Arc<GradientFn>>,
) -> Result<LazyTensor, VmapError> {
    crate::validate::validate(&dag).map_err(|e| BatchError {
        operator: dag.name.clone(),
        defined_at: ovl_ir::names::defined_at(&dag),
        message: e.to_string(),
    })?;
    let out = &dag.outputs[0];
    let dtype = DType::from_ir(out.dtype).unwrap_or(DType::F32);
    let shape: Arc<[usize]> = out.shape.iter().map(|&d| d as usize).collect();
    let node = OperatorNode::new(Arc::new(dag), inputs, None);
    if let Some(g) = gradient {
        let _ = node.gradient.0.set(g);
    }
    Ok(LazyTensor {
        node: Arc::new(Node::Operator(node)),
        output: 0,
        dtype,
        shape,
    })
}

/// `t` repeated `batch` times along a new leading axis (`vmap_broadcast`); its gradient is
/// [`sum_op`].
fn broadcast_op(t: &LazyTensor, batch: usize) -> Result<LazyTensor, VmapError> {
    use crate::builder::{Builder, IN, OUT};
    let shape: Vec<u64> = t.shape.iter().map(|&d| d as u64).collect();
    let out_shape: Vec<u64> = std::iter::once(batch as u64)
        .chain(shape.iter().copied())
        .collect();
    let mut b = Builder::new("vmap_broadcast", &out_shape);
    b.dag.source = source_here(line!());
    let x = b.input(t.dtype, &shape);
    let out = b.output(t.dtype, &out_shape);
    let p: Vec<u32> = (0..out_shape.len() as u32).map(|a| b.position(a)).collect();
    let v = b.read(IN, x, &p[1..]);
    b.write(OUT, out, &p, v);
    let gradient: Arc<GradientFn> = Arc::new(|call: &GradientCall| {
        vec![call.output_grads[0].as_ref().map(|g| {
            sum_op(g).unwrap_or_else(|e| {
                failed_tensor(
                    "vmap_broadcast",
                    &call.inputs[0],
                    Arc::new(error_at_vmap("vmap_broadcast", &e)),
                )
            })
        })]
    });
    record(b.build(), vec![t.clone()], Some(gradient))
}

/// The sum of `t` over its leading axis (`vmap_sum`: an accumulator over the batch, in the
/// order `proto/ovl.proto` defines for accumulators); its gradient is [`broadcast_op`].
fn sum_op(t: &LazyTensor) -> Result<LazyTensor, VmapError> {
    use crate::builder::{Builder, IN, OUT};
    let batch = t.shape.first().copied().unwrap_or(0);
    let shape: Vec<u64> = t.shape.iter().skip(1).map(|&d| d as u64).collect();
    let workgroup = if shape.is_empty() {
        vec![1]
    } else {
        shape.clone()
    };
    let mut b = Builder::new("vmap_sum", &workgroup);
    b.dag.source = source_here(line!());
    let full: Vec<u64> = t.shape.iter().map(|&d| d as u64).collect();
    let x = b.input(t.dtype, &full);
    let out = b.output(t.dtype, &shape);
    let p: Vec<u32> = (0..shape.len() as u32).map(|a| b.position(a)).collect();
    let zero = if t.dtype.is_float() {
        Literal::Float(0.0)
    } else {
        Literal::Int(0)
    };
    let init = b.constant(t.dtype, zero);
    let acc = b.accumulator(ovl_ir::ops::Combiner::Sum, init);
    let (start, end, step) = (b.i64(0), b.i64(batch as i64), b.i64(1));
    let i = b.range(start, end, step);
    let index: Vec<u32> = std::iter::once(i).chain(p.iter().copied()).collect();
    let v = b.read(IN, x, &index);
    b.accumulate(acc, v);
    b.end_range();
    b.write(OUT, out, &p, acc);
    let gradient: Arc<GradientFn> = Arc::new(move |call: &GradientCall| {
        vec![call.output_grads[0].as_ref().map(|g| {
            broadcast_op(g, batch).unwrap_or_else(|e| {
                failed_tensor(
                    "vmap_sum",
                    &call.inputs[0],
                    Arc::new(error_at_vmap("vmap_sum", &e)),
                )
            })
        })]
    });
    record(b.build(), vec![t.clone()], Some(gradient))
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

fn error_at_vmap(operator: &str, e: &VmapError) -> TraceError {
    TraceError {
        operator: operator.into(),
        operator_file: file!().into(),
        operator_line: line!(),
        file: file!().into(),
        line: line!(),
        column: 0,
        message: e.to_string(),
    }
}

/// A tensor shaped like `like` whose evaluation reports `error`.
fn failed_tensor(name: &str, like: &LazyTensor, error: Arc<TraceError>) -> LazyTensor {
    let dag = ir::ExpressionDag {
        version: crate::IR_VERSION,
        name: name.into(),
        workgroup_shape: vec![1],
        outputs: vec![ir::TensorType {
            dtype: like.dtype.to_ir() as i32,
            shape: like.shape.iter().map(|&d| d as u64).collect(),
        }],
        ..Default::default()
    };
    LazyTensor {
        node: Arc::new(Node::Operator(OperatorNode::new(
            Arc::new(dag),
            Vec::new(),
            Some(error),
        ))),
        output: 0,
        dtype: like.dtype,
        shape: like.shape.clone(),
    }
}

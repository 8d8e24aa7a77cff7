//! The lazy operator graph: calling an operator records a node; nothing runs until the graph is
//! evaluated. [`Lazy<T>`] is a typed handle on one output of a node (or on a host array).

use crate::dtype::DType;
use crate::error::TraceError;
use crate::hash::Digest;
use crate::host::Scalar;
use crate::host::{DeviceData, HostTensor};
use crate::ir;
use sha2::Digest as _;
use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

mod graph;
pub mod layout;
pub use graph::{build_graph, graph_key, Graph, GraphInput, GraphKey};
pub(crate) use graph::{walk_nodes, Walked};

/// A node of the lazy graph.
#[derive(Debug)]
pub enum Node {
    /// Data supplied by the host.
    Host(Arc<HostTensor>),
    /// Data held on a device (a GPU tensor): read in place by the backend that holds it,
    /// copied to the host for any other.
    Device(Arc<dyn DeviceData>),
    /// A graph input without data: its value is supplied when the exported graph is called
    /// (for example a `tf.Tensor` fed to TensorFlow's `DynamicLib` op).
    Placeholder(PlaceholderNode),
    /// One call of an operator.
    Operator(OperatorNode),
}

/// A recorded operator call.
#[derive(Debug)]
pub struct OperatorNode {
    /// The traced operator.
    pub dag: Arc<ir::ExpressionDag>,
    /// The operator's identity, computed once when it is recorded ([`operator_key`]): what the
    /// graph key of [`graph_key`] is built from, so that a graph seen before is recognised
    /// without walking its IR again.
    pub key: Digest,
    /// Its inputs, in the order of `dag.inputs`.
    pub inputs: Vec<LazyTensor>,
    /// The error found while tracing, reported when the graph is evaluated.
    pub error: Option<Arc<TraceError>>,
    /// The call's gradient function, if one was attached ([`crate::autodiff::set_gradient`]).
    pub gradient: GradientSlot,
}

impl OperatorNode {
    /// A recorded call of `dag` on `inputs`; computes the operator's [`key`](Self::key).
    pub fn new(
        dag: Arc<ir::ExpressionDag>,
        inputs: Vec<LazyTensor>,
        error: Option<Arc<TraceError>>,
    ) -> OperatorNode {
        let key = operator_key(&dag);
        OperatorNode::with_key(dag, key, inputs, error)
    }

    /// A recorded call of `dag` whose [`operator_key`] is already known (a memoized trace).
    pub fn with_key(
        dag: Arc<ir::ExpressionDag>,
        key: Digest,
        inputs: Vec<LazyTensor>,
        error: Option<Arc<TraceError>>,
    ) -> OperatorNode {
        OperatorNode {
            dag,
            key,
            inputs,
            error,
            gradient: Default::default(),
        }
    }
}

/// Dropping a node drops its inputs; a long chain of nodes each held only by the next would
/// recurse once per node and overflow the stack. Instead the inputs are taken out of every node
/// this drop frees and dropped from an explicit worklist, so a graph of any depth is dropped in
/// constant stack space and time linear in the nodes freed.
impl Drop for OperatorNode {
    fn drop(&mut self) {
        let mut pending: Vec<LazyTensor> = std::mem::take(&mut self.inputs);
        while let Some(t) = pending.pop() {
            // Only the last handle on a node frees it; any other one is a decrement.
            if let Some(Node::Operator(mut op)) = Arc::into_inner(t.node) {
                pending.append(&mut op.inputs);
                // `op` is dropped here with no inputs left: no recursion.
            }
        }
    }
}

/// The identity of a traced operator: its canonical hash ([`crate::hash::canonical_hash`]) and
/// its source location. The location counts here (unlike in the canonical hash) because a
/// fused graph carries it into error messages: two identical bodies at different lines are two
/// operators for the plan cache.
pub fn operator_key(dag: &ir::ExpressionDag) -> Digest {
    let mut h = sha2::Sha256::new();
    h.update(b"ovl.lazy.operator_key");
    h.update(crate::hash::canonical_hash(dag).0);
    match &dag.source {
        None => h.update([0u8]),
        Some(s) => {
            h.update([1u8]);
            h.update((s.file.len() as u64).to_le_bytes());
            h.update(s.file.as_bytes());
            h.update(s.line.to_le_bytes());
            h.update(s.column.to_le_bytes());
        }
    }
    Digest(h.finalize().into())
}

/// Where an operator call keeps its gradient function: the one attached by the user (set at
/// most once), else the built-in one of arithmetic on handles (`lazy_ops`), which a user's
/// replaces.
#[derive(Default)]
pub struct GradientSlot {
    attached: std::sync::OnceLock<Gradient>,
    builtin: std::sync::OnceLock<Gradient>,
}

/// A gradient function attached to a call, with what identifies it for the cache of backward
/// graphs ([`crate::autodiff`]).
#[derive(Clone)]
pub(crate) struct Gradient {
    pub(crate) func: Arc<GradientFn>,
    /// `None` when the function cannot be identified (a closure that captures values without a
    /// key describing them): a backward pass through it is built every time.
    pub(crate) id: Option<Arc<GradientId>>,
}

/// The identity of a gradient function: its Rust type (a closure's type is unique to its
/// source and names its generic arguments) and the key of the values it captures.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct GradientId {
    pub(crate) type_id: std::any::TypeId,
    pub(crate) key: Box<[u8]>,
    /// For a gradient derived from another one (the batched gradient `vmap` attaches): the
    /// identity of the gradient it was derived from; `type_id` and `key` then describe the
    /// derivation.
    pub(crate) derived_from: Option<Arc<GradientId>>,
}

impl Gradient {
    /// `func` with its identity: `key` describes what it captures (set by
    /// [`crate::autodiff::set_gradient_keyed`]); without a key only a function that captures
    /// nothing (a zero-sized closure or a function item) is identified.
    pub(crate) fn new<F>(func: F, key: Option<Vec<u8>>) -> Gradient
    where
        F: Fn(&GradientCall) -> Vec<Option<LazyTensor>> + Send + Sync + 'static,
    {
        let key = match key {
            Some(k) => Some(k),
            None if std::mem::size_of::<F>() == 0 => Some(Vec::new()),
            None => None,
        };
        Gradient {
            id: key.map(|key| {
                Arc::new(GradientId {
                    type_id: std::any::TypeId::of::<F>(),
                    key: key.into_boxed_slice(),
                    derived_from: None,
                })
            }),
            func: Arc::new(func),
        }
    }
}

impl Gradient {
    /// `func`, derived from the gradient identified by `from` (`None`: unidentified) by a
    /// derivation of type `D` described by `key`; identified exactly when `from` is.
    pub(crate) fn derived<D: 'static>(
        func: Arc<GradientFn>,
        from: Option<&Arc<GradientId>>,
        key: Vec<u8>,
    ) -> Gradient {
        Gradient {
            func,
            id: from.map(|from| {
                Arc::new(GradientId {
                    type_id: std::any::TypeId::of::<D>(),
                    key: key.into_boxed_slice(),
                    derived_from: Some(from.clone()),
                })
            }),
        }
    }
}

impl GradientSlot {
    /// A slot holding `gradient`.
    pub(crate) fn with(gradient: Gradient) -> GradientSlot {
        GradientSlot {
            attached: std::sync::OnceLock::from(gradient),
            builtin: std::sync::OnceLock::new(),
        }
    }

    /// The call's gradient: the attached one, else the built-in one.
    pub(crate) fn get(&self) -> Option<&Gradient> {
        self.attached.get().or_else(|| self.builtin.get())
    }

    /// Attaches `gradient`; `false` when one was attached before.
    pub(crate) fn set(&self, gradient: Gradient) -> bool {
        self.attached.set(gradient).is_ok()
    }

    /// Sets the built-in gradient, which an attached one overrides.
    pub(crate) fn set_builtin(&self, gradient: Gradient) {
        let _ = self.builtin.set(gradient);
    }
}

impl fmt::Debug for GradientSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.get().is_some() { "set" } else { "none" })
    }
}

/// A graph input whose data is supplied at call time.
#[derive(Debug)]
pub struct PlaceholderNode {
    /// Unique in this process: identifies the placeholder in a built [`Graph`].
    pub id: u64,
    /// The name given by the user (for bundles and error messages).
    pub name: String,
    /// The element type.
    pub dtype: DType,
    /// The static shape.
    pub shape: Arc<[usize]>,
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
    /// Handles on every output of the operator `node`, whose IR is `dag`.
    pub(crate) fn outputs_of(node: &Arc<Node>, dag: &ir::ExpressionDag) -> Vec<LazyTensor> {
        dag.outputs
            .iter()
            .enumerate()
            .map(|(i, t)| LazyTensor {
                node: node.clone(),
                output: i,
                dtype: DType::from_ir(t.dtype).unwrap_or(DType::F32),
                shape: t.shape.iter().map(|&d| d as usize).collect(),
            })
            .collect()
    }

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

    /// A handle on data held on a device (see [`DeviceData`]).
    pub fn device(data: Arc<dyn DeviceData>) -> LazyTensor {
        let dtype = data.dtype();
        let shape: Arc<[usize]> = data.shape().into();
        LazyTensor {
            node: Arc::new(Node::Device(data)),
            output: 0,
            dtype,
            shape,
        }
    }

    /// A handle on a new placeholder: a graph input whose data is supplied at call time.
    pub fn placeholder(name: &str, dtype: DType, shape: &[usize]) -> LazyTensor {
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        let shape: Arc<[usize]> = shape.into();
        LazyTensor {
            node: Arc::new(Node::Placeholder(PlaceholderNode {
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                name: name.to_string(),
                dtype,
                shape: shape.clone(),
            })),
            output: 0,
            dtype,
            shape,
        }
    }

    /// The operator that produces this tensor, if any.
    pub fn operator(&self) -> Option<&OperatorNode> {
        match &*self.node {
            Node::Operator(op) => Some(op),
            Node::Host(_) | Node::Device(_) | Node::Placeholder(_) => None,
        }
    }

    /// The placeholder this handle stands for, if it is one.
    pub fn placeholder_node(&self) -> Option<&PlaceholderNode> {
        match &*self.node {
            Node::Placeholder(p) => Some(p),
            _ => None,
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
        let from = match &*self.inner.node {
            Node::Operator(op) => format!("output {} of `{}`", self.inner.output, op.dag.name),
            Node::Placeholder(p) => format!("placeholder `{}`", p.name),
            Node::Host(_) => "host data".to_string(),
            Node::Device(_) => "device data".to_string(),
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

    /// A placeholder: a graph input of this dtype and shape whose data is supplied when the
    /// exported graph is called (it cannot be evaluated directly).
    pub fn placeholder(name: &str, shape: &[usize]) -> Self {
        Lazy::from_untyped(LazyTensor::placeholder(name, T::DTYPE, shape))
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.inner.shape
    }

    /// The untyped handle.
    pub fn untyped(&self) -> &LazyTensor {
        &self.inner
    }

    /// The untyped handle, by value (what gradient functions return).
    pub fn into_untyped(self) -> LazyTensor {
        self.inner
    }

    /// The traced operator that produces this tensor (`None` for host data).
    pub fn operator_ir(&self) -> Option<&ir::ExpressionDag> {
        self.inner.operator().map(|op| &*op.dag)
    }
}

/// An untyped handle as a typed one (for example an output of an untyped `vmap`); gives the
/// handle back when its dtype is not `T`.
impl<T: Scalar> TryFrom<LazyTensor> for Lazy<T> {
    type Error = LazyTensor;
    fn try_from(t: LazyTensor) -> Result<Self, LazyTensor> {
        if t.dtype == T::DTYPE {
            Ok(Lazy::from_untyped(t))
        } else {
            Err(t)
        }
    }
}

impl<T: Scalar, D: ndarray::Dimension> From<ndarray::Array<T, D>> for Lazy<T> {
    fn from(a: ndarray::Array<T, D>) -> Self {
        Lazy::from_untyped(LazyTensor::host(host_from_array(a)))
    }
}

/// A borrowed array of any layout (`Lazy::from(&x)`): its elements are copied into the graph,
/// in row-major order, in one pass (no `clone` first).
impl<T: Scalar, S: ndarray::Data<Elem = T>, D: ndarray::Dimension> From<&ndarray::ArrayBase<S, D>>
    for Lazy<T>
{
    fn from(a: &ndarray::ArrayBase<S, D>) -> Self {
        Lazy::from_untyped(LazyTensor::host(host_from_view(a.view())))
    }
}

/// A view of any layout (`Lazy::from(x.t())`), as a borrowed array.
impl<T: Scalar, D: ndarray::Dimension> From<ndarray::ArrayView<'_, T, D>> for Lazy<T> {
    fn from(a: ndarray::ArrayView<'_, T, D>) -> Self {
        Lazy::from_untyped(LazyTensor::host(host_from_view(a)))
    }
}

/// Moves an ndarray into a host tensor (copying only if it is not in standard layout; then
/// with [`layout::standard_order`], a tiled copy that costs about a plain copy of its bytes).
pub fn host_from_array<T: Scalar, D: ndarray::Dimension>(a: ndarray::Array<T, D>) -> HostTensor {
    if !a.is_standard_layout() {
        return host_from_view(a.view());
    }
    let shape = a.shape().to_vec();
    let (v, offset) = a.into_raw_vec_and_offset();
    let data = match offset {
        Some(0) | None => v,
        Some(o) => v[o..].to_vec(),
    };
    HostTensor {
        shape,
        data: T::wrap(data),
    }
}

/// Copies a view of any layout into a host tensor in row-major order, in one pass
/// ([`layout::standard_order`]).
pub fn host_from_view<T: Scalar, D: ndarray::Dimension>(
    a: ndarray::ArrayView<'_, T, D>,
) -> HostTensor {
    HostTensor {
        shape: a.shape().to_vec(),
        data: T::wrap(layout::standard_order(a)),
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

/// A view by value (`m.t()`, `x.slice(..)`) works like a reference to the array: its elements
/// are copied into the graph, in row-major order, in one pass whatever the view's layout.
impl<T: Scalar, D: ndarray::Dimension> IntoLazy<T> for ndarray::ArrayView<'_, T, D> {
    fn into_lazy(self) -> Lazy<T> {
        Lazy::from_untyped(LazyTensor::host(host_from_view(self)))
    }
}

impl<T: Scalar, D: ndarray::Dimension> IntoLazy<T> for ndarray::ArrayViewMut<'_, T, D> {
    fn into_lazy(self) -> Lazy<T> {
        self.view().into_lazy()
    }
}

impl<T: Scalar, S: ndarray::Data<Elem = T>, D: ndarray::Dimension> IntoLazy<T>
    for &ndarray::ArrayBase<S, D>
{
    fn into_lazy(self) -> Lazy<T> {
        self.view().into_lazy()
    }
}

// A lazy graph is immutable once built, except for the gradient slot of an operator call,
// which is set at most once, atomically (`OnceLock`): a panic cannot leave a handle in a state
// that a caller could observe half-updated. So the handles are unwind safe, whatever closure a
// gradient slot holds.
impl std::panic::UnwindSafe for LazyTensor {}
impl std::panic::RefUnwindSafe for LazyTensor {}
impl<T> std::panic::UnwindSafe for Lazy<T> {}
impl<T> std::panic::RefUnwindSafe for Lazy<T> {}

/// What a gradient function receives: one call of an operator.
pub struct GradientCall<'a> {
    /// The operator's name.
    pub name: &'a str,
    /// The call's inputs, in the operator's order.
    pub inputs: &'a [LazyTensor],
    /// The call's outputs.
    pub outputs: Vec<LazyTensor>,
    /// The gradient flowing into each output (`None`: the output does not reach the seeds).
    pub output_grads: Vec<Option<LazyTensor>>,
}

impl GradientCall<'_> {
    /// Input `i` as a typed handle.
    ///
    /// # Panics
    /// If the input does not exist or has another dtype: a bug in the gradient function, which
    /// [`crate::autodiff::backward`] reports as [`crate::autodiff::GradError::BadGradient`].
    pub fn input<T: Scalar>(&self, i: usize) -> Lazy<T> {
        typed(&self.inputs[i], self.name)
    }

    /// Output `i` as a typed handle.
    ///
    /// # Panics
    /// As [`GradientCall::input`].
    pub fn output<T: Scalar>(&self, i: usize) -> Lazy<T> {
        typed(&self.outputs[i], self.name)
    }

    /// The gradient of output `i`, or zeros of its shape when it does not flow.
    ///
    /// # Panics
    /// As [`GradientCall::input`].
    pub fn output_grad<T: Scalar>(&self, i: usize) -> Lazy<T> {
        match &self.output_grads[i] {
            Some(g) => typed(g, self.name),
            None => {
                let shape = self.outputs[i].shape.to_vec();
                Lazy::from(ndarray::ArrayD::<T>::default(ndarray::IxDyn(&shape)))
            }
        }
    }
}

fn typed<T: Scalar>(t: &LazyTensor, operator: &str) -> Lazy<T> {
    assert_eq!(
        t.dtype,
        T::DTYPE,
        "the gradient function of `{operator}` asked for a {} tensor where there is a {} one",
        T::DTYPE,
        t.dtype
    );
    Lazy::from_untyped(t.clone())
}

/// A gradient function: returns one entry per input of the call (`None` where the input has no
/// gradient, e.g. an integer index tensor).
pub type GradientFn = dyn Fn(&GradientCall) -> Vec<Option<LazyTensor>> + Send + Sync;

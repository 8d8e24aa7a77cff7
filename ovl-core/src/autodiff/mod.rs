//! Reverse-mode differentiation of the lazy graph.
//!
//! An operator call gets a gradient with [`set_gradient`]: a Rust function that, given the call's
//! inputs, outputs and output gradients (all lazy handles), records the operators that compute
//! the input gradients. [`backward`] walks the graph from the seeds back to the tensors asked
//! for, applying the chain rule and summing the contributions of a tensor used several times.
//! The result is an ordinary lazy graph: it is fused and compiled like any other, together with
//! the forward graph or on its own.
//!
//! A call without a gradient function (none attached, none built in) gets one derived from its
//! IR (`ovl_ir::grad`, recorded by `derived`): gradient operators that recompute what they need
//! from the call's inputs and read its outputs' adjoints. A written gradient always wins; an
//! operator whose gradient cannot be derived is a [`GradError::Underivable`] naming it.

mod cache;
mod derived;

pub use cache::{
    backward_cache_stats, cache as backward_cache, clear_backward_cache,
    set_backward_cache_capacity, BackwardCacheStats,
};

use crate::dtype::DType;
use crate::host::Scalar;
use crate::lazy::Gradient;
pub use crate::lazy::{GradientCall, GradientFn};
use crate::lazy::{Lazy, LazyTensor, Node};
use crate::trace::memo::{TraceArg, TraceKey};
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;
use thiserror::Error;

/// Attaches a gradient function to the operator call that produced `output` (any of its
/// outputs). A call has at most one gradient; the first one set wins. Returns `false` when
/// `output` is not the result of an operator call or the call already has a gradient.
///
/// A function that captures nothing (a function item, a closure without captures) lets
/// [`backward`] reuse the backward graph it built for a forward graph of the same structure
/// (see [`backward`]); a closure that captures values should be attached with
/// [`set_gradient_keyed`], else every backward pass through it is built afresh.
pub fn set_gradient<T>(
    output: &Lazy<T>,
    gradient: impl Fn(&GradientCall) -> Vec<Option<LazyTensor>> + Send + Sync + 'static,
) -> bool {
    set(output, Gradient::new(gradient, None))
}

/// [`set_gradient`] for a closure that captures values: `key` must describe every value the
/// closure captures (as trace-time arguments key the trace memo: numbers, strings, slices,
/// tuples, ... of [`TraceArg`]). Calls whose gradient closures have the same type and equal
/// keys are assumed to build the same backward graph for the same forward structure, so that
/// [`backward`] can reuse it; a key that leaves out a captured value that changes would make
/// it reuse a stale graph.
///
/// ```
/// use ovl_core::autodiff::set_gradient_keyed;
/// use ovl_core::Lazy;
/// # let x = Lazy::from(ndarray::array![1.0f32, 2.0]);
/// # let y = &x + &x;
/// let scale = 3.0f32;
/// set_gradient_keyed(&y, &scale, move |call| {
///     vec![Some((&call.output_grad::<f32>(0) * scale).into_untyped()), None]
/// });
/// ```
pub fn set_gradient_keyed<T, K: TraceArg + ?Sized>(
    output: &Lazy<T>,
    key: &K,
    gradient: impl Fn(&GradientCall) -> Vec<Option<LazyTensor>> + Send + Sync + 'static,
) -> bool {
    let mut k = TraceKey::new();
    key.write_key(&mut k);
    set(output, Gradient::new(gradient, Some(k.into_bytes())))
}

fn set<T>(output: &Lazy<T>, gradient: Gradient) -> bool {
    match &*output.inner.node {
        Node::Operator(op) => op.gradient.set(gradient),
        _ => false,
    }
}

/// Why [`backward`] could not build the gradient graph.
#[derive(Debug, Error)]
pub enum GradError {
    /// A seed and its gradient differ in dtype or shape.
    #[error(
        "the gradient seed for a {dtype}{shape:?} tensor is a {seed_dtype}{seed_shape:?} \
         tensor; pass a gradient of the same dtype and shape"
    )]
    SeedMismatch {
        /// The seeded tensor's dtype.
        dtype: DType,
        /// The seeded tensor's shape.
        shape: Vec<usize>,
        /// The gradient's dtype.
        seed_dtype: DType,
        /// The gradient's shape.
        seed_shape: Vec<usize>,
    },
    /// A gradient function returned the wrong number of gradients, or a gradient of the wrong
    /// dtype or shape.
    #[error("the gradient of operator `{operator}` is wrong: {message}")]
    BadGradient {
        /// The operator.
        operator: String,
        /// What was wrong.
        message: String,
    },
    /// The operator has no gradient function and its gradient cannot be derived from its IR.
    #[error(transparent)]
    Underivable(#[from] ovl_ir::grad::DeriveError),
    /// The operator's trace failed, so it has no IR to differentiate.
    #[error("cannot derive the gradient of operator `{0}`: its trace failed: {1}")]
    Trace(String, String),
    /// Gradients flow only through floating-point tensors.
    #[error("cannot differentiate through the {0} tensor of operator `{1}`: gradients are only defined for f32 and f64 tensors")]
    NotFloat(DType, String),
}

/// The gradients computed by [`backward`], looked up by the tensor they belong to.
#[derive(Default)]
pub struct Gradients {
    /// Keyed by the tensor; holds the tensor too, so that its node (and the key) stays alive.
    map: HashMap<Key, (LazyTensor, LazyTensor)>,
}

impl fmt::Debug for Gradients {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gradients({} tensors)", self.map.len())
    }
}

impl Gradients {
    fn get(&self, x: &LazyTensor) -> Option<&LazyTensor> {
        self.map.get(&key(x)).map(|(_, g)| g)
    }

    fn insert(&mut self, x: &LazyTensor, g: LazyTensor) {
        self.map.insert(key(x), (x.clone(), g));
    }

    /// The gradient with respect to `x` (`None` if no seed depends on `x`).
    pub fn of<T: Scalar>(&self, x: &Lazy<T>) -> Option<Lazy<T>> {
        self.map
            .get(&key(&x.inner))
            .map(|(_, g)| Lazy::from_untyped(g.clone()))
    }

    /// The gradient with respect to `x`, or zeros of its shape if no seed depends on it.
    pub fn of_or_zeros<T: Scalar>(&self, x: &Lazy<T>) -> Lazy<T> {
        self.of(x)
            .unwrap_or_else(|| Lazy::from(ndarray::ArrayD::<T>::default(ndarray::IxDyn(x.shape()))))
    }
}

/// A tensor's identity: its node and output number.
type Key = (usize, usize);

/// A node's identity while the graph is alive: its address.
fn node_id(node: &Arc<Node>) -> usize {
    Arc::as_ptr(node) as *const u8 as usize
}

fn key(t: &LazyTensor) -> Key {
    (node_id(&t.node), t.output)
}

/// Builds the gradients of `wrt` from `seeds`: pairs of (output, gradient of the loss with
/// respect to that output). Nothing runs; evaluate the returned handles (together with the
/// forward outputs, if you want them, so that they are computed and fused once).
///
/// A backward pass over a forward graph seen before (the same operators, wiring, shapes and
/// dtypes, seeds, tensors asked for and gradient functions; any host data) is replayed from a
/// cache without calling the gradient functions (see the `cache` module documentation:
/// gradient functions that capture nothing or were attached with [`set_gradient_keyed`] take
/// part; the cache is bounded and cleared like `ovl`'s plan cache; [`backward_cache_stats`]).
///
/// The `ovl` crate's documentation has an example (section "Gradients").
pub fn backward<T: Scalar>(
    seeds: &[(&Lazy<T>, &Lazy<T>)],
    wrt: &[&Lazy<T>],
) -> Result<Gradients, GradError> {
    let seeds: Vec<(&LazyTensor, &LazyTensor)> =
        seeds.iter().map(|(y, dy)| (&y.inner, &dy.inner)).collect();
    let wrt: Vec<&LazyTensor> = wrt.iter().map(|x| &x.inner).collect();
    backward_untyped(&seeds, &wrt)
}

/// [`backward`] on untyped handles, for seeds and targets of different dtypes.
pub fn backward_untyped(
    seeds: &[(&LazyTensor, &LazyTensor)],
    wrt: &[&LazyTensor],
) -> Result<Gradients, GradError> {
    match cache::lookup(seeds, wrt) {
        cache::Lookup::Hit(gradients) => Ok(gradients),
        cache::Lookup::Miss(miss) => {
            let gradients = build(seeds, wrt)?;
            miss.remember(wrt, &gradients);
            Ok(gradients)
        }
        cache::Lookup::Bypass => build(seeds, wrt),
    }
}

/// The backward pass itself: calls the gradient functions from the seeds back to `wrt`.
fn build(
    seeds: &[(&LazyTensor, &LazyTensor)],
    wrt: &[&LazyTensor],
) -> Result<Gradients, GradError> {
    // Operator nodes in a topological order (inputs first), reachable from the seeds.
    let mut order: Vec<Arc<Node>> = Vec::new();
    let mut seen = HashSet::new();
    for (y, _) in seeds {
        visit(&y.node, &mut seen, &mut order);
    }
    // Which nodes lead to a tensor we differentiate with respect to.
    let targets: HashSet<usize> = wrt.iter().map(|x| node_id(&x.node)).collect();
    let mut leads: HashSet<usize> = HashSet::new();
    for node in &order {
        let id = node_id(node);
        let reaches = targets.contains(&id)
            || matches!(&**node, Node::Operator(op) if op_inputs_lead(op, &leads));
        if reaches {
            leads.insert(id);
        }
    }

    let mut grads: HashMap<Key, LazyTensor> = HashMap::new();
    for (y, dy) in seeds {
        if y.dtype != dy.dtype || y.shape != dy.shape {
            return Err(GradError::SeedMismatch {
                dtype: y.dtype,
                shape: y.shape.to_vec(),
                seed_dtype: dy.dtype,
                seed_shape: dy.shape.to_vec(),
            });
        }
        accumulate(&mut grads, y, (*dy).clone(), "the seeds")?;
    }

    for node in order.iter().rev() {
        let Node::Operator(op) = &**node else {
            continue;
        };
        let id = node_id(node);
        if !leads.contains(&id) || targets.contains(&id) && !op_inputs_lead(op, &leads) {
            continue;
        }
        let outputs = LazyTensor::outputs_of(node, &op.dag);
        let output_grads: Vec<Option<LazyTensor>> = outputs
            .iter()
            .map(|o| grads.get(&key(o)).cloned())
            .collect();
        if output_grads.iter().all(Option::is_none) {
            continue;
        }
        let Some(Gradient { func: gradient, .. }) = op.gradient.get() else {
            // No gradient function: derive one from the operator's IR.
            let wanted: Vec<bool> = op
                .inputs
                .iter()
                .map(|i| leads.contains(&node_id(&i.node)))
                .collect();
            let input_grads = derived::gradients(op, &output_grads, &wanted)?;
            for (input, g) in op.inputs.iter().zip(input_grads) {
                if let Some(g) = g {
                    accumulate(&mut grads, input, g, &op.dag.name)?;
                }
            }
            continue;
        };
        let call = GradientCall {
            name: &op.dag.name,
            inputs: &op.inputs,
            outputs,
            output_grads,
        };
        // A gradient function that panics (say, asking for a tensor of the wrong dtype) is
        // reported as an error of this operator's gradient, not as a panic of the caller (and
        // the panic is not printed: the error carries its message).
        let input_grads = crate::quiet::catch_quietly(|| gradient(&call)).map_err(|panic| {
            GradError::BadGradient {
                operator: op.dag.name.clone(),
                message: format!("its gradient function panicked: {}", panic_message(&panic)),
            }
        })?;
        if input_grads.len() != op.inputs.len() {
            return Err(GradError::BadGradient {
                operator: op.dag.name.clone(),
                message: format!(
                    "it returned {} gradients for {} inputs",
                    input_grads.len(),
                    op.inputs.len()
                ),
            });
        }
        for (input, g) in op.inputs.iter().zip(input_grads) {
            let Some(g) = g else { continue };
            if g.dtype != input.dtype || g.shape != input.shape {
                return Err(GradError::BadGradient {
                    operator: op.dag.name.clone(),
                    message: format!(
                        "the gradient of a {}{:?} input is a {}{:?} tensor",
                        input.dtype, input.shape, g.dtype, g.shape
                    ),
                });
            }
            accumulate(&mut grads, input, g, &op.dag.name)?;
        }
    }

    let mut gradients = Gradients::default();
    for x in wrt {
        if let Some(g) = grads.get(&key(x)) {
            gradients.insert(x, g.clone());
        }
    }
    Ok(gradients)
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(no message)".into())
}

fn op_inputs_lead(op: &crate::lazy::OperatorNode, leads: &HashSet<usize>) -> bool {
    op.inputs.iter().any(|i| leads.contains(&node_id(&i.node)))
}

fn visit(node: &Arc<Node>, seen: &mut HashSet<usize>, order: &mut Vec<Arc<Node>>) {
    // Iterative post-order: deep graphs (long recurrences) must not overflow the stack.
    let mut stack: Vec<(Arc<Node>, bool)> = vec![(node.clone(), false)];
    while let Some((n, expanded)) = stack.pop() {
        let id = node_id(&n);
        if expanded {
            order.push(n);
            continue;
        }
        if !seen.insert(id) {
            continue;
        }
        stack.push((n.clone(), true));
        if let Node::Operator(op) = &*n {
            for input in op.inputs.iter().rev() {
                let child = node_id(&input.node);
                if !seen.contains(&child) {
                    stack.push((input.node.clone(), false));
                }
            }
        }
    }
}

/// Adds `g` to the gradient of `t`.
fn accumulate(
    grads: &mut HashMap<Key, LazyTensor>,
    t: &LazyTensor,
    g: LazyTensor,
    operator: &str,
) -> Result<(), GradError> {
    let sum = match grads.remove(&key(t)) {
        None => g,
        Some(prev) => {
            // Contributions that are all matrix products: one call summing them; all sums
            // over a broadcast operand's axes: one sum of their sum.
            use crate::lazy_ops::{gemm::merge_sum, gradients::merge_sum_to};
            let merged = match t.dtype {
                DType::F32 => {
                    merge_sum::<f32>(&prev, &g).or_else(|| merge_sum_to::<f32>(&prev, &g))
                }
                DType::F64 => {
                    merge_sum::<f64>(&prev, &g).or_else(|| merge_sum_to::<f64>(&prev, &g))
                }
                _ => None,
            };
            match (merged, t.dtype) {
                (Some(sum), _) => sum,
                (None, DType::F32) => {
                    (&Lazy::<f32>::from_untyped(prev) + &Lazy::<f32>::from_untyped(g)).inner
                }
                (None, DType::F64) => {
                    (&Lazy::<f64>::from_untyped(prev) + &Lazy::<f64>::from_untyped(g)).inner
                }
                (None, other) => return Err(GradError::NotFloat(other, operator.to_string())),
            }
        }
    };
    grads.insert(key(t), sum);
    Ok(())
}

//! The cache of backward graphs: [`super::backward`] on a forward graph seen before replays the
//! backward graph it built then onto the new forward nodes, without calling any gradient
//! function, and returns handles whose graph keys equal the first ones' (so that `evaluate`
//! finds their plan in its plan cache).
//!
//! # The key
//! The graph key ([`crate::lazy::graph_key`]) of the seeds' outputs, the seeds' gradients and
//! the tensors differentiated with respect to, in that order: every operator's key, the wiring,
//! the dtype and shape of every graph input (placeholders also by identity), and where each of
//! those tensors is. Then, for every operator of that graph, the identity of its gradient
//! function: none, or its Rust type and the key of what it captures. Host data is not part of
//! the key, exactly as for the plan cache: a backward graph depends on the forward graph's
//! structure, not on its data.
//!
//! A gradient function is identified when it captures nothing (a function item or a closure
//! without captures: its type says everything), or when it was attached with
//! [`super::set_gradient_keyed`], whose key describes what it captures. A graph with a gradient
//! function that cannot be identified, or a trace error, or one seen while the trace memo is
//! off (`OVL_TRACE_MEMO=0`: operator bodies may depend on global state), is differentiated
//! afresh at every call and never cached.
//!
//! # What is kept
//! The operators the backward pass recorded (their traced IR, key, wiring and identified
//! gradient function), each input named by its place in the forward graph's numbering or among
//! the recorded operators; host data the gradient functions created (zeros, constants) is kept
//! and shared by the replays. Forward nodes are never kept: a cached entry does not keep a
//! forward graph alive.
//!
//! # Policy
//! The cache is bounded like the plan cache ([`crate::lru`]): the `capacity` most recently used
//! entries (128, or `OVL_PLAN_CACHE_SIZE` when set at the first use), least recently used
//! evicted first, 0 turns it off. `ovl::set_plan_cache_capacity` sets both capacities and
//! `ovl::clear_plan_cache` (and so `ovl::clear_cache`) clears both.

use super::Gradients;
use crate::dtype::DType;
use crate::error::TraceError;
use crate::fast_hash::FastBuild;
use crate::hash::Digest;
use crate::ir;
use crate::lazy::{GradientSlot, LazyTensor, Node, OperatorNode};
use crate::lru::{CacheControl, SharedLru, DEFAULT_CAPACITY, PLAN_CACHE_SIZE_VAR};
use std::any::TypeId;
use std::collections::HashMap;
use std::sync::Arc;

/// What [`backward_cache_stats`] reports: counters since the process started (or the last
/// clearing) and the current size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BackwardCacheStats {
    /// Backward passes replayed from the cache (no gradient function ran).
    pub hits: u64,
    /// Backward passes built and kept.
    pub misses: u64,
    /// Backward passes built without the cache: a gradient function that cannot be identified,
    /// a trace error, or the trace memo turned off.
    pub bypassed: u64,
    /// Entries dropped to stay within the capacity.
    pub evictions: u64,
    /// Entries kept now.
    pub entries: usize,
    /// The most entries kept at once (0: the cache is off).
    pub capacity: usize,
}

/// The key of a backward pass: bytes compared exactly, and the Rust types of the gradient
/// functions in the order the bytes mention them.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    bytes: Vec<u8>,
    types: Vec<TypeId>,
}

/// Where a recorded tensor comes from.
enum Source {
    /// A graph input of the forward graph (its number in the walk).
    Input(u32),
    /// An operator of the forward graph (its number in the walk).
    Operator(u32),
    /// An operator the backward pass recorded (its index in [`Template::nodes`]).
    Recorded(u32),
    /// Host data (or a placeholder) that the gradient functions brought in: shared by replays.
    Constant(Arc<Node>),
}

struct TensorRef {
    source: Source,
    output: usize,
    dtype: DType,
    shape: Arc<[usize]>,
}

struct RecordedOperator {
    dag: Arc<ir::ExpressionDag>,
    key: Digest,
    inputs: Vec<TensorRef>,
    gradient: Option<crate::lazy::Gradient>,
}

/// A backward pass as recorded once.
struct Template {
    /// In an order where every operator comes after the ones it reads.
    nodes: Vec<RecordedOperator>,
    /// The gradient of each tensor differentiated with respect to (`None`: none flows).
    results: Vec<Option<TensorRef>>,
}

static CACHE: SharedLru<Key, Arc<Template>> =
    SharedLru::with_env("backward_graphs", DEFAULT_CAPACITY, PLAN_CACHE_SIZE_VAR);
/// The cache of backward graphs, for `ovl::cache_stats`, `ovl::clear_caches` and
/// `ovl::set_cache_capacity`.
pub fn cache() -> &'static dyn CacheControl {
    &CACHE
}

/// The counters and size of the cache of backward graphs.
///
/// ```
/// let s = ovl_core::autodiff::backward_cache_stats();
/// assert!(s.entries <= s.capacity);
/// ```
pub fn backward_cache_stats() -> BackwardCacheStats {
    let c = CACHE.counters();
    BackwardCacheStats {
        hits: c.hits,
        misses: c.misses,
        bypassed: c.bypassed,
        evictions: c.evictions,
        entries: c.entries,
        capacity: c.capacity,
    }
}

/// Empties the cache of backward graphs and resets its counters (`ovl::clear_plan_cache` calls
/// it).
pub fn clear_backward_cache() {
    CACHE.clear();
}

/// Sets how many backward graphs the cache keeps (least recently used evicted first; 0 turns
/// it off). `ovl::set_plan_cache_capacity` calls it with the plan cache's capacity.
pub fn set_backward_cache_capacity(capacity: usize) {
    CACHE.set_capacity(capacity);
}

/// What [`lookup`] found.
pub(super) enum Lookup {
    /// The gradients, replayed onto this call's forward graph.
    Hit(Gradients),
    /// Not cached: build the gradients, then give them to [`Miss::remember`].
    Miss(Miss),
    /// Not cacheable: build the gradients.
    Bypass,
}

/// A backward pass to record after it is built: its key and the forward graph's numbering.
pub(super) struct Miss {
    key: Key,
    /// Node address -> its place in the forward graph.
    known: HashMap<usize, Source, FastBuild>,
    /// Holds the forward nodes, so that the addresses in `known` stay theirs.
    _nodes: crate::lazy::Walked,
}

pub(super) fn lookup(seeds: &[(&LazyTensor, &LazyTensor)], wrt: &[&LazyTensor]) -> Lookup {
    if !crate::trace::memo::enabled() || CACHE.lock().capacity() == 0 {
        return Lookup::Bypass;
    }
    let Some((key, walked)) = key_of(seeds, wrt) else {
        CACHE.lock().note_bypass();
        return Lookup::Bypass;
    };
    let found = CACHE.get(&key);
    match found {
        Some(template) => Lookup::Hit(replay(&template, &walked, wrt)),
        None => {
            let mut known = HashMap::default();
            for (i, n) in walked.inputs.iter().enumerate() {
                known.insert(address(n), Source::Input(i as u32));
            }
            for (i, n) in walked.operators.iter().enumerate() {
                known.insert(address(n), Source::Operator(i as u32));
            }
            Lookup::Miss(Miss {
                key,
                known,
                _nodes: walked,
            })
        }
    }
}

impl Miss {
    /// Records the backward pass that produced `gradients` (for `wrt`, in order) and keeps it,
    /// unless it reaches something that cannot be replayed.
    pub(super) fn remember(self, wrt: &[&LazyTensor], gradients: &Gradients) {
        match self.record(wrt, gradients) {
            Some(template) => {
                CACHE.insert(self.key, Arc::new(template));
            }
            None => {
                CACHE.lock().note_bypass();
            }
        }
    }

    fn record(&self, wrt: &[&LazyTensor], gradients: &Gradients) -> Option<Template> {
        let mut recorder = Recorder {
            known: &self.known,
            recorded: HashMap::default(),
            nodes: Vec::new(),
        };
        let mut results = Vec::with_capacity(wrt.len());
        for x in wrt {
            results.push(match gradients.get(x) {
                None => None,
                Some(g) => Some(recorder.tensor(g)?),
            });
        }
        Some(Template {
            nodes: recorder.nodes,
            results,
        })
    }
}

fn address(node: &Arc<Node>) -> usize {
    Arc::as_ptr(node) as *const u8 as usize
}

/// The key of a backward pass and the forward graph walked for it, or `None` when the pass
/// cannot be cached (a trace error, a gradient function that cannot be identified).
fn key_of(
    seeds: &[(&LazyTensor, &LazyTensor)],
    wrt: &[&LazyTensor],
) -> Option<(Key, crate::lazy::Walked)> {
    let mut tensors: Vec<&LazyTensor> = Vec::with_capacity(2 * seeds.len() + wrt.len());
    tensors.extend(seeds.iter().map(|(y, _)| *y));
    tensors.extend(seeds.iter().map(|(_, dy)| *dy));
    tensors.extend(wrt.iter().copied());
    let walked: Result<_, TraceError> = crate::lazy::walk_nodes(&tensors);
    let walked = walked.ok()?;
    let mut bytes = Vec::with_capacity(walked.bytes.len() + 16 + 8 * walked.operators.len());
    bytes.extend_from_slice(b"ovl.autodiff.backward");
    bytes.extend_from_slice(&walked.bytes);
    bytes.extend_from_slice(&(seeds.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&(wrt.len() as u64).to_le_bytes());
    let mut types = Vec::new();
    for node in &walked.operators {
        let Node::Operator(op) = &**node else {
            unreachable!("the walk numbers operator nodes only as operators")
        };
        match op.gradient.get() {
            None => bytes.push(0),
            Some(g) => {
                let id = g.id.as_ref()?;
                bytes.push(1);
                bytes.extend_from_slice(&(id.key.len() as u64).to_le_bytes());
                bytes.extend_from_slice(&id.key);
                types.push(id.type_id);
            }
        }
    }
    Some((Key { bytes, types }, walked))
}

/// Turns the nodes a backward pass recorded into a [`Template`].
struct Recorder<'a> {
    known: &'a HashMap<usize, Source, FastBuild>,
    /// Node address -> index in `nodes`.
    recorded: HashMap<usize, u32, FastBuild>,
    nodes: Vec<RecordedOperator>,
}

impl Recorder<'_> {
    /// The reference to `t`, recording the operators behind it that are new; `None` when one
    /// of them cannot be replayed (a trace error, a gradient that cannot be identified).
    fn tensor(&mut self, t: &LazyTensor) -> Option<TensorRef> {
        self.record_from(&t.node)?;
        Some(self.reference(t))
    }

    fn reference(&self, t: &LazyTensor) -> TensorRef {
        let a = address(&t.node);
        let source = match self.known.get(&a) {
            Some(Source::Input(i)) => Source::Input(*i),
            Some(Source::Operator(i)) => Source::Operator(*i),
            Some(_) => unreachable!("the forward graph holds inputs and operators only"),
            None => match self.recorded.get(&a) {
                Some(&i) => Source::Recorded(i),
                None => Source::Constant(t.node.clone()),
            },
        };
        TensorRef {
            source,
            output: t.output,
            dtype: t.dtype,
            shape: t.shape.clone(),
        }
    }

    /// Records the new operators `root` depends on (and `root`), inputs first. Iterative:
    /// backward graphs of long recurrences are deep.
    fn record_from(&mut self, root: &Arc<Node>) -> Option<()> {
        let mut stack: Vec<(Arc<Node>, usize)> = vec![(root.clone(), 0)];
        while let Some((node, next)) = stack.pop() {
            let a = address(&node);
            if self.known.contains_key(&a) || self.recorded.contains_key(&a) {
                continue;
            }
            let Node::Operator(op) = &*node else {
                continue; // host data or a placeholder: a constant of the template
            };
            let pending = op.inputs[next..].iter().position(|i| {
                let b = address(&i.node);
                matches!(&*i.node, Node::Operator(_))
                    && !self.known.contains_key(&b)
                    && !self.recorded.contains_key(&b)
            });
            if let Some(p) = pending {
                let child = op.inputs[next + p].node.clone();
                stack.push((node.clone(), next + p + 1));
                stack.push((child, 0));
                continue;
            }
            if op.error.is_some() {
                return None;
            }
            let gradient = match op.gradient.get() {
                None => None,
                Some(g) if g.id.is_some() => Some(g.clone()),
                Some(_) => return None,
            };
            let inputs = op.inputs.iter().map(|i| self.reference(i)).collect();
            self.recorded.insert(a, self.nodes.len() as u32);
            self.nodes.push(RecordedOperator {
                dag: op.dag.clone(),
                key: op.key,
                inputs,
                gradient,
            });
        }
        Some(())
    }
}

/// The template's backward graph rebuilt on this call's forward nodes.
fn replay(t: &Template, walked: &crate::lazy::Walked, wrt: &[&LazyTensor]) -> Gradients {
    let mut made: Vec<Arc<Node>> = Vec::with_capacity(t.nodes.len());
    let resolve = |r: &TensorRef, made: &[Arc<Node>]| LazyTensor {
        node: match &r.source {
            Source::Input(i) => walked.inputs[*i as usize].clone(),
            Source::Operator(i) => walked.operators[*i as usize].clone(),
            Source::Recorded(i) => made[*i as usize].clone(),
            Source::Constant(n) => n.clone(),
        },
        output: r.output,
        dtype: r.dtype,
        shape: r.shape.clone(),
    };
    for n in &t.nodes {
        let inputs = n.inputs.iter().map(|r| resolve(r, &made)).collect();
        let mut op = OperatorNode::with_key(n.dag.clone(), n.key, inputs, None);
        if let Some(g) = &n.gradient {
            op.gradient = GradientSlot::with(g.clone());
        }
        made.push(Arc::new(Node::Operator(op)));
    }
    let mut gradients = Gradients::default();
    for (x, r) in wrt.iter().zip(&t.results) {
        if let Some(r) = r {
            gradients.insert(x, resolve(r, &made));
        }
    }
    gradients
}

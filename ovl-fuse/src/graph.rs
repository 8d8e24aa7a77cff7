//! The optimizer's working form of an operator DAG: nodes that can be merged and replaced,
//! with references that follow them, and the way back to an [`ir::OperatorDag`].

use crate::error::FuseError;
use ovl_ir::intervals::Intervals;
use ovl_ir::ir::{self, value_ref::Source};
use ovl_ir::typed::Kernel;
use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::rc::Rc;

/// What the passes read of one node's operator, made together (one decoding).
#[derive(Clone)]
struct Analysis {
    kernel: Rc<Kernel>,
    intervals: Rc<Intervals>,
}

/// Where a tensor comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Src {
    /// A graph input.
    Input(u32),
    /// Output `output` of node `node`.
    Op { node: usize, output: u32 },
}

/// One operator of the working graph (an original operator or a merge of several).
#[derive(Clone, Debug)]
pub(crate) struct Node {
    pub dag: ir::ExpressionDag,
    /// One per `dag.inputs`.
    pub inputs: Vec<Src>,
    /// The indices of the original operators it holds, sorted.
    pub members: Vec<usize>,
    /// The label used in reports, e.g. "`add` (#1)" or "{`add` #1, `mul` #3}".
    pub label: String,
    /// The original operator whose source location the node carries (the last consumer).
    pub source_of: usize,
    /// Work per element (operation units) that this node computes once more beside producers
    /// that compute it too: index substitution's copies of elements computed at most once
    /// more, their producer staying for another reader, summed (`cost::DUPLICATE_WORK` bounds
    /// it).
    pub duplicated: f64,
}

/// The graph being optimized.
pub(crate) struct Work {
    pub version: u32,
    pub graph_inputs: Vec<ir::TensorType>,
    /// Replaced nodes are `None`.
    pub nodes: Vec<Option<Node>>,
    pub outputs: Vec<Src>,
    /// The live consumers of each node, ascending, each once; kept up to date by every change
    /// of the wiring, so that a merge costs time in the size of its neighbourhood, not of the
    /// graph (a chain of thousands of operators fuses in time near-linear in its length).
    consumer_index: Vec<Vec<usize>>,
    /// The typed form of each node's operator and its interval analysis, made when first asked
    /// for (every pair a node takes part in asks again after each merge): forgotten when the
    /// node's operator changes ([`Work::node_mut`], [`Work::rebase`]) or the node is replaced.
    analyses: RefCell<HashMap<usize, Analysis>>,
    /// Whether each node asked about is a boundary ([`Work::is_boundary`]; recognizing a cut
    /// compares its whole operator), forgotten like `analyses`.
    boundaries: RefCell<HashMap<usize, bool>>,
    /// Each live node's place in [`Work::topological_order`], made when a path is first looked
    /// for after a change of the wiring: a path search never looks past its goal's place.
    places: RefCell<Option<Rc<Vec<usize>>>>,
    /// What changed since [`Work::take_changes`] last asked.
    changes: Changes,
    /// For each original operator, how many times the live nodes compute it (index
    /// substitution copies a producer that another reader keeps).
    computed: Vec<u32>,
    /// For each original operator, its predicted cost as it was before fusion
    /// (`memory::kernel_cost`; `None` where it cannot be priced), filled when the search starts:
    /// the baseline no chain of merges may exceed by more than `memory::SLACK_TOTAL`.
    pub unfused: Vec<Option<f64>>,
}

/// The nodes whose readers (the nodes reading them, or the graph outputs they give) changed,
/// and those whose operator changed: a verdict on a pair of nodes that depends on nothing else
/// stays true while neither is among them.
#[derive(Default)]
pub(crate) struct Changes {
    pub readers: HashSet<usize>,
    pub operator: HashSet<usize>,
}

fn src_of(v: &ir::ValueRef, what: &str) -> Result<Src, FuseError> {
    match &v.source {
        Some(Source::GraphInput(i)) => Ok(Src::Input(*i)),
        Some(Source::OpOutput(o)) => Ok(Src::Op {
            node: o.operator as usize,
            output: o.output,
        }),
        None => Err(FuseError::InvalidGraph(format!("{what} has no source"))),
    }
}

fn value_ref(s: Src, index_of: &[usize]) -> ir::ValueRef {
    ir::ValueRef {
        source: Some(match s {
            Src::Input(i) => Source::GraphInput(i),
            Src::Op { node, output } => Source::OpOutput(ir::OperatorOutput {
                operator: index_of[node] as u32,
                output,
            }),
        }),
    }
}

/// The label of a set of original operators.
pub(crate) fn label(names: &[(usize, &str)]) -> String {
    match names {
        [(i, n)] => format!("`{n}` (#{i})"),
        _ => {
            let mut parts: Vec<String> = names
                .iter()
                .take(4)
                .map(|(i, n)| format!("`{n}` #{i}"))
                .collect();
            if names.len() > 4 {
                parts.push(format!("... {} operators in all", names.len()));
            }
            format!("{{{}}}", parts.join(", "))
        }
    }
}

impl Work {
    /// The working form of a (validated) operator DAG.
    pub fn from_dag(dag: &ir::OperatorDag) -> Result<Work, FuseError> {
        let mut nodes = Vec::with_capacity(dag.operators.len());
        for (i, (op, wiring)) in dag.operators.iter().zip(&dag.operator_inputs).enumerate() {
            let inputs = wiring
                .inputs
                .iter()
                .enumerate()
                .map(|(k, v)| src_of(v, &format!("input {k} of operator {i}")))
                .collect::<Result<Vec<_>, _>>()?;
            nodes.push(Some(Node {
                label: label(&[(i, &op.name)]),
                dag: op.clone(),
                inputs,
                members: vec![i],
                source_of: i,
                duplicated: 0.0,
            }));
        }
        let outputs = dag
            .outputs
            .iter()
            .enumerate()
            .map(|(k, v)| src_of(v, &format!("graph output {k}")))
            .collect::<Result<Vec<_>, _>>()?;
        let mut work = Work {
            version: dag.version,
            graph_inputs: dag.inputs.clone(),
            nodes,
            outputs,
            consumer_index: Vec::new(),
            analyses: RefCell::new(HashMap::new()),
            boundaries: RefCell::new(HashMap::new()),
            places: RefCell::new(None),
            changes: Changes::default(),
            computed: vec![1; dag.operators.len()],
            unfused: Vec::new(),
        };
        work.consumer_index = vec![Vec::new(); work.nodes.len()];
        for c in 0..work.nodes.len() {
            work.link(c);
        }
        Ok(work)
    }

    /// Records live node `c` as a consumer of each of its producers.
    fn link(&mut self, c: usize) {
        *self.places.get_mut() = None;
        for p in self.producers(c) {
            self.changes.readers.insert(p);
            if let Err(at) = self.consumer_index[p].binary_search(&c) {
                self.consumer_index[p].insert(at, c);
            }
        }
    }

    /// Forgets live node `c` as a consumer of each of its producers (before it is replaced).
    fn unlink(&mut self, c: usize) {
        *self.places.get_mut() = None;
        for p in self.producers(c) {
            self.changes.readers.insert(p);
            if let Ok(at) = self.consumer_index[p].binary_search(&c) {
                self.consumer_index[p].remove(at);
            }
        }
    }

    /// What changed since the last call.
    pub fn take_changes(&mut self) -> Changes {
        std::mem::take(&mut self.changes)
    }

    /// Adds `node` to the graph (unlinked); returns its id.
    fn push(&mut self, node: Node) -> usize {
        for &m in &node.members {
            self.computed[m] += 1;
        }
        self.nodes.push(Some(node));
        self.consumer_index.push(Vec::new());
        self.nodes.len() - 1
    }

    /// Points every reference to an output of `old` (in its consumers and the graph outputs)
    /// at output `map[output]` of `new`; a reference whose entry is `None` is left (nothing may
    /// still read a dropped output).
    fn redirect(&mut self, old: usize, new: usize, map: &[Option<u32>]) {
        let fix = |s: &mut Src| {
            if let Src::Op { node, output } = *s {
                if node == old {
                    if let Some(Some(o)) = map.get(output as usize) {
                        *s = Src::Op {
                            node: new,
                            output: *o,
                        };
                    }
                }
            }
        };
        self.changes.readers.insert(new);
        for c in std::mem::take(&mut self.consumer_index[old]) {
            if let Some(n) = self.nodes[c].as_mut() {
                n.inputs.iter_mut().for_each(fix);
            }
            if let Err(at) = self.consumer_index[new].binary_search(&c) {
                self.consumer_index[new].insert(at, c);
            }
        }
        self.outputs.iter_mut().for_each(fix);
    }

    pub fn node(&self, id: usize) -> &Node {
        self.nodes[id].as_ref().expect("a live node")
    }

    /// Node `id` to change in place (its wiring stays: only its expression DAG may change, to
    /// one with the same inputs and outputs).
    pub fn node_mut(&mut self, id: usize) -> &mut Node {
        self.analyses.get_mut().remove(&id);
        self.boundaries.get_mut().remove(&id);
        self.changes.operator.insert(id);
        self.nodes[id].as_mut().expect("a live node")
    }

    /// Node `id`'s operator decoded and analysed, once.
    fn analysis(&self, id: usize) -> Analysis {
        if let Some(a) = self.analyses.borrow().get(&id) {
            return a.clone();
        }
        let kernel = Rc::new(Kernel::from_validated(&self.node(id).dag));
        let a = Analysis {
            intervals: Rc::new(Intervals::of(&kernel)),
            kernel,
        };
        self.analyses.borrow_mut().insert(id, a.clone());
        a
    }

    /// The typed form of node `id`'s operator (`ovl_ir::typed`), decoded once.
    pub fn kernel(&self, id: usize) -> Rc<Kernel> {
        self.analysis(id).kernel
    }

    /// The interval analysis of node `id`'s operator (`ovl_ir::intervals`), made once.
    pub fn intervals(&self, id: usize) -> Rc<Intervals> {
        self.analysis(id).intervals
    }

    /// A new original operator index, for an operator a pass makes that the user's graph did
    /// not hold (`crate::stack`); computed by no live node yet.
    pub fn new_original(&mut self) -> usize {
        self.computed.push(0);
        self.computed.len() - 1
    }

    /// Adds `node` to the graph, reading its inputs; returns its id.
    pub fn add(&mut self, node: Node) -> usize {
        let id = self.push(node);
        self.link(id);
        id
    }

    /// Marks node `id` replaced.
    fn retire(&mut self, id: usize) {
        self.analyses.get_mut().remove(&id);
        self.boundaries.get_mut().remove(&id);
        if let Some(node) = self.nodes[id].take() {
            for &m in &node.members {
                self.computed[m] -= 1;
            }
        }
    }

    /// The most times any original operator of node `id` is computed by the live nodes.
    pub fn most_computed(&self, id: usize) -> u32 {
        let members = &self.node(id).members;
        members.iter().map(|&m| self.computed[m]).max().unwrap_or(0)
    }

    /// The live node ids, in ascending order.
    pub fn live(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].is_some())
            .collect()
    }

    /// The live nodes that read an output of `id`, each once, ascending.
    pub fn consumers(&self, id: usize) -> Vec<usize> {
        self.consumer_index.get(id).cloned().unwrap_or_default()
    }

    /// For each node, the set of nodes reachable from it by a path of length >= 1, as bits.
    pub fn descendants(&self) -> Result<Vec<Vec<u64>>, FuseError> {
        let words = self.nodes.len().div_ceil(64);
        let mut desc = vec![vec![0u64; words]; self.nodes.len()];
        for &n in self.topological_order()?.iter().rev() {
            let mut bits = vec![0u64; words];
            for c in self.consumers(n) {
                bits[c / 64] |= 1 << (c % 64);
                for (b, d) in bits.iter_mut().zip(&desc[c]) {
                    *b |= d;
                }
            }
            desc[n] = bits;
        }
        Ok(desc)
    }

    /// The producers of `id`'s inputs, each once, in input order.
    pub fn producers(&self, id: usize) -> Vec<usize> {
        // (A node has few producers: a search of the list beats hashing, and this runs for
        // every node each time the topological order is made again.)
        let mut out: Vec<usize> = Vec::new();
        for s in &self.node(id).inputs {
            if let Src::Op { node, .. } = s {
                if !out.contains(node) {
                    out.push(*node);
                }
            }
        }
        out
    }

    /// Whether `src` is read by any live node other than `except`, or is a graph output.
    pub fn used_outside(&self, src: Src, except: usize) -> bool {
        let Src::Op { node, .. } = src else {
            return self.outputs.contains(&src)
                || self.nodes.iter().enumerate().any(|(n, node)| {
                    n != except && node.as_ref().is_some_and(|d| d.inputs.contains(&src))
                });
        };
        self.outputs.contains(&src)
            || self.consumer_index[node]
                .iter()
                .any(|&n| n != except && self.node(n).inputs.contains(&src))
    }

    /// A node reachable from `from` by a path of length >= 1 that avoids the direct edge to
    /// `to`, and from which `to` is reachable (so contracting `from` and `to` would make a
    /// cycle); `None` when there is none.
    pub fn other_path(&self, from: usize, to: usize) -> Option<usize> {
        self.consumers(from)
            .into_iter()
            .find(|&first| first != to && self.reaches(first, to))
    }

    /// Whether node `n` is a boundary of fusion, never merged with another node: a library
    /// call, or a cut read in place (`search::gate` says which, as the reason of a refusal).
    pub fn is_boundary(&self, n: usize) -> bool {
        if let Some(&known) = self.boundaries.borrow().get(&n) {
            return known;
        }
        let dag = &self.node(n).dag;
        let boundary =
            ovl_ir::library::is_library_call(dag) || ovl_ir::unstack::cut_offsets(dag).is_some();
        self.boundaries.borrow_mut().insert(n, boundary);
        boundary
    }

    /// Whether a boundary ([`Work::is_boundary`]) lies on a path from `from` to `to`: the two
    /// then never become one kernel (merging them would close a cycle through it).
    pub fn boundary_between(&self, from: usize, to: usize) -> bool {
        let places = self.places();
        let inside = |n: usize| {
            places
                .as_ref()
                .is_none_or(|at| at[from] <= at[n] && at[n] <= at[to])
        };
        // The nodes other than `from` that lead to `to`, then those of them `from` leads to.
        let mut leads = HashSet::new();
        let mut stack = self.producers(to);
        while let Some(n) = stack.pop() {
            if n != from && inside(n) && leads.insert(n) {
                stack.extend(self.producers(n));
            }
        }
        let mut seen = HashSet::new();
        let mut stack = self.consumers(from);
        while let Some(n) = stack.pop() {
            if leads.contains(&n) && seen.insert(n) {
                if self.is_boundary(n) {
                    return true;
                }
                stack.extend(self.consumers(n));
            }
        }
        false
    }

    /// Whether `to` is reachable from `from` (a path of length >= 0). Only nodes placed before
    /// `to` in a topological order can lead to it, so the search goes no further (without an
    /// order, which only a cycle prevents, it searches everything).
    pub fn reaches(&self, from: usize, to: usize) -> bool {
        let places = self.places();
        let may_lead = |n: usize| places.as_ref().is_none_or(|at| at[n] <= at[to]);
        if !may_lead(from) {
            return false;
        }
        let mut stack = vec![from];
        let mut seen = HashSet::new();
        while let Some(n) = stack.pop() {
            if n == to {
                return true;
            }
            if seen.insert(n) {
                stack.extend(
                    self.consumer_index[n]
                        .iter()
                        .copied()
                        .filter(|&c| may_lead(c)),
                );
            }
        }
        false
    }

    /// Each live node's place in the topological order (`None` if the graph has a cycle).
    fn places(&self) -> Option<Rc<Vec<usize>>> {
        if let Some(at) = self.places.borrow().as_ref() {
            return Some(Rc::clone(at));
        }
        let order = self.topological_order().ok()?;
        let mut at = vec![usize::MAX; self.nodes.len()];
        for (k, &n) in order.iter().enumerate() {
            at[n] = k;
        }
        let at = Rc::new(at);
        *self.places.borrow_mut() = Some(Rc::clone(&at));
        Some(at)
    }

    /// Replaces nodes `a` and `b` by `merged`; `map` gives, for each output of `a` and `b`,
    /// its index in `merged` (or `None` when it was dropped: nothing may still read it).
    pub fn replace(
        &mut self,
        a: usize,
        b: usize,
        merged: Node,
        map_a: &[Option<u32>],
        map_b: &[Option<u32>],
    ) -> usize {
        self.unlink(a);
        self.unlink(b);
        let id = self.push(merged);
        self.redirect(a, id, map_a);
        self.redirect(b, id, map_b);
        if let Some(n) = self.nodes[id].as_mut() {
            for s in &mut n.inputs {
                if let Src::Op { node, output } = *s {
                    let map = if node == a {
                        map_a
                    } else if node == b {
                        map_b
                    } else {
                        continue;
                    };
                    if let Some(Some(o)) = map.get(output as usize) {
                        *s = Src::Op {
                            node: id,
                            output: *o,
                        };
                    }
                }
            }
        }
        // `b` read `a` (or the reverse): the merged node does not read itself.
        for old in [a, b] {
            if let Ok(at) = self.consumer_index[id].binary_search(&old) {
                self.consumer_index[id].remove(at);
            }
        }
        self.retire(a);
        self.retire(b);
        self.link(id);
        id
    }

    /// Replaces node `old` by `node`, which has the same outputs (a consumer with a producer
    /// inlined); returns the new node's id.
    pub fn replace_one(&mut self, old: usize, node: Node) -> usize {
        let identity: Vec<Option<u32>> = (0..node.dag.outputs.len() as u32).map(Some).collect();
        self.unlink(old);
        let id = self.push(node);
        self.redirect(old, id, &identity);
        self.retire(old);
        self.link(id);
        id
    }

    /// Replaces node `old`, of one output, by output `output` of the live node `new`, which
    /// must not read `old` (its readers and the graph outputs it gave now read `new`).
    pub fn replace_by_output(&mut self, old: usize, new: usize, output: u32) {
        self.unlink(old);
        self.redirect(old, new, &[Some(output)]);
        self.retire(old);
    }

    /// Rewrites node `id` over node `to`'s workgroup when the two differ only by axes of
    /// extent 1 (`crate::rebase`); nothing it computes changes.
    pub fn rebase(&mut self, id: usize, to: usize) {
        let shape = self.node(to).dag.workgroup_shape.clone();
        if self.node(id).dag.workgroup_shape == shape {
            return;
        }
        let kernel = self.kernel(id);
        if let Some(dag) = crate::rebase::rebased(&self.node(id).dag, &kernel, &shape) {
            self.node_mut(id).dag = dag;
        }
    }

    /// Removes node `id` when nothing reads it and none of its outputs is requested; returns
    /// whether it was removed.
    pub fn remove_if_unused(&mut self, id: usize) -> bool {
        let used = self
            .outputs
            .iter()
            .any(|s| matches!(s, Src::Op { node, .. } if *node == id))
            || !self.consumers(id).is_empty();
        if !used {
            self.unlink(id);
            self.retire(id);
        }
        !used
    }

    /// A topological order of the live nodes; among ready nodes, the one holding the smallest
    /// original operator index comes first (deterministic, and the identity when nothing was
    /// merged).
    pub fn topological_order(&self) -> Result<Vec<usize>, FuseError> {
        let live = self.live();
        // Each node's producers, counted through the consumer index (which lists a consumer
        // once per producer): no list made per node, as this runs after every merge.
        let mut pending: Vec<usize> = vec![0; self.nodes.len()];
        for &n in &live {
            for &c in &self.consumer_index[n] {
                pending[c] += 1;
            }
        }
        let key = |n: usize| self.node(n).members[0];
        let mut ready: BTreeSet<(usize, usize)> = live
            .iter()
            .filter(|&&n| pending[n] == 0)
            .map(|&n| (key(n), n))
            .collect();
        let mut order = Vec::with_capacity(live.len());
        while let Some(first) = ready.pop_first() {
            let n = first.1;
            order.push(n);
            for &c in &self.consumer_index[n] {
                pending[c] -= 1;
                if pending[c] == 0 {
                    ready.insert((key(c), c));
                }
            }
        }
        if order.len() != live.len() {
            return Err(FuseError::Internal(
                "the merged operator graph has a cycle".into(),
            ));
        }
        Ok(order)
    }

    /// The operator DAG, in [`Work::topological_order`].
    pub fn to_dag(&self) -> Result<ir::OperatorDag, FuseError> {
        let order = self.topological_order()?;
        let mut index_of = vec![usize::MAX; self.nodes.len()];
        for (i, &n) in order.iter().enumerate() {
            index_of[n] = i;
        }
        Ok(ir::OperatorDag {
            symbols: Vec::new(),
            version: self.version,
            operators: order.iter().map(|&n| self.node(n).dag.clone()).collect(),
            inputs: self.graph_inputs.clone(),
            operator_inputs: order
                .iter()
                .map(|&n| ir::OperatorInputs {
                    inputs: self
                        .node(n)
                        .inputs
                        .iter()
                        .map(|&s| value_ref(s, &index_of))
                        .collect(),
                })
                .collect(),
            outputs: self
                .outputs
                .iter()
                .map(|&s| value_ref(s, &index_of))
                .collect(),
        })
    }

    /// "output 0 of `add` (#1)".
    pub fn describe(&self, src: Src) -> String {
        match src {
            Src::Input(i) => format!("graph input {i}"),
            Src::Op { node, output } => {
                format!("output {output} of {}", self.node(node).label)
            }
        }
    }
}

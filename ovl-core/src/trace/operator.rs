//! Tracing one operator call: run the user's body on symbolic values, collect the expression
//! DAG, and record a node of the lazy graph. `#[operator]` expands to a call of [`trace_operator`].

use super::memo::{self, Returned, TraceKey};
use super::state::{self, OperatorSite};
use super::tensor::{declare_input, Tensor, TensorKind};
use crate::error::TraceError;
use crate::host::Scalar;
use crate::ir;
use crate::lazy::{IntoLazy, Lazy, LazyTensor, Node, OperatorNode};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

/// Collects the inputs of the operator being traced.
pub struct Tracer {
    inputs: Vec<LazyTensor>,
}

impl Tracer {
    /// Declares the next tensor input of the operator.
    #[track_caller]
    pub fn input<T: Scalar>(&mut self, x: impl IntoLazy<T>) -> Tensor<T> {
        let lazy = x.into_lazy();
        let name = format!("input {}", self.inputs.len());
        self.add(lazy, name)
    }

    /// Declares the next tensor input of the operator, with the parameter's name for messages.
    #[track_caller]
    pub fn input_named<T: Scalar>(&mut self, name: &str, x: impl IntoLazy<T>) -> Tensor<T> {
        let lazy = x.into_lazy();
        let name = format!("input {} (`{name}`)", self.inputs.len());
        self.add(lazy, name)
    }

    /// Declares a list of tensor inputs.
    #[track_caller]
    pub fn input_list<T: Scalar>(&mut self, xs: Vec<Lazy<T>>) -> Vec<Tensor<T>> {
        xs.into_iter().map(|x| self.input(x)).collect()
    }

    fn add<T: Scalar>(&mut self, lazy: Lazy<T>, name: String) -> Tensor<T> {
        let shape = lazy.shape().to_vec();
        self.inputs.push(lazy.inner);
        state::with(|s| declare_input(s, shape, name))
    }
}

/// What an operator returns: one output tensor, a tuple, an array or a `Vec` of them.
#[diagnostic::on_unimplemented(
    message = "an operator must return its output tensor(s), not `{Self}`",
    note = "return a `Tensor<T>` made with `output(..)`/`output_like(..)`, a tuple or array of them, or a `Vec<Tensor<T>>`"
)]
pub trait Outputs {
    /// The lazy handles the caller gets back.
    type Lazy;
    /// Appends the (kind, index) of each returned tensor.
    fn visit(&self, out: &mut Vec<(TensorKind, u32, u32)>);
    /// Builds the handles, taking output positions from `next`.
    fn to_lazy(&self, node: &Arc<Node>, next: &mut usize) -> Self::Lazy;
    /// Describes the returned tensors (shapes, list lengths) for a memoized trace.
    fn describe(&self, out: &mut Vec<Returned>);
    /// Builds the handles of a memoized call from its description; `None` if it does not fit.
    fn rebuild(
        desc: &mut std::slice::Iter<'_, Returned>,
        node: &Arc<Node>,
        next: &mut usize,
    ) -> Option<Self::Lazy>;
}

impl<T: Scalar> Outputs for Tensor<T> {
    type Lazy = Lazy<T>;
    fn visit(&self, out: &mut Vec<(TensorKind, u32, u32)>) {
        out.push((self.kind(), self.index_in_operator(), self.trace_id()));
    }
    fn to_lazy(&self, node: &Arc<Node>, next: &mut usize) -> Lazy<T> {
        let output = *next;
        *next += 1;
        Lazy::from_untyped(LazyTensor {
            node: node.clone(),
            output,
            dtype: T::DTYPE,
            shape: self.shape().into(),
        })
    }
    fn describe(&self, out: &mut Vec<Returned>) {
        out.push(Returned::Tensor(self.shape().into()));
    }
    fn rebuild(
        desc: &mut std::slice::Iter<'_, Returned>,
        node: &Arc<Node>,
        next: &mut usize,
    ) -> Option<Lazy<T>> {
        let Some(Returned::Tensor(shape)) = desc.next() else {
            return None;
        };
        let output = *next;
        *next += 1;
        Some(Lazy::from_untyped(LazyTensor {
            node: node.clone(),
            output,
            dtype: T::DTYPE,
            shape: shape.clone(),
        }))
    }
}

impl<O: Outputs, const N: usize> Outputs for [O; N] {
    type Lazy = [O::Lazy; N];
    fn visit(&self, out: &mut Vec<(TensorKind, u32, u32)>) {
        self.iter().for_each(|o| o.visit(out));
    }
    fn to_lazy(&self, node: &Arc<Node>, next: &mut usize) -> Self::Lazy {
        std::array::from_fn(|i| self[i].to_lazy(node, next))
    }
    fn describe(&self, out: &mut Vec<Returned>) {
        self.iter().for_each(|o| o.describe(out));
    }
    fn rebuild(
        desc: &mut std::slice::Iter<'_, Returned>,
        node: &Arc<Node>,
        next: &mut usize,
    ) -> Option<Self::Lazy> {
        let items = (0..N)
            .map(|_| O::rebuild(desc, node, next))
            .collect::<Option<Vec<_>>>()?;
        items.try_into().ok()
    }
}

impl<O: Outputs> Outputs for Vec<O> {
    type Lazy = Vec<O::Lazy>;
    fn visit(&self, out: &mut Vec<(TensorKind, u32, u32)>) {
        self.iter().for_each(|o| o.visit(out));
    }
    fn to_lazy(&self, node: &Arc<Node>, next: &mut usize) -> Self::Lazy {
        self.iter().map(|o| o.to_lazy(node, next)).collect()
    }
    fn describe(&self, out: &mut Vec<Returned>) {
        out.push(Returned::List(self.len()));
        self.iter().for_each(|o| o.describe(out));
    }
    fn rebuild(
        desc: &mut std::slice::Iter<'_, Returned>,
        node: &Arc<Node>,
        next: &mut usize,
    ) -> Option<Self::Lazy> {
        let Some(&Returned::List(n)) = desc.next() else {
            return None;
        };
        (0..n).map(|_| O::rebuild(desc, node, next)).collect()
    }
}

macro_rules! tuple_outputs {
    ($($name:ident $idx:tt),+) => {
        impl<$($name: Outputs),+> Outputs for ($($name,)+) {
            type Lazy = ($($name::Lazy,)+);
            fn visit(&self, out: &mut Vec<(TensorKind, u32, u32)>) {
                $(self.$idx.visit(out);)+
            }
            fn to_lazy(&self, node: &Arc<Node>, next: &mut usize) -> Self::Lazy {
                ($(self.$idx.to_lazy(node, next),)+)
            }
            fn describe(&self, out: &mut Vec<Returned>) {
                $(self.$idx.describe(out);)+
            }
            fn rebuild(
                desc: &mut std::slice::Iter<'_, Returned>,
                node: &Arc<Node>,
                next: &mut usize,
            ) -> Option<Self::Lazy> {
                Some(($($name::rebuild(desc, node, next)?,)+))
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
tuple_outputs!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
tuple_outputs!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);
tuple_outputs!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8);
tuple_outputs!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9);
tuple_outputs!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10);
tuple_outputs!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11);

/// Traces one call of an operator and returns lazy handles on its outputs.
///
/// `body` declares the inputs through the [`Tracer`] and runs the (rewritten) operator body.
/// Errors do not surface here: they are kept in the returned handles and reported by `evaluate`.
pub fn trace_operator<R: Outputs, F: FnOnce(&mut Tracer) -> R>(
    site: OperatorSite,
    body: F,
) -> R::Lazy {
    let (returned, node, _) = trace(site, body);
    returned.to_lazy(&node, &mut 0)
}

/// [`trace_operator`] for an operator declared with `#[operator(gradient = ..)]`: the call gets
/// `gradient` attached, as [`crate::autodiff::set_gradient`] would. (Such calls are traced at
/// every call: the trace memo keys calls without a gradient.)
pub fn trace_operator_with_gradient<R, F, G>(site: OperatorSite, body: F, gradient: G) -> R::Lazy
where
    R: Outputs,
    F: FnOnce(&mut Tracer) -> R,
    G: Fn(&crate::lazy::GradientCall) -> Vec<Option<LazyTensor>> + Send + Sync + 'static,
{
    let (returned, node, _) = trace(site, body);
    if let Node::Operator(op) = &*node {
        let _ = op.gradient.set(crate::lazy::Gradient::new(gradient, None));
    }
    returned.to_lazy(&node, &mut 0)
}

/// [`trace_operator`] for a call whose inputs and trace-time arguments are described by `key`
/// (see [`super::memo`]): a call seen before reuses its trace without running `body`.
pub fn trace_operator_keyed<R: Outputs, F: FnOnce(&mut Tracer) -> R>(
    site: OperatorSite,
    key: TraceKey,
    body: F,
) -> R::Lazy {
    let Some(full) = memo::full_key::<R, F>(&site, &key) else {
        return trace_operator(site, body);
    };
    if let Some(m) = memo::lookup(&full) {
        if let Some(lazy) = replay::<R>(&m, key.inputs) {
            return lazy;
        }
        // A description that does not fit cannot come from this key; trace as usual.
        let (returned, node, _) = trace(site, body);
        return returned.to_lazy(&node, &mut 0);
    }
    let (returned, node, ok) = trace(site, body);
    if ok {
        if let Node::Operator(op) = &*node {
            let mut desc = Vec::new();
            returned.describe(&mut desc);
            memo::remember(
                full,
                memo::Memoized {
                    dag: op.dag.clone(),
                    key: op.key,
                    returned: desc,
                },
            );
        }
    }
    returned.to_lazy(&node, &mut 0)
}

/// Runs `body` and records the node; also says whether the trace is free of errors.
fn trace<R: Outputs, F: FnOnce(&mut Tracer) -> R>(
    site: OperatorSite,
    body: F,
) -> (R, Arc<Node>, bool) {
    let id = state::begin(site);
    let mut tracer = Tracer { inputs: Vec::new() };
    let result = catch_unwind(AssertUnwindSafe(|| body(&mut tracer)));
    let Some(mut st) = state::end(id) else {
        unreachable!("trace state stack corrupted while tracing `{}`", site.name)
    };
    let at_site = |message: String| TraceError {
        operator: site.name.to_string(),
        operator_file: site.file.to_string(),
        operator_line: site.line,
        file: site.file.to_string(),
        line: site.line,
        column: site.column,
        message,
    };
    let returned = match result {
        Ok(r) => r,
        // A panic in the user's own trace-time code: the state is cleaned up, pass it on.
        Err(panic) => std::panic::resume_unwind(panic),
    };

    let mut returned_tensors = Vec::new();
    returned.visit(&mut returned_tensors);
    if st.errors.is_empty() {
        check_outputs(&st, &returned_tensors)
            .map_err(|m| st.errors.push(at_site(m)))
            .ok();
    }
    if st.workgroup.is_none() && st.errors.is_empty() {
        st.errors.push(at_site(
            "the operator never calls `position_in(shape)`: every operator declares its \
             workgroup exactly once"
                .into(),
        ));
    }

    let dag = finish_dag(&mut st, &returned_tensors);
    let mut error = st.errors.first().cloned();
    if error.is_none() {
        if let Err(e) = crate::validate::validate(&dag) {
            error = Some(at_site(format!(
                "the traced operator is not valid IR ({e}); this is a bug in ovl, please report it"
            )));
        }
    }
    let ok = error.is_none();
    let node = Arc::new(Node::Operator(OperatorNode::new(
        Arc::new(dag),
        tracer.inputs,
        error.map(Arc::new),
    )));
    (returned, node, ok)
}

fn check_outputs(
    st: &state::TraceState,
    returned: &[(TensorKind, u32, u32)],
) -> Result<(), String> {
    let mut seen = vec![false; st.outputs.len()];
    for &(kind, index, trace) in returned {
        if trace != st.id {
            return Err("the operator returns a tensor of another operator's trace".into());
        }
        match kind {
            TensorKind::Output => {
                if std::mem::replace(&mut seen[index as usize], true) {
                    return Err(format!("output {index} is returned twice"));
                }
            }
            TensorKind::Input => {
                return Err(format!(
                    "the operator returns input {index}; return tensors made with \
                     `output(..)`/`output_like(..)` (copy the input into one if needed)"
                ))
            }
            TensorKind::Local => {
                return Err(format!(
                    "the operator returns local tensor {index}; locals are private to each \
                     worker: write the values to an `output(..)` and return that"
                ))
            }
        }
    }
    if let Some(missing) = seen.iter().position(|s| !s) {
        return Err(format!(
            "output {missing} is created but not returned; return every output tensor"
        ));
    }
    Ok(())
}

/// Builds the ExpressionDag, numbering outputs in the order they are returned.
fn finish_dag(
    st: &mut state::TraceState,
    returned: &[(TensorKind, u32, u32)],
) -> ir::ExpressionDag {
    let mut order: Vec<u32> = returned
        .iter()
        .filter(|(k, _, t)| *k == TensorKind::Output && *t == st.id)
        .map(|&(_, i, _)| i)
        .collect();
    order.dedup();
    let mut renumber: Vec<u32> = (0..st.outputs.len() as u32).collect();
    if order.len() == st.outputs.len() {
        for (new, &old) in order.iter().enumerate() {
            renumber[old as usize] = new as u32;
        }
    }
    let mut outputs = st.outputs.clone();
    for (old, &new) in renumber.iter().enumerate() {
        outputs[new as usize] = st.outputs[old].clone();
    }
    let mut exprs = std::mem::take(&mut st.exprs);
    for e in &mut exprs {
        if let Some(t) = &mut e.tensor {
            if t.kind == ir::TensorKind::Output as i32 {
                if let Some(&n) = renumber.get(t.index as usize) {
                    t.index = n;
                }
            }
        }
    }
    ir::ExpressionDag {
        symbolic_workgroup: Vec::new(),
        symbol_count: 0,
        version: crate::IR_VERSION,
        name: st.site.name.to_string(),
        expressions: exprs,
        workgroup_shape: st.workgroup.clone().unwrap_or_default(),
        inputs: st.inputs.clone(),
        outputs,
        locals: st.locals.clone(),
        source: Some(ir::SourceLocation {
            file: st.site.file.to_string(),
            line: st.site.line,
            column: st.site.column,
        }),
        gradient: None,
        library_call: None,
    }
}

/// The handles of a memoized call: a node of the memoized IR on this call's inputs.
fn replay<R: Outputs>(memo: &memo::Memoized, inputs: Vec<LazyTensor>) -> Option<R::Lazy> {
    let node = Arc::new(crate::lazy::Node::Operator(
        crate::lazy::OperatorNode::with_key(memo.dag.clone(), memo.key, inputs, None),
    ));
    let mut returned = memo.returned.iter();
    let lazy = R::rebuild(&mut returned, &node, &mut 0)?;
    returned.next().is_none().then_some(lazy)
}

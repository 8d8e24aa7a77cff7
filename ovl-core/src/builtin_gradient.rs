//! Built-in gradients of the arithmetic calls on handles (`lazy_ops`): attached to the call's
//! node, where [`crate::autodiff::backward`] finds them; a gradient the user attaches replaces
//! one. (Its own module so that `lazy_ops` registers gradients without depending on `autodiff`,
//! which builds gradient graphs with `lazy_ops`.)

use crate::lazy::{Gradient, GradientCall, Lazy, LazyTensor, Node};
use crate::trace::memo::{TraceArg, TraceKey};

/// Sets the built-in gradient of an arithmetic call on handles (`lazy_ops`), keyed like
/// [`crate::autodiff::set_gradient_keyed`]; a gradient the user attaches replaces it.
pub(crate) fn set_builtin_gradient_keyed<T, K: TraceArg + ?Sized>(
    output: &Lazy<T>,
    key: &K,
    gradient: impl Fn(&GradientCall) -> Vec<Option<LazyTensor>> + Send + Sync + 'static,
) {
    let mut k = TraceKey::new();
    key.write_key(&mut k);
    if let Node::Operator(op) = &*output.inner.node {
        op.gradient
            .set_builtin(Gradient::new(gradient, Some(k.into_bytes())));
    }
}

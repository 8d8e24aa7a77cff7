//! What `#[operator(gradient = grad_op)]` expands to at run time: the typed pieces of a
//! [`GradientCall`] handed to the user's gradient function, and the conversion of what it
//! returns into one gradient per input.
//!
//! The gradient function is called as `grad_op(inputs.., output_grads.., constants..)`: the
//! operator's tensor parameters in order (a `Tensor<E>` as a `Lazy<E>`, a `Vec<Tensor<E>>` as a
//! `Vec<Lazy<E>>`), then the gradient of each output (shaped like what the caller gets back), then
//! the operator's other (constant) parameters in order. It returns one gradient per tensor
//! parameter (a tuple when there are several): a `Lazy<E>` of the input's dtype, an
//! `Option<Lazy<E>>` (`None`: no gradient flows to that input), or a `Vec` of either for a list.
//! Since the call is ordinary typed Rust written by the macro, a gradient function of the wrong
//! arity or types is a compile error.

use crate::host::Scalar;
use crate::lazy::{GradientCall, Lazy, LazyTensor};

/// Input `*next` of the call, typed as the operator declares it.
pub fn grad_input<E: Scalar>(call: &GradientCall, next: &mut usize) -> Lazy<E> {
    let x = call.input::<E>(*next);
    *next += 1;
    x
}

/// The `len` inputs of a `Vec<Tensor<E>>` parameter, starting at `*next`.
pub fn grad_input_list<E: Scalar>(
    call: &GradientCall,
    next: &mut usize,
    len: usize,
) -> Vec<Lazy<E>> {
    (0..len).map(|_| grad_input(call, next)).collect()
}

/// The gradients of one returned value (`Lazy<E>`, an array or a `Vec` of them), taken from
/// the call's output gradients starting at `*next`.
pub trait OutputGrads: Sized {
    /// Builds the value; zeros stand for outputs that do not reach the seeds.
    fn from_call(call: &GradientCall, next: &mut usize) -> Self;
}

impl<E: Scalar> OutputGrads for Lazy<E> {
    fn from_call(call: &GradientCall, next: &mut usize) -> Self {
        let g = call.output_grad::<E>(*next);
        *next += 1;
        g
    }
}

impl<O: OutputGrads, const N: usize> OutputGrads for [O; N] {
    fn from_call(call: &GradientCall, next: &mut usize) -> Self {
        std::array::from_fn(|_| O::from_call(call, next))
    }
}

/// A `Vec` of outputs takes every remaining output of the call (so it must be returned last).
impl<E: Scalar> OutputGrads for Vec<Lazy<E>> {
    fn from_call(call: &GradientCall, next: &mut usize) -> Self {
        (*next..call.outputs.len())
            .map(|_| <Lazy<E>>::from_call(call, next))
            .collect()
    }
}

/// What a gradient function may return for a `Tensor<E>` input.
#[diagnostic::on_unimplemented(
    message = "the gradient for a `Tensor<{E}>` input must be a `Lazy<{E}>` or an `Option<Lazy<{E}>>`, not `{Self}`",
    label = "the gradient function returns this for an input of dtype `{E}`",
    note = "`#[operator(gradient = g)]` calls `g(inputs.., output_grads.., constants..)` and expects one gradient per tensor parameter, in order (a tuple when there are several)"
)]
pub trait InputGradient<E: Scalar> {
    /// The untyped gradient (`None`: no gradient flows).
    fn into_input_gradient(self) -> Option<LazyTensor>;
}

impl<E: Scalar> InputGradient<E> for Lazy<E> {
    fn into_input_gradient(self) -> Option<LazyTensor> {
        Some(self.into_untyped())
    }
}

impl<E: Scalar> InputGradient<E> for Option<Lazy<E>> {
    fn into_input_gradient(self) -> Option<LazyTensor> {
        self.map(Lazy::into_untyped)
    }
}

/// What a gradient function may return for a `Vec<Tensor<E>>` input.
#[diagnostic::on_unimplemented(
    message = "the gradient for a `Vec<Tensor<{E}>>` input must be a `Vec<Lazy<{E}>>` or a `Vec<Option<Lazy<{E}>>>`, not `{Self}`",
    label = "the gradient function returns this for a list input of dtype `{E}`",
    note = "`#[operator(gradient = g)]` calls `g(inputs.., output_grads.., constants..)` and expects one gradient per tensor parameter, in order (a tuple when there are several)"
)]
pub trait InputGradients<E: Scalar> {
    /// The untyped gradients, one per tensor of the list.
    fn into_input_gradients(self) -> Vec<Option<LazyTensor>>;
}

impl<E: Scalar, G: InputGradient<E>> InputGradients<E> for Vec<G> {
    fn into_input_gradients(self) -> Vec<Option<LazyTensor>> {
        self.into_iter().map(G::into_input_gradient).collect()
    }
}

/// Typed identity: makes the compiler check a gradient against the input it belongs to.
pub fn input_gradient<E: Scalar, G: InputGradient<E>>(g: G) -> Option<LazyTensor> {
    g.into_input_gradient()
}

/// Typed identity for a list input.
pub fn input_gradients<E: Scalar, G: InputGradients<E>>(g: G) -> Vec<Option<LazyTensor>> {
    g.into_input_gradients()
}

//! Shape functions: `broadcast_to`, `transpose`, `expand_dims`, `squeeze`, `reshape`, `split`,
//! `concat`. Each is one operator with one worker per element of its result (per element of a
//! piece for `split`/`concat`), reading its input at a computed index, so it fuses like an
//! elementwise operator; each gradient is the inverse shape function.

use crate::broadcast_shapes;
use crate::{index, kernels, reduce_to, reductions, some, with_grad, with_grad_keyed};
use ovl::prelude::Num;
use ovl::{IntoLazy, Lazy, Scalar};
use std::panic::Location;

/// `x` broadcast to `shape` with numpy's rule (leading axes added, size-1 axes repeated): one
/// elementwise operator over `shape`. A `shape` that `x` does not broadcast to is an error of
/// `evaluate` naming the caller's line. Gradient: the sum over the broadcast axes.
#[track_caller]
pub fn broadcast_to<T: Num>(x: impl IntoLazy<T>, shape: &[usize]) -> Lazy<T> {
    let x = x.into_lazy();
    if broadcast_shapes(x.shape(), shape).as_deref() != Some(shape) {
        let message = format!(
            "a tensor of shape {:?} does not broadcast to {shape:?}: each axis must be equal or \
             1 in the tensor, counted from the last",
            x.shape()
        );
        return reductions::bad_call(x, "broadcast_to", Location::caller(), message, shape);
    }
    with_grad(kernels::broadcast_to(x, shape.to_vec()), |c| {
        let x = c.input::<T>(0);
        vec![some(reduce_to(c.output_grad::<T>(0), x.shape()))]
    })
}

/// Axes permuted: output axis `i` is input axis `perm[i]`. Gradient: the inverse permutation.
pub fn transpose<T: Scalar>(x: impl IntoLazy<T>, perm: &[usize]) -> Lazy<T> {
    let perm = perm.to_vec();
    let forward = perm.clone();
    let key = perm.clone();
    with_grad_keyed(kernels::transpose(x.into_lazy(), forward), &key, move |c| {
        let mut inverse = vec![0; perm.len()];
        for (i, &p) in perm.iter().enumerate() {
            if let Some(slot) = inverse.get_mut(p) {
                *slot = i;
            }
        }
        vec![some(kernels::transpose(c.output_grad::<T>(0), inverse))]
    })
}

/// `x` with a new axis of size 1 at `axis` (`0..=rank`): `[2, 3]` with a new axis 1 is
/// `[2, 1, 3]`. Any dtype. One elementwise operator over the result. An axis above the rank is an
/// error of `evaluate` naming the caller's line. Gradient: the output gradient squeezed back.
#[track_caller]
pub fn expand_dims<T: Scalar>(x: impl IntoLazy<T>, axis: usize) -> Lazy<T> {
    let x = x.into_lazy();
    let rank = x.shape().len();
    if axis > rank {
        let message = format!(
            "axis {axis} is out of range for a new axis of a tensor of shape {:?}: pass an axis \
             in 0..={rank}",
            x.shape()
        );
        let shape = x.shape().to_vec();
        return reductions::bad_call(x, "expand_dims", Location::caller(), message, &shape);
    }
    with_grad_keyed(kernels::expand(x, axis, 1), &axis, move |c| {
        vec![some(kernels::squeeze(c.output_grad::<T>(0), axis))]
    })
}

/// `x` without its axis `axis`, which must have size 1: `[2, 1, 3]` squeezed at 1 is `[2, 3]`.
/// Any dtype. One elementwise operator over the result. An axis out of range or of another
/// size is an error of `evaluate` naming the caller's line. Gradient: the output gradient with
/// the axis put back.
#[track_caller]
pub fn squeeze<T: Scalar>(x: impl IntoLazy<T>, axis: usize) -> Lazy<T> {
    let x = x.into_lazy();
    let shape = x.shape().to_vec();
    let problem = match shape.get(axis) {
        None => Some(format!(
            "axis {axis} is out of range for a tensor of shape {shape:?} (rank {}): pass an \
             axis in 0..{}",
            shape.len(),
            shape.len()
        )),
        Some(&d) if d != 1 => Some(format!(
            "axis {axis} of a tensor of shape {shape:?} has size {d}, not 1: only an axis of \
             size 1 can be squeezed (`reshape` changes the shape in general)"
        )),
        Some(_) => None,
    };
    if let Some(message) = problem {
        return reductions::bad_call(x, "squeeze", Location::caller(), message, &shape);
    }
    with_grad_keyed(kernels::squeeze(x, axis), &axis, move |c| {
        vec![some(kernels::expand(c.output_grad::<T>(0), axis, 1))]
    })
}

/// The elements of `x` in row-major order, in a tensor of shape `shape` (numpy's `reshape` of a
/// contiguous array): `[2, 3]` reshaped to `[3, 2]` or `[6]`. Any dtype; 0-d (`[]`) and empty
/// shapes work. One elementwise operator over the result, which reads `x` at the same
/// flattened position (axes that lead or trail both shapes unchanged are read directly). A
/// shape with another number of elements is an error of `evaluate` naming both shapes and the
/// caller's line. Gradient: the output gradient reshaped back.
///
/// ```
/// let x = ndarray::array![[1, 2, 3], [4, 5, 6]];
/// let y = ovl::evaluate(&ovl_stdlib::reshape(&x, &[3, 2])).unwrap();
/// assert_eq!(y, ndarray::array![[1, 2], [3, 4], [5, 6]].into_dyn());
/// ```
#[track_caller]
pub fn reshape<T: Scalar>(x: impl IntoLazy<T>, shape: &[usize]) -> Lazy<T> {
    let x = x.into_lazy();
    let (from, to) = (index::element_count(x.shape()), index::element_count(shape));
    if from != to || to.is_none() {
        let count = |n: Option<usize>| n.map_or("too many".to_string(), |n| n.to_string());
        let message = format!(
            "a tensor of shape {:?} ({} elements) cannot be reshaped to {shape:?} ({} \
             elements): the new shape must hold the same number of elements",
            x.shape(),
            count(from),
            count(to)
        );
        return reductions::bad_call(x, "reshape", Location::caller(), message, shape);
    }
    with_grad(kernels::reshape(x, shape.to_vec()), |c| {
        let x = c.input::<T>(0);
        let back = x.shape().to_vec();
        vec![some(kernels::reshape(c.output_grad::<T>(0), back))]
    })
}

/// `x` cut into `parts` equal pieces along `axis` (the axis length must divide evenly).
/// Gradient: the pieces' gradients concatenated (zeros for pieces that get none).
pub fn split<T: Scalar>(x: impl IntoLazy<T>, axis: usize, parts: usize) -> Vec<Lazy<T>> {
    let pieces = kernels::split(x.into_lazy(), axis, parts);
    if let Some(first) = pieces.first() {
        ovl::set_gradient_keyed(first, &axis, move |c| {
            let grads: Vec<Lazy<T>> = (0..c.outputs.len())
                .map(|i| c.output_grad::<T>(i))
                .collect();
            vec![some(concat(&grads, axis))]
        });
    }
    pieces
}

/// Equal-shaped tensors joined along `axis`. Gradient: the output gradient split back.
pub fn concat<T: Scalar>(xs: &[Lazy<T>], axis: usize) -> Lazy<T> {
    let n = xs.len();
    with_grad_keyed(kernels::concat(xs.to_vec(), axis), &(n, axis), move |c| {
        split(c.output_grad::<T>(0), axis, n)
            .into_iter()
            .map(some)
            .collect()
    })
}

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

mod args;
mod ops;
mod rewrite;

pub use args::{Batched, Shared, VmapArgs, VmapInput, VmapOutputs};
pub use rewrite::cache;

use crate::batch::BatchError;
use crate::error::TraceError;
use crate::lazy::LazyTensor;
use rewrite::{Batcher, Mapped};
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
                ops::broadcast_op(&t, batch)
            }
        })
        .collect::<Result<_, VmapError>>()?;
    Ok(outputs.with_tensors(&mut batched.into_iter()))
}

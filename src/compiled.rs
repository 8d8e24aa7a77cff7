//! Record once, run many times: a graph on placeholders, fused and compiled by [`compile`], then
//! run with new data for its placeholders on every call. A training loop that records its step
//! once pays tracing, fusion and the cache lookup once instead of at every step.
//!
//! ```
//! use ovl::prelude::*;
//!
//! #[operator]
//! fn axpy(a: Tensor<f32>, x: Tensor<f32>, y: Tensor<f32>) -> Tensor<f32> {
//!     let i = position_in(x.shape())[0];
//!     let out = output_like(&x);
//!     out[[i]] = a[[0]] * x[[i]] + y[[i]];
//!     out
//! }
//!
//! let x = ovl::placeholder::<f32>("x", &[3]);
//! let y = ovl::placeholder::<f32>("y", &[3]);
//! let a = Lazy::from(ndarray::array![2.0f32]); // host data is baked in
//! let step = ovl::compile((&x, &y), &axpy(&a, &x, &y), &Options::interpreter()).unwrap();
//!
//! let mut out = vec![ndarray::ArrayD::<f32>::zeros(ndarray::IxDyn(&[3]))];
//! for k in 0..3 {
//!     let xv = Lazy::from(ndarray::array![1.0f32, 2.0, 3.0]);
//!     let yv = Lazy::from(ndarray::Array1::from_elem(3, k as f32));
//!     step.run_into((&xv, &yv), &mut out).unwrap();
//!     assert_eq!(out[0], ndarray::array![2.0 + k as f32, 4.0 + k as f32, 6.0 + k as f32].into_dyn());
//! }
//! ```

use crate::evaluate::{run_into_arrays, Evaluate};
use crate::executor::{self, Prepared};
use crate::export::feed_slots;
use crate::options::Options;
use crate::Error;
use ndarray::ArrayD;
use ovl_core::lazy::Node;
use ovl_core::{DType, HostTensor, LazyTensor, Scalar};

/// A graph fused and compiled once by [`compile`]; [`run_into`](Compiled::run_into) runs it
/// with new data for its placeholders.
pub struct Compiled {
    prepared: Prepared,
    feeds: Vec<Feed>,
    options: Options,
}

/// One placeholder of a [`Compiled`] graph.
struct Feed {
    name: String,
    dtype: DType,
    shape: Vec<usize>,
    /// The graph input it supplies; `None` when the outputs do not read it.
    graph_input: Option<usize>,
}

/// Fuses and compiles (or finds in the operator cache) the graph behind `outputs`, whose
/// placeholders are `inputs` (made with [`crate::placeholder`], in the order
/// [`Compiled::run_into`] takes their data). Host data in the graph is kept as it is.
///
/// Errors: an input that is not a placeholder or is listed twice, a placeholder the outputs
/// read that is not among the inputs, and whatever [`crate::evaluate`] reports while tracing,
/// fusing or compiling.
pub fn compile<I: Evaluate, O: Evaluate>(
    inputs: I,
    outputs: O,
    options: &Options,
) -> Result<Compiled, Error> {
    let inputs: Vec<LazyTensor> = inputs.tensors().into_iter().cloned().collect();
    let outputs = outputs.tensors();
    if outputs.is_empty() {
        return Err(Error::Compiled("there is no output to compute".into()));
    }
    let graph = ovl_core::lazy::build_graph(&outputs)?;
    let graph = executor::fuse(graph, options)?;
    let slots = feed_slots(&inputs, &graph).map_err(Error::Compiled)?;
    let prepared = executor::prepare(graph, options)?;
    let feeds = inputs
        .iter()
        .zip(slots)
        .map(|(t, graph_input)| Feed {
            name: t
                .placeholder_node()
                .map(|p| p.name.clone())
                .unwrap_or_default(),
            dtype: t.dtype,
            shape: t.shape.to_vec(),
            graph_input,
        })
        .collect();
    Ok(Compiled {
        prepared,
        feeds,
        options: options.clone(),
    })
}

impl Compiled {
    /// Runs the graph with `feeds` (host data, one per placeholder, in the order given to
    /// [`compile`], for example `(&Lazy::from(array), ..)`), writing output `k` into `dests[k]`
    /// (of the output's dtype and shape, in row-major order; moved in and out, not copied).
    ///
    /// A feed of the wrong dtype or shape, or that is not host data, is an error that names it;
    /// on any error the arrays keep their shapes, with unspecified contents.
    pub fn run_into<T: Scalar>(
        &self,
        feeds: impl Evaluate,
        dests: &mut [ArrayD<T>],
    ) -> Result<(), Error> {
        let given = feeds.tensors();
        if given.len() != self.feeds.len() {
            return Err(Error::Compiled(format!(
                "{} tensors given for {} placeholders",
                given.len(),
                self.feeds.len()
            )));
        }
        let outputs = self.prepared.plan().outputs().len();
        if dests.len() != outputs {
            return Err(Error::OutputMismatch(format!(
                "{outputs} outputs but {} arrays to write them into",
                dests.len()
            )));
        }
        let mut fed: Vec<Option<&HostTensor>> = vec![None; self.prepared.inputs.len()];
        for (k, (feed, t)) in self.feeds.iter().zip(given).enumerate() {
            let data = match &*t.node {
                Node::Host(h) => &**h,
                _ => {
                    return Err(Error::Compiled(format!(
                        "the data for placeholder {k} (`{}`) is not host data; pass \
                         `Lazy::from(array)` (evaluate a computed value first)",
                        feed.name
                    )))
                }
            };
            if data.dtype() != feed.dtype || data.shape != feed.shape {
                return Err(Error::Compiled(format!(
                    "the data for placeholder {k} (`{}`) is {}{:?}, the placeholder is {}{:?}",
                    feed.name,
                    data.dtype(),
                    data.shape,
                    feed.dtype,
                    feed.shape
                )));
            }
            if let Some(i) = feed.graph_input {
                fed[i] = Some(data);
            }
        }
        run_into_arrays(&self.prepared, &fed, &self.options, dests)
    }

    /// How many kernels one run launches (after fusion).
    pub fn kernel_count(&self) -> usize {
        self.prepared.plan().dag().operators.len()
    }
}

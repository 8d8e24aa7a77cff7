//! The operator merger as the user sees it: [`fusion`] shows what `evaluate` will run.

use crate::{Error, Evaluate};
use ovl_fuse::{Fusion, OptLevel};

/// Builds the operator DAG behind `outputs`, fuses it at `opt_level` exactly as
/// [`evaluate`](crate::evaluate) would on the CPU (the default target; row buffers within
/// [`ovl_fuse::RowBudget::CPU`]), and returns the graph before and after with the
/// [`FusionReport`](crate::FusionReport): every merge, and every producer -> consumer edge left
/// unmerged with its reason. Nothing is compiled or run.
///
/// ```
/// use ovl::prelude::*;
///
/// #[operator]
/// fn double(x: Tensor<f32>) -> Tensor<f32> {
///     let i = position_in(x.shape())[0];
///     let out = output_like(&x);
///     out[[i]] = x[[i]] * 2.0;
///     out
/// }
///
/// let x = ndarray::array![1.0f32, 2.0, 3.0];
/// let y = double(double(&x));
/// let f = ovl::fusion(&y, 3).unwrap();
/// assert_eq!((f.report.kernels_before, f.report.kernels_after), (2, 1));
/// println!("{}", f.report);        // merged `double` (#0) into `double` (#1) through ...
/// assert!(f.to_dot().contains("digraph")); // before and after, for Graphviz
/// ```
pub fn fusion<O: Evaluate>(outputs: O, opt_level: impl Into<OptLevel>) -> Result<Fusion, Error> {
    let options = crate::Options {
        opt_level: opt_level.into(),
        ..crate::Options::default()
    };
    fusion_with(outputs, &options)
}

/// [`fusion`] as [`evaluate_with`](crate::evaluate_with) would fuse under `options`: its
/// `opt_level`, and row buffers within the budget of its target (a GPU's is smaller than the
/// CPU's, so a kernel for CUDA may keep fewer rows).
///
/// ```
/// # use ovl::prelude::*;
/// # #[operator]
/// # fn double(x: Tensor<f32>) -> Tensor<f32> {
/// #     let i = position_in(x.shape())[0];
/// #     let out = output_like(&x);
/// #     out[[i]] = x[[i]] * 2.0;
/// #     out
/// # }
/// let y = double(double(&ndarray::array![1.0f32, 2.0]));
/// let f = ovl::fusion_with(&y, &Options::cuda_validate()).unwrap();
/// assert_eq!(f.report.kernels_after, 1);
/// ```
pub fn fusion_with<O: Evaluate>(outputs: O, options: &crate::Options) -> Result<Fusion, Error> {
    let graph = ovl_core::lazy::build_graph(&outputs.tensors())?;
    let reuse = ovl_fuse::RowReuse::Apply(options.row_budget());
    Ok(ovl_fuse::fuse_with(&graph.dag, options.opt_level, reuse)?)
}

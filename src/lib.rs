//! # ovl: tensor operators in Rust, fused automatically, run on CPU and GPU
//!
//! Write an operator as a plain Rust function under [`#[operator]`](operator), its body written
//! for one worker of a parallel-for. Calling it records a lazy graph node; [`evaluate`] traces
//! nothing more, compiles (or finds in the operator cache) and runs it.
//!
//! ```
//! use ovl::prelude::*;
//!
//! /// Running sum along each row, one worker per row.
//! #[operator]
//! fn cumsum_rows(x: Tensor<f32>) -> Tensor<f32> {
//!     let [rows, cols] = x.dims::<2>();
//!     let row = position_in([rows])[0];
//!     let out = output_like(&x);
//!     let mut acc = variable(0.0f32);
//!     for j in 0..cols {
//!         acc += x[[row, j]];
//!         out[[row, j]] = acc;
//!     }
//!     out
//! }
//!
//! let x = ndarray::array![[1.0f32, 2.0, 3.0], [4.0, 5.0, 6.0]];
//! let y = ovl::evaluate_with(&cumsum_rows(&x), &Options::interpreter()).unwrap();
//! assert_eq!(y, ndarray::array![[1.0f32, 3.0, 6.0], [4.0, 9.0, 15.0]].into_dyn());
//! ```
//!
//! # Gradients
//!
//! Attach a gradient to an operator call with [`set_gradient`] (or to every call of an operator
//! with `#[operator(gradient = grad_fn)]`, see [`macro@operator`]), then build the backward graph
//! lazily with [`backward`]; it is fused and compiled like any other graph. A backward pass over
//! a forward graph seen before (same structure, shapes, seeds and gradient functions; any data)
//! is replayed from a cache bounded like the plan cache ([`Cache::BackwardGraphs`]); a gradient
//! closure that captures values takes part only when attached with [`set_gradient_keyed`].
//! An operator without a gradient function gets one derived from its IR (reverse mode, see
//! docs/gradients.md); what cannot be derived is a [`GradError::Underivable`]
//! naming the operator, its line and the [`Construct`].
//!
//! ```
//! use ovl::prelude::*;
//!
//! #[operator]
//! fn square(x: Tensor<f64>) -> Tensor<f64> {
//!     let i = position_in(x.shape())[0];
//!     let out = output_like(&x);
//!     out[[i]] = x[[i]] * x[[i]];
//!     out
//! }
//!
//! let x = Lazy::from(ndarray::array![1.0f64, -2.0, 3.0]);
//! let y = square(&x);
//! ovl::set_gradient(&y, |call| {
//!     let x = call.input::<f64>(0);
//!     let dy = call.output_grad::<f64>(0);
//!     vec![Some((&dy * &(2.0 * &x)).into_untyped())]
//! });
//! let ones = Lazy::from(ndarray::array![1.0f64, 1.0, 1.0]);
//! let grads = ovl::backward(&[(&y, &ones)], &[&x]).unwrap();
//! let dx = ovl::evaluate(&grads.of(&x).unwrap()).unwrap();
//! assert_eq!(dx, ndarray::array![2.0, -4.0, 6.0].into_dyn());
//! ```
//!
//! # Checking arguments
//!
//! An operator checks its arguments at trace time and reports a problem with
//! [`prelude::trace_error`]; evaluation returns it as an error naming the line.
//!
//! ```
//! use ovl::prelude::*;
//!
//! #[operator]
//! fn first_column(x: Tensor<f32>) -> Tensor<f32> {
//!     if x.rank() != 2 {
//!         trace_error(format!("first_column needs a matrix, got shape {:?}", x.shape()));
//!     }
//!     let i = position_in([x.dim(0)])[0];
//!     let out = output([x.dim(0)]);
//!     out[[i]] = x[[i, 0]];
//!     out
//! }
//!
//! let err = ovl::evaluate(&first_column(ndarray::array![1.0f32, 2.0])).unwrap_err();
//! assert!(err.to_string().contains("needs a matrix, got shape [2]"));
//! ```

mod caches;
mod compiled;
mod deprecated;
mod destination;
mod error;
mod evaluate;
mod executor;
pub mod export;
mod fusion;
mod options;
mod plan_cache;
pub mod polymorphic;
pub mod program;
pub mod program_batch;
pub use ovl_runtime::plan::EpilogueMode;
pub mod views;

pub use caches::{
    cache_stats, clear_caches, scratch_usage, set_cache_capacity, set_scratch_capacity, Cache,
    CacheCounters, CacheStats,
};
pub use compiled::{compile, Compiled};
#[allow(deprecated)]
pub use deprecated::{
    backward_cache_stats, clear_cache, clear_plan_cache, clear_trace_memo, plan_cache_stats,
    set_gemm_epilogue, set_plan_cache_capacity, trace_memo_stats, BackwardCacheStats,
    PlanCacheStats, TraceMemoStats,
};
pub use destination::{Destination, Destinations};
pub use error::export::{ExportError, UnifyProgramError};
pub use error::{CompiledError, Error, InternalError, Mismatch};
pub use evaluate::{
    evaluate, evaluate_device, evaluate_into, evaluate_into_all, evaluate_into_views,
    evaluate_with, from_device, profile, Evaluate, OperatorProfile, Profile, Results,
};
pub use export::{as_tensorflow, placeholder, Bundle, TfExport};
pub use options::{Options, Target};
/// Reverse-mode differentiation of the lazy graph: attach gradients, build backward graphs.
pub use ovl_core::autodiff::{
    backward, backward_untyped, set_gradient, set_gradient_keyed, GradError, GradientCall,
    GradientFn, Gradients,
};
pub use ovl_core::broadcast;
/// Why a gradient could not be derived from an operator's IR (inside [`GradError::Underivable`]).
pub use ovl_core::grad::{Construct, DeriveError};
/// The `half` crate: `ovl::half::f16` and `ovl::half::bf16` are the element types of half
/// tensors (`Tensor<ovl::half::bf16>`), computed in f32 and rounded once per operation.
pub use ovl_core::half;
pub use ovl_core::lazy::Graph;
/// Memoized operator traces: a call with the same input dtypes and shapes and trace-time
/// arguments reuses its traced IR instead of running the operator's body again (see
/// [`ovl_core::trace::memo`] for the key and its rules; `OVL_TRACE_MEMO=0` turns it off).
pub use ovl_core::trace::memo::{set_trace_memo, TraceArg, TraceKey};
pub use ovl_core::trace::{Expr, Position, Tensor, Var};
/// Batching over a new leading axis: [`vmap`] turns a function written for one example (a lazy
/// graph of operators) into the batched graph, with each input [`Batched`] or [`Shared`]; see
/// [`ovl_core::vmap`] for how operators, gradients and fusion carry over.
pub use ovl_core::vmap::{vmap, Batched, Shared, VmapArgs, VmapError, VmapInput, VmapOutputs};
pub use ovl_core::{
    gemm, ir, CompareOperand, DType, DeviceData, HostTensor, IntoLazy, Lazy, LazyTensor, Scalar,
    TraceError,
};
pub use ovl_macros::{helper, operator};
pub use polymorphic::{as_tensorflow_polymorphic, IntoExport, PolymorphicExport};
pub use views::{FeedView, OutputView};

pub use fusion::{fusion, fusion_with};
/// The operator merger: fusion reports, refusal reasons, index patterns, Graphviz output.
pub use ovl_fuse::{
    EpiloguePair, FuseError, Fusion, FusionReport, ImageFormat, IndexPattern, Merge, MergeKind,
    NotPaired, NotPairedReason, NotStacked, NotStackedReason, OptLevel, Reason, Refusal, RowBuffer,
    Stacked,
};

/// The on-disk operator cache: where compiled operators live (`OVL_CACHE_DIR` overrides the
/// default) and how many times this process has run the C++ compiler.
pub use ovl_codegen::{cache_dir, compiler_invocations};

/// Empties the on-disk operator cache at [`cache_dir`] and every in-memory cache
/// ([`clear_caches`]: plans, backward graphs, traces, batched operators, fusion results, loaded
/// operators), so that the next evaluation traces, fuses and compiles again.
pub fn clear_cache_dir() -> Result<(), ovl_codegen::CodegenError> {
    clear_caches();
    ovl_runtime::clear_cache()
}

/// The instruction sets ovl uses on the CPU, and `OVL_CPU_ISA`, the switch that holds its
/// run-time dispatch and the C++ compiler's target to AVX2 ([`isa::CpuIsa`]).
pub use ovl_core::isa;

/// The CUDA backend behind [`Target::Cuda`] and [`Target::CudaValidate`]: what this machine has
/// ([`cuda::gpu_status`], [`cuda::nvrtc_status`], [`cuda::ptxas_path`]), NVRTC and ptxas
/// counters ([`cuda::stats`]), and direct access to generated CUDA, PTX and CUBIN
/// ([`cuda::compile`], [`cuda::generate_cuda`]).
pub use ovl_runtime::cuda;

/// The IR of everything `outputs` depend on, as an [`ir::OperatorDag`].
pub fn graph<O: Evaluate>(outputs: O) -> Result<Graph, Error> {
    Ok(ovl_core::lazy::build_graph(&outputs.tensors())?)
}

/// The IR, its text form and its canonical hash.
pub mod ir_tools {
    /// One operator batched over a new leading axis: the IR transform behind [`crate::vmap`].
    pub use ovl_core::batch::{batch_operator, BatchError};
    pub use ovl_core::hash::{canonical_hash, canonical_hash_operator_dag, Digest};
    /// Library calls (a GEMM): whether an operator is one, its sizes, its reference program.
    pub use ovl_core::library::{expand, gemm_dims, is_library_call, GemmDims};
    pub use ovl_core::text::{operator_dag_to_text, to_text};

    /// The protobuf bytes of an operator or operator DAG.
    pub fn to_bytes(message: &impl prost::Message) -> Vec<u8> {
        message.encode_to_vec()
    }
}

/// Everything an operator body needs: `use ovl::prelude::*;`.
///
/// This is a glob import, which a function of your own with the same name as one of these
/// (`log`, `max`, `select`, ...) would shadow; inside an `#[operator]` or `#[helper]` body a bare
/// call of such a name is therefore a compile error ("`log` is ambiguous"): write
/// `ovl::prelude::log(x)` for the DSL's function and `self::log(x)` (or any path) for yours.
pub mod prelude {
    pub use crate::{
        evaluate, evaluate_into, evaluate_with, helper, operator, profile, Lazy, Options, Target,
    };
    pub use ovl_core::trace::{
        abs, acos, asin, atan, atan2, ceil, constant, cos, cosh, epsilon, erf, exp, exp2, expm1,
        floor, fma, isfinite, isinf, isnan, log, log10, log1p, log2, max, max_value, min,
        min_value, ones, output, output_like, position_in, pow, round, rsqrt, select, sigmoid, sin,
        sinh, sqrt, tan, tanh, variable, wrapping_neg, zeros, Expr, Float, Int, IntoExpr, Num, One,
        Position, Signed, Tensor, Var, Zero,
    };
    /// Rank-generic indexing (`t.read(vec![ix(p[0]), ix(0)])`) and argument checks.
    pub use ovl_core::trace::{ix, trace_error, Idx, IndexPart};
    /// Reductions in a defined order that vectorizes (see [`ovl_core::trace::reduce`]).
    pub use ovl_core::trace::{max_of, min_of, product_of, sum_of, Acc};
    /// Random numbers in kernels: Philox-4x32-10 and variates from its words (see
    /// [`ovl_core::trace::random`]).
    pub use ovl_core::trace::{normal_f32, normal_f64, philox4x32, uniform_f32, uniform_f64};
    pub use ovl_core::{DType, Scalar};
}

#[doc(hidden)]
pub use ovl_core::trace::rt as __rt;

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

mod error;
mod evaluate;
mod executor;

pub use error::Error;
pub use evaluate::{
    evaluate, evaluate_into, evaluate_with, profile, Evaluate, OperatorProfile, Options, Profile,
    Target,
};
pub use ovl_core::lazy::Graph;
pub use ovl_core::trace::{Expr, Position, Tensor, Var};
pub use ovl_core::{ir, DType, HostTensor, IntoLazy, Lazy, Scalar, TraceError};
pub use ovl_macros::{helper, operator};

/// The on-disk operator cache: where compiled operators live (`OVL_CACHE_DIR` overrides the
/// default), how to empty it, and how many times this process has run the C++ compiler.
pub use ovl_codegen::{cache_dir, clear_cache, compiler_invocations};

/// The IR of everything `outputs` depend on, as an [`ir::OperatorDag`].
pub fn graph<O: Evaluate>(outputs: O) -> Result<Graph, Error> {
    Ok(ovl_core::lazy::build_graph(&outputs.tensors())?)
}

/// The IR, its text form and its canonical hash.
pub mod ir_tools {
    pub use ovl_core::hash::{canonical_hash, Digest};
    pub use ovl_core::text::{operator_dag_to_text, to_text};

    /// The protobuf bytes of an operator or operator DAG.
    pub fn to_bytes(message: &impl prost::Message) -> Vec<u8> {
        message.encode_to_vec()
    }
}

/// Everything an operator body needs: `use ovl::prelude::*;`.
pub mod prelude {
    pub use crate::{
        evaluate, evaluate_into, evaluate_with, helper, operator, profile, Lazy, Options, Target,
    };
    pub use ovl_core::trace::{
        abs, acos, asin, atan, atan2, ceil, constant, cos, cosh, epsilon, erf, exp, exp2, expm1,
        floor, fma, isfinite, isinf, isnan, log, log10, log1p, log2, max, max_value, min,
        min_value, ones, output, output_like, position_in, pow, round, rsqrt, select, sigmoid, sin,
        sinh, sqrt, tan, tanh, variable, zeros, Expr, Float, Int, IntoExpr, Num, Position, Tensor,
        Var,
    };
    pub use ovl_core::{DType, Scalar};
}

#[doc(hidden)]
pub use ovl_core::trace::rt as __rt;

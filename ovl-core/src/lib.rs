//! Core of ovl above the IR: the tracing builder that `#[operator]` expands to, the lazy
//! operator graph, reverse-mode autodiff over it, and the reference interpreter (the oracle
//! every backend is tested against).
//!
//! The IR itself (schema types, dtypes, host tensors, validation, hashing, text) is the crate
//! `ovl-ir`; its modules are re-exported here so that code above ovl-core needs one import path.

pub mod autodiff;
pub mod broadcast;
mod builtin_gradient;
pub mod error;
pub mod interp;
pub mod lazy;
mod lazy_ops;
pub mod machine;
pub use lazy_ops::{gemm, CompareOperand};
pub mod quiet;
pub mod trace;
pub mod vmap;

pub use ovl_ir::{
    accuracy, analysis, batch, batch_ops, builder, cooperative, derivatives, dtype, fast_hash,
    grad, hash, host, ir, isa, library, limits, lru, symbolic, text, unify, validate,
    with_tensor_data, written, IR_VERSION,
};

/// The `half` crate, whose `f16` and `bf16` are the element types of half tensors.
pub use ovl_ir::half_float::{self, half};

pub use error::TraceError;
pub use lazy::{GraphInput, IntoLazy, Lazy, LazyTensor};
pub use ovl_ir::{AllocError, DType, DeviceData, HostTensor, Literal, Scalar, TensorData};

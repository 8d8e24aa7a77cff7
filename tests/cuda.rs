//! The CUDA backend: the conformance suite, device tensors' runs, CUDA graphs and cuBLAS products
//! (on a GPU when there is one, else compiled by NVRTC and validated by ptxas).
//!
//! One test binary for the files of `tests/cuda/` (each was a binary of its own, and CI links
//! every binary). A file's tests are named after it, as in `cargo test --test cuda gemm_cuda::`.
//! Files whose tests set process-wide state or count process-wide events keep binaries of their
//! own (the `tests/*.rs` files that are not groups).

// `#[macro_use]`: `conformance_suite!` for the modules below.
#[macro_use]
#[path = "conformance/mod.rs"]
mod conformance;
#[path = "support/gather_op.rs"]
mod gather_op;
#[path = "support/gemm_values.rs"]
mod gemm_values;
#[path = "support/lstm_small_ops.rs"]
mod lstm_small_ops;
#[path = "support/nuts_setup.rs"]
mod nuts_setup;

#[path = "cuda/conformance_cuda.rs"]
mod conformance_cuda;
#[path = "cuda/cuda_backend.rs"]
mod cuda_backend;
#[path = "cuda/cuda_graphs.rs"]
mod cuda_graphs;
#[path = "cuda/gemm_cuda.rs"]
mod gemm_cuda;
#[path = "cuda/nuts_cuda.rs"]
mod nuts_cuda;

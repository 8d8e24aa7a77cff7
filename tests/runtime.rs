//! Running graphs on the CPU: `Compiled`, evaluating into given buffers, borrowed views, input
//! layouts, and matrix products (gemm, stacked gemm).
//!
//! One test binary for the files of `tests/runtime/` (each was a binary of its own, and CI links
//! every binary). A file's tests are named after it, as in `cargo test --test runtime gemm::`.
//! Files whose tests set process-wide state or count process-wide events keep binaries of their
//! own (the `tests/*.rs` files that are not groups).

#[path = "support/gemm_values.rs"]
mod gemm_values;
#[path = "support/lstm_small_ops.rs"]
mod lstm_small_ops;

#[path = "runtime/borrowed_views.rs"]
mod borrowed_views;
#[path = "runtime/compiled.rs"]
mod compiled;
#[path = "runtime/cpu_isa.rs"]
mod cpu_isa;
#[path = "runtime/evaluate_into.rs"]
mod evaluate_into;
#[path = "runtime/gemm.rs"]
mod gemm;
#[path = "runtime/gemm_half.rs"]
mod gemm_half;
#[path = "runtime/gemm_stack.rs"]
mod gemm_stack;
#[path = "runtime/input_layouts.rs"]
mod input_layouts;

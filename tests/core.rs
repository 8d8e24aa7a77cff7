//! Tracing and the DSL, the lazy graph, vmap and derived gradients (`autodiff/`), the conformance
//! suite on the interpreter and the C++ backend, and the errors of bad programs (trace-time
//! mistakes, faults, extreme sizes).
//!
//! One test binary for the files of `tests/core/` (each was a binary of its own, and CI links
//! every binary). A file's tests are named after it, as in `cargo test --test core autodiff::`.
//! Files whose tests set process-wide state or count process-wide events keep binaries of their
//! own (the `tests/*.rs` files that are not groups).

// `#[macro_use]`: `conformance_suite!` for the modules below.
#[macro_use]
#[path = "conformance/mod.rs"]
mod conformance;
#[path = "support/cumsum_rows.rs"]
mod cumsum;
#[path = "support/lstm_small_ops.rs"]
mod lstm_small_ops;
#[path = "support/nuts_setup.rs"]
mod nuts_setup;

#[path = "core/autodiff/mod.rs"]
mod autodiff;
#[path = "core/conformance_cpu.rs"]
mod conformance_cpu;
#[path = "core/conformance_interpreter.rs"]
mod conformance_interpreter;
#[path = "core/dsl_ergonomics.rs"]
mod dsl_ergonomics;
#[path = "core/faults.rs"]
mod faults;
#[path = "core/half_dsl.rs"]
mod half_dsl;
#[path = "core/ir_dump.rs"]
mod ir_dump;
#[path = "core/long_graphs.rs"]
mod long_graphs;
#[path = "core/math_accuracy.rs"]
mod math_accuracy;
#[path = "core/never_abort.rs"]
mod never_abort;
#[path = "core/nuts.rs"]
mod nuts;
#[path = "core/trace_errors.rs"]
mod trace_errors;
#[path = "core/vmap.rs"]
mod vmap;
#[path = "core/vmap_props.rs"]
mod vmap_props;

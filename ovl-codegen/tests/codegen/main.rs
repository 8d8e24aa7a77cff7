//! The code generators' integration tests that share no process-wide state, one module per
//! subject, linked into one test binary. (`cache.rs`, `cuda.rs` and `cuda_missing_tools.rs`
//! stay binaries of their own: they set environment variables or count compiler runs.)

#[path = "../common/mod.rs"]
mod common;

mod columns;
mod cooperative;
mod cuda_emulated;
mod derived;
mod fixtures;
mod golden;
mod half;
mod isa;
mod lanes_min_max;
mod ops;
mod symbolic;

//! The stdlib's integration tests, one module per subject, linked into one test binary.

mod forward;
mod gradients;
mod half;
mod lstm;
mod mlp;
mod reductions;

//! The merger's integration tests, one module per subject, linked into one test binary.

mod optimize;
mod refusals;

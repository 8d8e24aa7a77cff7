//! Exported programs: TensorFlow bundles, loaded programs and batched programs.
//!
//! One test binary for the files of `tests/programs/` (each was a binary of its own, and CI links
//! every binary). A file's tests are named after it, as in `cargo test --test programs export::`.
//! Files whose tests set process-wide state or count process-wide events keep binaries of their
//! own (the `tests/*.rs` files that are not groups).

#[path = "support/cumsum_rows.rs"]
mod cumsum;

#[path = "programs/export.rs"]
mod export;
#[path = "programs/program.rs"]
mod program;
#[path = "programs/program_batch.rs"]
mod program_batch;

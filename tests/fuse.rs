//! Fusion: what merges, what is refused and why, the cost model's view of memory, the property
//! tests of the fused graphs, and the fused reductions (with their kernels pinned in golden files).
//!
//! One test binary for the files of `tests/fuse/` (each was a binary of its own, and CI links
//! every binary). A file's tests are named after it, as in `cargo test --test fuse fusion::`.
//! Files whose tests set process-wide state or count process-wide events keep binaries of their
//! own (the `tests/*.rs` files that are not groups).

#[path = "support/lstm_small_ops.rs"]
mod lstm_small_ops;
#[path = "support/product_per_element.rs"]
mod product_per_element;
#[path = "support/reductions.rs"]
mod reduction_kernels;

#[path = "fuse/fusion.rs"]
mod fusion;
#[path = "fuse/fusion_memory.rs"]
mod fusion_memory;
#[path = "fuse/fusion_props.rs"]
mod fusion_props;
#[path = "fuse/reductions.rs"]
mod reductions;
#[path = "fuse/reductions_axes.rs"]
mod reductions_axes;
#[path = "fuse/reductions_bench.rs"]
mod reductions_bench;

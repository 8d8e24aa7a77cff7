//! ovl: write tensor operators in Rust, fuse them automatically, run them on CPU and GPU.
pub use ovl_core as core;

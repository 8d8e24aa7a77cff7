//! Code shared by the C++ and CUDA backends.
//!
//! - [`cache_entry`]: one entry of the on-disk operator cache (layout, lock, double-check,
//!   atomic writes, `meta`, integrity check).

pub(crate) mod cache_entry;

//! Running generated C++: ovl's thread pool ([`pool`]), a compiled operator loaded from its
//! library and run on host tensors ([`operator`]), and the operator cache that finds a library
//! on disk or has `ovl-codegen` build it, then loads it once per process ([`cache`]).

pub mod cache;
pub mod operator;
pub mod pool;

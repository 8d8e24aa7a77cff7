//! The C++ backend: the frame around the shared worker program ([`generate_cpp`]), the compiler
//! driver, the operator cache's C++ entries ([`cache`]), the C entry points of a compiled
//! operator ([`abi`]) and the multi-threaded runtime.

pub mod abi;
pub mod cache;
pub(crate) mod compiler;
mod frame;
mod pch;
pub(crate) mod pool;
pub(crate) mod runtime;

pub use frame::generate_cpp;

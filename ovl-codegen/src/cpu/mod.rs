//! The C++ backend: the frame around the shared worker program ([`generate_cpp`]), the compiler
//! driver ([`compiler`]), the precompiled prelude ([`pch`]) and the C entry points of a compiled
//! operator ([`abi`]). `ovl-runtime` finds or builds an operator's cache entry with these and
//! loads it.

pub mod abi;
pub mod compiler;
mod frame;
pub mod pch;

pub use frame::generate_cpp;

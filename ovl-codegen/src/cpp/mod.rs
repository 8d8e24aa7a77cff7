//! C++ generation: the prelude of exact-semantics helpers, literals, the interval analysis that
//! removes provably unnecessary bounds checks, and the emitter.

mod bounds;
mod emit;
mod literal;
mod prelude;

pub(crate) use emit::{emit, worker_cost, Dialect};
pub use emit::{generate_cpp, MAX_LOCALS_TOTAL_BYTES, MAX_LOCAL_BYTES};
pub(crate) use literal::ctype;
pub(crate) use prelude::PRELUDE;

//! Test helpers shared by the crates of the ovl workspace. Not published: only the tests of the
//! workspace depend on it (as a dev-dependency).
//!
//! - [`golden`]: compare generated text with a committed file, or (re)write the file with
//!   `OVL_BLESS=1`.

pub mod golden;

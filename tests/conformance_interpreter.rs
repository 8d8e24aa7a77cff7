//! The conformance suite on the reference interpreter.
mod conformance;

conformance_suite!(ovl::Options::interpreter());

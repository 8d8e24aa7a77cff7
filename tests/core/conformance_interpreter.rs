//! The conformance suite on the reference interpreter.

conformance_suite!(ovl::Options::interpreter());

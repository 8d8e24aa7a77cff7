//! The conformance suite on generated C++ (compiled through the operator cache, all cores).
mod conformance;

conformance_suite!(ovl::Options::cpu());

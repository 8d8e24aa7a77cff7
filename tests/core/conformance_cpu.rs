//! The conformance suite on generated C++ (compiled through the operator cache, all cores).

conformance_suite!(ovl::Options::cpu());

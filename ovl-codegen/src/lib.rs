//! C++ backend of ovl.

//! IR validation (to be written).

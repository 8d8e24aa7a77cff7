//! Reference interpreter (to be written).

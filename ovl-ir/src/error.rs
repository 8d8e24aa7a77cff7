//! Errors shared by everything that runs IR: the interpreter and every backend. The faults of a
//! worker are defined in [`crate::fault`]; their payloads keep these paths.

pub use crate::fault::{Access, NonPositiveStep, OutOfBounds, WhileLimit, WorkerFault};

//! A refused or failed call of a program from a framework's kernel (the torch kernels, the CUDA
//! path they share with the XLA handler): the Python exception it becomes, or the code the C++
//! kernel turns into one.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::PyErr;

/// A refused or failed call: the Python exception it becomes, and its message.
#[derive(Debug)]
pub enum Failure {
    /// `TypeError`.
    Type(String),
    /// `ValueError`.
    Value(String),
    /// `RuntimeError`.
    Runtime(String),
    /// `MemoryError` (`torch.OutOfMemoryError` from the C++ kernel).
    Memory(String),
}

impl Failure {
    pub(crate) fn from_program(e: ovl::program::ProgramError) -> Failure {
        use ovl::program::ProgramError as E;
        match e {
            E::Mismatch { .. } => Failure::Value(format!("ovl {e}")),
            E::OutOfMemory(_) => Failure::Memory(format!("ovl: {e}")),
            e => Failure::Runtime(format!("ovl {e}")),
        }
    }

    /// The code the C++ kernel turns into an exception (1 `TypeError`, 2 `ValueError`, 3
    /// `RuntimeError`, 4 out of memory) and the message.
    pub fn code(&self) -> (i32, &str) {
        match self {
            Failure::Type(m) => (1, m),
            Failure::Value(m) => (2, m),
            Failure::Runtime(m) => (3, m),
            Failure::Memory(m) => (4, m),
        }
    }
}

impl From<Failure> for PyErr {
    fn from(f: Failure) -> PyErr {
        match f {
            Failure::Type(m) => PyTypeError::new_err(m),
            Failure::Value(m) => PyValueError::new_err(m),
            Failure::Runtime(m) => pyo3::exceptions::PyRuntimeError::new_err(m),
            Failure::Memory(m) => pyo3::exceptions::PyMemoryError::new_err(m),
        }
    }
}

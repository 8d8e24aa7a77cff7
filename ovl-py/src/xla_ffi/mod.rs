//! `ovl.jax`'s native half: an XLA typed-FFI handler ([`handler`]) that runs registered
//! programs on XLA's buffers, written against XLA's stable FFI C API ([`c_api`]), and the
//! functions `ovl/jax.py` calls:
//!
//! - `_xla_handlers()`: the handlers as PyCapsules, `(cpu, cuda)`, for
//!   `jax.ffi.register_ffi_target(.., api_version=1)`;
//! - `_xla_register(program)`: registers a program, returns its id (the custom call's
//!   `program` attribute);
//! - `_xla_output_types(id, shapes)`: binds the inputs' shapes (at trace time) and returns the
//!   outputs' `(dtype, shape)`, or raises `ValueError` naming the input;
//! - `_xla_batch(program, batched, n)`: the program batched over `n` examples (for `vmap`).

pub mod c_api;
pub mod cuda;
pub mod handler;

use crate::bundle::{Dim, TensorInfo};
use crate::program::Program;
use ovl::program::ProgramError;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyCapsule;
use std::ffi::c_void;
use std::ptr::NonNull;

/// The handlers of the CPU and CUDA platforms as capsules (`xla._CUSTOM_CALL_TARGET`, the name
/// jaxlib gives its own).
#[pyfunction]
fn _xla_handlers(py: Python<'_>) -> PyResult<(Bound<'_, PyCapsule>, Bound<'_, PyCapsule>)> {
    let cpu = handler::handler_cpu as *mut c_void;
    let cuda = cuda::handler_cuda as *mut c_void;
    let name = c"xla._CUSTOM_CALL_TARGET";
    let missing = || PyRuntimeError::new_err("ovl: a null handler");
    // SAFETY: the pointers are functions of this library, which stays loaded (Python never
    // unloads an extension module), with XLA_FFI_Handler's signature.
    unsafe {
        Ok((
            PyCapsule::new_with_pointer(py, NonNull::new(cpu).ok_or_else(missing)?, name)?,
            PyCapsule::new_with_pointer(py, NonNull::new(cuda).ok_or_else(missing)?, name)?,
        ))
    }
}

/// Registers `program` for the handler and returns its id.
#[pyfunction]
fn _xla_register(program: &Bound<'_, Program>) -> PyResult<u64> {
    handler::register(&program.get().loaded, &program.get().gpu).map_err(PyRuntimeError::new_err)
}

/// The outputs' `(dtype, shape)` of program `id` for inputs of these shapes, or a
/// `ValueError` naming the input whose shape does not fit.
#[pyfunction]
fn _xla_output_types(id: u64, shapes: Vec<Vec<usize>>) -> PyResult<Vec<(String, Vec<usize>)>> {
    let entry = handler::entry(id)
        .ok_or_else(|| PyValueError::new_err(format!("no ovl program registered as {id}")))?;
    let slices: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
    let binding = entry.program.bind(&slices).map_err(|e| match e {
        ProgramError::Mismatch { .. } => PyValueError::new_err(format!("ovl {e}")),
        e => PyRuntimeError::new_err(format!("ovl {e}")),
    })?;
    Ok(binding
        .outputs
        .iter()
        .map(|s| (handler::dtype_name(s.dtype).to_string(), s.shape.clone()))
        .collect())
}

/// Program `program` batched over `n` examples by ovl (`ovl::program_batch::batch_sealed`, what
/// the TensorFlow bridge does for `tf.vectorized_map`): the inputs marked in `batched` gain a
/// leading axis of `n`, the others stay shared; returns the batched program (with its batched
/// gradient program) and which outputs are batched. A program that cannot be batched is a
/// `ValueError`.
#[pyfunction]
fn _xla_batch(
    py: Python<'_>,
    program: &Bound<'_, Program>,
    batched: Vec<bool>,
    n: u64,
) -> PyResult<(Program, Vec<bool>)> {
    let p = program.get();
    let gradient = p.gradient.as_deref().unwrap_or(&[]);
    let batch = py
        .detach(|| ovl::program_batch::batch_sealed(&p.sealed, gradient, &batched, n))
        .map_err(|e| PyValueError::new_err(format!("ovl: {e}")))?;
    let lead = |t: &TensorInfo, b: bool| {
        let mut t = t.clone();
        if b {
            t.dims.insert(0, Dim::Fixed(n as usize));
        }
        t
    };
    let inputs = p
        .inputs
        .iter()
        .zip(&batched)
        .map(|(t, &b)| lead(t, b))
        .collect();
    let outputs = p
        .outputs
        .iter()
        .zip(&batch.batched_outputs)
        .map(|(t, &b)| lead(t, b))
        .collect();
    let gradient = (!batch.gradient.is_empty()).then_some(batch.gradient);
    let what = format!("bundle \"{}\" batched over {n} examples", p.source);
    let batched_program = Program::open(
        py,
        &batch.program,
        inputs,
        outputs,
        gradient,
        &what,
        &p.source,
    )?;
    Ok((batched_program, batch.batched_outputs))
}

/// Adds the functions to `ovl._native`.
pub fn add(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_xla_handlers, m)?)?;
    m.add_function(wrap_pyfunction!(_xla_register, m)?)?;
    m.add_function(wrap_pyfunction!(_xla_output_types, m)?)?;
    m.add_function(wrap_pyfunction!(_xla_batch, m)?)?;
    Ok(())
}

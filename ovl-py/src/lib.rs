//! # ovl-py: the native module of the Python package `ovl`
//!
//! `ovl._native`, a CPython extension on the stable ABI (abi3, Python 3.9 and later), built by
//! setuptools-rust when the package is installed (`pip install ./ovl-py`). The Python side
//! (`ovl/__init__.py`) is the API; this module holds:
//!
//! - [`program::Program`]: a bundle file's program (`ovl::as_tensorflow(..).write(path)`,
//!   `ovl::as_tensorflow_polymorphic`) loaded with [`ovl::program::LoadedProgram`] and run on
//!   the host, its inputs taken through the DLPack protocol and used in place when contiguous
//!   row-major (copied otherwise), its outputs fresh tensors;
//! - [`capsule`]: DLPack capsules taken from producers (consumed once, the producer's deleter
//!   called when the run is done) and [`capsule::DlpackExport`], an output handed to
//!   `numpy.from_dlpack`;
//! - [`bundle`]: the bundle file's JSON, read without Python;
//! - [`torch::TorchKernel`]: a program's kernel for its PyTorch custom op (`ovl.torch`), CPU and
//!   CUDA, reading and writing torch tensors in place through their data pointers;
//!   [`torch_memory`]: a CUDA call's outputs and scratch from torch's caching allocator;
//! - [`cuda`]: a program's GPU build and its run on a framework's stream, shared by the torch
//!   kernels and the XLA CUDA handler; [`failure::Failure`]: their errors;
//! - [`xla_ffi`]: the XLA FFI handlers (CPU and CUDA) and program registry behind `ovl.jax`.
//!
//! No panic reaches Python as such (PyO3 turns one into `pyo3_runtime.PanicException`), and
//! ovl's errors are mapped to `TypeError` / `ValueError` / `RuntimeError` / `BundleError` with
//! messages that name the input.

pub mod bundle;
pub mod capsule;
pub mod cuda;
pub mod failure;
pub mod program;
pub mod torch;
pub mod torch_memory;
pub mod xla_ffi;

use pyo3::prelude::*;

/// The module `ovl._native`.
#[pymodule(name = "_native")]
fn native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<program::Program>()?;
    m.add_class::<capsule::DlpackExport>()?;
    m.add_class::<torch::TorchKernel>()?;
    m.add_function(wrap_pyfunction!(torch::symbolic_dims, m)?)?;
    m.add_function(wrap_pyfunction!(torch::torch_kernel_address, m)?)?;
    m.add_function(wrap_pyfunction!(torch::torch_run_address, m)?)?;
    m.add("BundleError", m.py().get_type::<program::BundleError>())?;
    xla_ffi::add(m)?;
    Ok(())
}

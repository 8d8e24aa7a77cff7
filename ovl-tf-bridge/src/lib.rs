//! # ovl-tf-bridge: ovl programs as a TensorFlow op
//!
//! A shared library that TensorFlow loads with `tf.load_op_library`. Loading it registers, from
//! an ELF constructor and through TensorFlow's C API, one op and its CPU kernel:
//!
//! ```text
//! DynamicLib(inputs: in_types) -> (outputs: out_types)
//!   in_types:   list(type) >= 0   the dtypes of the fed tensors
//!   out_types:  list(type) >= 1   the dtypes of the outputs
//!   out_shapes: list(shape)       their static shapes (checked against the program)
//!   program:    string            the sealed ovl.ir.Program (fused operator DAG + constants)
//!   gradient:   string = ''       the sealed gradient program, read by the Python gradient
//! ```
//!
//! The op carries its IR: the kernel compiles the program into the process's operator cache the
//! first time it is constructed (a fresh process serving a SavedModel needs nothing but this
//! library and a C++ compiler), then runs every kernel of the program on several threads,
//! reading TensorFlow's input buffers and writing TensorFlow-allocated outputs in place.
//! Programs are produced in Rust by `ovl::as_tensorflow` and called from Python through the
//! `ovl_tf` package (`python/` in this crate).
//!
//! Unlike the original OVL op, `DynamicLib` names no compiled library or entry point: the cache
//! key of a compiled operator depends on the receiving machine's compiler and CPU, so the op
//! carries the IR and each process finds (or builds) its own library. A cached library that
//! does not load, or lacks the expected entry points, is rebuilt; a cache miss that cannot be
//! compiled (no working C++ compiler) fails the op with the compiler's message.
//!
//! Both programs are *sealed* (`ovl::program::seal_program`): a header, the SHA-256 digest of
//! the protobuf bytes, then those bytes. The kernel checks the digests before decoding
//! anything, so an edited or corrupted attribute is an error that says so, never another
//! program.
//!
//! The C-API kernel is the fallback: `ovl_tf` also compiles a C++ CPU kernel of `DynamicLib`
//! against TensorFlow's own headers (`python/ovl_tf/kernel/dynamic_lib_kernel.cc`, registered
//! at a higher priority, so TensorFlow picks it) that calls this library's [`cc_kernel`]
//! functions with TensorFlow's raw buffers and dimensions, and tells TensorFlow's executor that
//! a small program is cheap (what a call costs: docs/benchmarks.md, "Per-call cost").
//!
//! For TensorFlow's pfor (`tf.vectorized_map`, `GradientTape.jacobian` and `batch_jacobian`),
//! the library also exports two C functions, `ovl_tf_batch_program` and `ovl_tf_free_batch`
//! ([`batch`]), which the Python package calls through `ctypes`: they batch an op's programs
//! over a leading axis (`ovl::program_batch::batch_sealed`) for its pfor converter.
//!
//! Errors (a wrong dtype or shape, a corrupt program, a compiler failure) are reported as
//! TensorFlow errors; every callback runs under `catch_unwind`, so no panic reaches TensorFlow.
//!
//! GPU: **no GPU kernel is registered**; on a GPU build of TensorFlow, soft device placement
//! (TensorFlow 2's default) puts `DynamicLib` on the CPU and TensorFlow copies its tensors to
//! and from host memory. A correct GPU kernel needs to order its launches after the work
//! TensorFlow queued on its own stream: `TF_GetStream` does not work on TensorFlow's stock GPU
//! device, so a C-API kernel would have to synchronize the whole CUDA context before and after
//! each launch on a stream of its own (correct, but it serializes TensorFlow's GPU work), or be
//! written against TensorFlow's C++ API. Neither can be tested here (there is no GPU build of
//! TensorFlow on the development machines), so neither is shipped; ovl's own CUDA backend
//! (`Options::cuda()`) is the way to run ovl operators on a GPU today.

pub mod batch;
#[cfg(not(test))]
pub mod cc_kernel;
#[cfg(not(test))]
mod ffi;
pub mod nodedef;

// The registration needs TensorFlow's symbols, which only the cdylib links; unit tests (a test
// executable) cover the parts that do not.
#[cfg(not(test))]
mod compute;
#[cfg(not(test))]
mod op;
/// Loaded programs shared by the kernel instances running the same program.
#[cfg(not(test))]
pub mod programs;
#[cfg(not(test))]
mod tf;
#[cfg(not(test))]
pub mod xla;
mod xla_cache;

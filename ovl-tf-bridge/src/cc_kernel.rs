//! What the C++ CPU kernel of `DynamicLib` calls (`python/ovl_tf/kernel/dynamic_lib_kernel.cc`,
//! which `ovl_tf` compiles against TensorFlow's own headers and connects to these functions
//! through `ctypes`, like the XLA kernel).
//!
//! The C-API kernel that this library registers (`crate::op`) costs more per call than the
//! program's own code for a small program: TensorFlow's C API wraps every input and output in a
//! heap-allocated `TF_Tensor`, and its kernels count as expensive, so TensorFlow's executor
//! times each call. The C++ kernel is registered at a higher priority than the C-API one (so
//! TensorFlow picks it whenever it is loaded; without a C++ compiler the C-API kernel remains),
//! tells the executor that a program with fixed shapes and no large kernel is cheap
//! (`OpKernel::IsExpensive`), and hands this library TensorFlow's buffers and dimensions
//! directly: [`ovl_tf_kernel_new`] when TensorFlow constructs a node's kernel (the same checks
//! as the C-API kernel, on the serialized `NodeDef`), [`ovl_tf_kernel_compute`] per call
//! (`compute::run_raw`: the same binding by pointer, per-thread scratch and inline
//! execution), [`ovl_tf_kernel_delete`] when TensorFlow drops it.
//!
//! Every function runs under `catch_unwind`; a failure is TensorFlow's error code and a message
//! in the caller's buffer, never a panic.

use crate::compute::{run_raw, Allocate, Kernel, RawInput};
use crate::ffi::TF_INTERNAL;
use crate::op::{construct_from_node_def, panic_message};
use std::ffi::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Writes `message` into the caller's buffer (cut to fit at a character boundary,
/// NUL-terminated).
///
/// # Safety
/// `error` must be writable for `error_len` bytes (or null).
unsafe fn report(error: *mut c_char, error_len: usize, message: &str) {
    if error.is_null() || error_len == 0 {
        return;
    }
    let mut n = message.len().min(error_len - 1);
    while !message.is_char_boundary(n) {
        n -= 1;
    }
    // SAFETY: n + 1 <= error_len bytes are written.
    unsafe {
        std::ptr::copy_nonoverlapping(message.as_ptr(), error.cast::<u8>(), n);
        *error.add(n) = 0;
    }
}

/// Constructs the kernel of the node whose serialized `NodeDef` is `node_def` (`len` bytes).
/// Returns the kernel (freed by [`ovl_tf_kernel_delete`]) and sets `*expensive` (0: every call
/// is small and runs on TensorFlow's thread), or returns null with TensorFlow's error code in
/// `*code` and the message in `error`.
///
/// # Safety
/// `node_def` must be readable for `len` bytes, `expensive` and `code` writable, `error`
/// writable for `error_len` bytes (or null).
#[no_mangle]
pub unsafe extern "C" fn ovl_tf_kernel_new(
    node_def: *const u8,
    len: usize,
    expensive: *mut c_int,
    code: *mut c_int,
    error: *mut c_char,
    error_len: usize,
) -> *mut c_void {
    let result = catch_unwind(AssertUnwindSafe(|| {
        let bytes = if node_def.is_null() || len == 0 {
            &[][..]
        } else {
            // SAFETY: the caller's contract.
            unsafe { std::slice::from_raw_parts(node_def, len) }
        };
        construct_from_node_def(bytes)
    }))
    .unwrap_or_else(|panic| {
        Err((
            TF_INTERNAL,
            format!("internal error in ovl-tf-bridge: {}", panic_message(&panic)),
        ))
    });
    match result {
        Ok(kernel) => {
            // SAFETY: the caller's contract.
            unsafe { *expensive = c_int::from(!kernel.is_small()) };
            Box::into_raw(Box::new(kernel)).cast()
        }
        Err((c, message)) => {
            // SAFETY: the caller's contract.
            unsafe {
                *code = c;
                report(error, error_len, &message);
            }
            std::ptr::null_mut()
        }
    }
}

/// Runs one call of `kernel` on the `n_in` inputs, allocating the `n_out` outputs through
/// `allocate(ctx, ..)`. Returns 0, or TensorFlow's error code with the message in `error`.
///
/// # Safety
/// `kernel` must come from [`ovl_tf_kernel_new`] and not be deleted; `inputs` must hold `n_in`
/// inputs as `run_raw` requires; `allocate` and `ctx` as `run_raw` requires; `error`
/// writable for `error_len` bytes (or null).
#[no_mangle]
pub unsafe extern "C" fn ovl_tf_kernel_compute(
    kernel: *const c_void,
    inputs: *const RawInput,
    n_in: c_int,
    n_out: c_int,
    allocate: Allocate,
    ctx: *mut c_void,
    error: *mut c_char,
    error_len: usize,
) -> c_int {
    let result = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the caller's contract.
        let Some(kernel) = (unsafe { kernel.cast::<Kernel>().as_ref() }) else {
            return Err((
                TF_INTERNAL,
                "DynamicLib: the kernel was not constructed".to_string(),
            ));
        };
        let inputs = if n_in <= 0 || inputs.is_null() {
            &[][..]
        } else {
            // SAFETY: the caller's contract.
            unsafe { std::slice::from_raw_parts(inputs, n_in as usize) }
        };
        // SAFETY: the caller's contract.
        unsafe { run_raw(kernel, inputs, n_out.max(0) as usize, allocate, ctx) }
    }))
    .unwrap_or_else(|panic| {
        Err((
            TF_INTERNAL,
            format!("internal error in ovl-tf-bridge: {}", panic_message(&panic)),
        ))
    });
    match result {
        Ok(()) => 0,
        Err((c, message)) => {
            // SAFETY: the caller's contract.
            unsafe { report(error, error_len, &message) };
            c
        }
    }
}

/// Frees a kernel made by [`ovl_tf_kernel_new`] (null: nothing).
///
/// # Safety
/// `kernel` must come from [`ovl_tf_kernel_new`] and be freed once.
#[no_mangle]
pub unsafe extern "C" fn ovl_tf_kernel_delete(kernel: *mut c_void) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if !kernel.is_null() {
            // SAFETY: made by Box::into_raw in ovl_tf_kernel_new, freed once.
            drop(unsafe { Box::from_raw(kernel.cast::<Kernel>()) });
        }
    }));
}

//! Batching a `DynamicLib` op's programs for TensorFlow's pfor (`tf.vectorized_map`,
//! `GradientTape.jacobian`): two exported C functions that the Python package calls through
//! `ctypes` on this library (`ovl_tf/_pfor.py`).
//!
//! ```text
//! OvlTfBatch* ovl_tf_batch_program(program, program_len, gradient, gradient_len,
//!                                  batched_feeds, feeds, n)
//! void ovl_tf_free_batch(OvlTfBatch*)
//! ```
//!
//! `program` and `gradient` are the op's sealed attributes (`gradient_len` 0: none),
//! `batched_feeds` one byte per feed (nonzero: the feed has the leading batch axis), `n` the
//! batch size, or [`RUN_TIME_LENGTH`] (`UINT64_MAX`) for a loop length known only when the
//! batched program runs (its leading dimension is then the symbol `pfor`, TensorFlow's `None`,
//! determined at run time from the stacked inputs). The result ([`OvlTfBatch`]) holds the sealed batched program and gradient
//! program and one byte per output (1: batched), or an error message; it is owned by this
//! library until [`ovl_tf_free_batch`]. No panic crosses the boundary: a panic becomes an
//! error message.

use std::ffi::{c_char, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The `n` of [`ovl_tf_batch_program`] that asks for a loop length known only at run time
/// ([`ovl::program_batch::BatchSize::RunTime`]); no batch of this many examples fits in memory.
pub const RUN_TIME_LENGTH: u64 = u64::MAX;

/// What [`ovl_tf_batch_program`] returns; `ovl_tf/_pfor.py` declares the same layout.
#[repr(C)]
#[derive(Debug)]
pub struct OvlTfBatch {
    /// NUL-terminated UTF-8 message when batching failed, else null.
    pub error: *mut c_char,
    /// The sealed batched program (null and 0 on error).
    pub program: *mut u8,
    /// Its length in bytes.
    pub program_len: usize,
    /// The sealed batched gradient program (null and 0 when there is none).
    pub gradient: *mut u8,
    /// Its length in bytes.
    pub gradient_len: usize,
    /// One byte per output of the program: 1 when it is batched.
    pub batched_outputs: *mut u8,
    /// The number of outputs.
    pub outputs: usize,
}

/// A leaked boxed slice (null for an empty one) and its length.
fn leak(bytes: Vec<u8>) -> (*mut u8, usize) {
    if bytes.is_empty() {
        return (std::ptr::null_mut(), 0);
    }
    let len = bytes.len();
    (Box::into_raw(bytes.into_boxed_slice()).cast::<u8>(), len)
}

/// Frees what [`leak`] made.
///
/// # Safety
/// `ptr` and `len` come from one call of [`leak`] and are freed once.
unsafe fn free(ptr: *mut u8, len: usize) {
    if !ptr.is_null() {
        // SAFETY: forwarded to the caller: a boxed slice of `len` bytes leaked by `leak`.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, len)) });
    }
}

fn error_batch(message: &str) -> OvlTfBatch {
    OvlTfBatch {
        error: CString::new(message.replace('\0', " "))
            .unwrap_or_default()
            .into_raw(),
        program: std::ptr::null_mut(),
        program_len: 0,
        gradient: std::ptr::null_mut(),
        gradient_len: 0,
        batched_outputs: std::ptr::null_mut(),
        outputs: 0,
    }
}

/// Borrows `len` bytes at `ptr` (null with length 0: empty).
///
/// # Safety
/// `ptr` points to `len` readable bytes, or `len` is 0.
unsafe fn bytes<'a>(ptr: *const u8, len: usize) -> Result<&'a [u8], String> {
    match (ptr.is_null(), len) {
        (_, 0) => Ok(&[]),
        (true, _) => Err(format!("a null pointer was passed for {len} bytes")),
        // SAFETY: forwarded to the caller.
        (false, _) => Ok(unsafe { std::slice::from_raw_parts(ptr, len) }),
    }
}

/// Batches the sealed program (and gradient program) of a `DynamicLib` op over `n` examples;
/// see the module documentation. Never returns null; free the result with
/// [`ovl_tf_free_batch`].
///
/// # Safety
/// Each pointer points to as many readable bytes as its length says (or the length is 0).
#[no_mangle]
pub unsafe extern "C" fn ovl_tf_batch_program(
    program: *const u8,
    program_len: usize,
    gradient: *const u8,
    gradient_len: usize,
    batched_feeds: *const u8,
    feeds: usize,
    n: u64,
) -> *mut OvlTfBatch {
    let result = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: forwarded to the caller.
        let (program, gradient, mask) = unsafe {
            (
                bytes(program, program_len)?,
                bytes(gradient, gradient_len)?,
                bytes(batched_feeds, feeds)?,
            )
        };
        let mask: Vec<bool> = mask.iter().map(|&b| b != 0).collect();
        let n = match n {
            RUN_TIME_LENGTH => ovl::program_batch::BatchSize::RunTime,
            n => ovl::program_batch::BatchSize::Known(n),
        };
        ovl::program_batch::batch_sealed(program, gradient, &mask, n).map_err(|e| e.to_string())
    }));
    let batch = match result {
        Ok(Ok(sealed)) => {
            let (program, program_len) = leak(sealed.program);
            let (gradient, gradient_len) = leak(sealed.gradient);
            let flags = sealed.batched_outputs.iter().map(|&b| b as u8).collect();
            let (batched_outputs, outputs) = leak(flags);
            OvlTfBatch {
                error: std::ptr::null_mut(),
                program,
                program_len,
                gradient,
                gradient_len,
                batched_outputs,
                outputs,
            }
        }
        Ok(Err(message)) => error_batch(&message),
        Err(_) => error_batch("internal error in ovl-tf-bridge: batching the program panicked"),
    };
    Box::into_raw(Box::new(batch))
}

/// Frees a result of [`ovl_tf_batch_program`] (null: nothing).
///
/// # Safety
/// `batch` comes from [`ovl_tf_batch_program`] and is freed once.
#[no_mangle]
pub unsafe extern "C" fn ovl_tf_free_batch(batch: *mut OvlTfBatch) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if batch.is_null() {
            return;
        }
        // SAFETY: made by Box::into_raw in `ovl_tf_batch_program`, freed once; its buffers
        // were made by `leak` and CString::into_raw.
        unsafe {
            let b = Box::from_raw(batch);
            if !b.error.is_null() {
                drop(CString::from_raw(b.error));
            }
            free(b.program, b.program_len);
            free(b.gradient, b.gradient_len);
            free(b.batched_outputs, b.outputs);
        }
    }));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn call(program: &[u8], gradient: &[u8], mask: &[u8], n: u64) -> *mut OvlTfBatch {
        // SAFETY: the slices are live for the call.
        unsafe {
            ovl_tf_batch_program(
                program.as_ptr(),
                program.len(),
                gradient.as_ptr(),
                gradient.len(),
                mask.as_ptr(),
                mask.len(),
                n,
            )
        }
    }

    #[test]
    fn bad_bytes_are_an_error_message_not_a_crash() {
        let batch = call(b"not a program", &[], &[1], 3);
        // SAFETY: a live result, read then freed once.
        unsafe {
            let b = &*batch;
            assert!(b.program.is_null() && b.outputs == 0);
            let message = CStr::from_ptr(b.error).to_string_lossy().into_owned();
            assert!(message.contains("modified or corrupted"), "{message}");
            ovl_tf_free_batch(batch);
            ovl_tf_free_batch(std::ptr::null_mut());
        }
        // SAFETY: a null pointer with a nonzero length is refused before it is read.
        let batch = unsafe {
            ovl_tf_batch_program(
                std::ptr::null(),
                5,
                std::ptr::null(),
                0,
                std::ptr::null(),
                0,
                1,
            )
        };
        // SAFETY: a live result, read then freed once.
        unsafe {
            let message = CStr::from_ptr((*batch).error)
                .to_string_lossy()
                .into_owned();
            assert!(message.contains("null pointer"), "{message}");
            ovl_tf_free_batch(batch);
        }
    }

    #[test]
    fn a_run_time_length_batches_over_a_new_symbol() {
        let x = ovl::placeholder::<f32>("x", &[4]);
        let bundle = ovl::as_tensorflow(&x, ovl_stdlib::tanh(&x))
            .options(&ovl::Options::interpreter())
            .build()
            .unwrap();
        let program = ovl::program::seal_program(&bundle.program);
        let batch = call(&program, &[], &[1], RUN_TIME_LENGTH);
        // SAFETY: a live result, read then freed once.
        unsafe {
            let b = &*batch;
            assert!(b.error.is_null());
            assert_eq!(
                std::slice::from_raw_parts(b.batched_outputs, b.outputs),
                [1]
            );
            let sealed = std::slice::from_raw_parts(b.program, b.program_len);
            let batched = ovl::program::open_program(sealed, "test").unwrap();
            assert_eq!(batched.graph.unwrap().symbols, ["pfor"]);
            let feed = batched.feeds[0].r#type.clone().unwrap();
            assert_eq!((feed.symbolic[0].dim, feed.symbolic[0].symbol), (0, 0));
            ovl_tf_free_batch(batch);
        }
    }
}

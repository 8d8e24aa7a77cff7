//! What the XLA kernel of `DynamicLib` calls (`xla/dynamic_lib_xla.cc`, which `ovl_tf` compiles
//! against TensorFlow's own headers and connects to these functions through `ctypes`).
//!
//! Inside `tf.function(jit_compile=True)`, TensorFlow lowers each `DynamicLib` to an XLA custom
//! call (`ovl_dynamic_lib`, XLA's typed FFI on the host platform). When XLA compiles the cluster,
//! the kernel calls [`ovl_tf_xla_prepare`] with the op's sealed program and its inputs' dtypes
//! and static shapes: the program is loaded (verified, compiled or found in the operator
//! cache), the shapes are checked and bound, and the result is the custom call's attributes:
//! a key (a 64-bit FNV-1a hash of the shapes and the program) and the shapes and sealed program
//! themselves, as hexadecimal text. [`ovl_tf_xla_output`] gives each output's dtype and shape.
//! At run time XLA calls the handler with the attributes and its buffers, and
//! [`ovl_tf_xla_run`] finds the prepared program by its key and its text (the thread's last
//! one, else a cache, `crate::xla_cache`; the key only says where to look, the text is
//! compared, so programs whose keys collide each run their own; an evicted one is prepared
//! again from the text) and runs it on XLA's buffers, on the calling thread unless it is large
//! (as `crate::compute` decides).
//!
//! Every function runs under `catch_unwind` and reports a failure as a message in the caller's
//! buffer and a non-zero result, never a panic.

use crate::compute::parallel_min_work;
use crate::xla_cache::{Entry, Last, PreparedCache};
use ovl::program::{tensorflow_type_name, Binding, LoadedProgram};
use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

/// The first bytes of the opaque bytes of a custom call.
const OPAQUE_HEADER: &[u8] = b"ovl DynamicLib xla v1\n";

/// How many prepared programs the process keeps (least recently used evicted first).
const PREPARED: usize = 64;

/// A program prepared for static shapes.
struct Prepared {
    program: LoadedProgram,
    binding: Binding,
    threads: usize,
}

static CACHE: PreparedCache<Prepared> = PreparedCache::new(
    "DynamicLib programs prepared for XLA",
    PREPARED,
    fnv1a,
    &LAST,
);

thread_local! {
    static LAST: Last<Prepared> = const { RefCell::new(None) };
}

/// Writes `message` into the caller's buffer (cut to fit, NUL-terminated).
///
/// # Safety
/// `error` must be writable for `error_len` bytes (or null).
unsafe fn report(error: *mut c_char, error_len: usize, message: &str) -> c_int {
    if !error.is_null() && error_len > 0 {
        let n = message.len().min(error_len - 1);
        // SAFETY: n + 1 <= error_len bytes are written.
        unsafe {
            std::ptr::copy_nonoverlapping(message.as_ptr(), error.cast::<u8>(), n);
            *error.add(n) = 0;
        }
    }
    1
}

/// The return code of a call whose body ran under `catch_unwind`: 0, or 1 with the failure
/// (or the panic) written into the caller's buffer.
///
/// # Safety
/// As for [`report`].
unsafe fn status(
    result: std::thread::Result<Result<(), String>>,
    error: *mut c_char,
    error_len: usize,
) -> c_int {
    let message = match result {
        Ok(Ok(())) => return 0,
        Ok(Err(message)) => message,
        Err(_) => "internal error in ovl-tf-bridge (a panic)".to_string(),
    };
    // SAFETY: the caller's contract.
    unsafe { report(error, error_len, &message) }
}

fn opaque_of(sealed: &[u8], shapes: &[Vec<usize>]) -> Vec<u8> {
    let mut out = OPAQUE_HEADER.to_vec();
    out.extend_from_slice(&(shapes.len() as u32).to_le_bytes());
    for s in shapes {
        out.extend_from_slice(&(s.len() as u32).to_le_bytes());
        for &d in s {
            out.extend_from_slice(&(d as u64).to_le_bytes());
        }
    }
    out.extend_from_slice(sealed);
    out
}

/// The 64-bit FNV-1a hash of `bytes`: the key of a prepared program.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The shapes and the sealed program of opaque bytes made by [`opaque_of`].
fn parse_opaque(opaque: &[u8]) -> Option<(Vec<Vec<usize>>, &[u8])> {
    let mut rest = opaque.strip_prefix(OPAQUE_HEADER)?;
    let mut take = |n: usize| -> Option<&[u8]> {
        let (head, tail) = rest.split_at_checked(n)?;
        rest = tail;
        Some(head)
    };
    let count = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
    let mut shapes = Vec::with_capacity(count.min(64));
    for _ in 0..count {
        let rank = u32::from_le_bytes(take(4)?.try_into().ok()?) as usize;
        let mut shape = Vec::with_capacity(rank.min(64));
        for _ in 0..rank {
            shape.push(usize::try_from(u64::from_le_bytes(take(8)?.try_into().ok()?)).ok()?);
        }
        shapes.push(shape);
    }
    Some((shapes, rest))
}

/// Loads and binds the program of `opaque` (the slow path: a cache miss).
fn prepare(opaque: &[u8], dtypes: Option<&[c_int]>) -> Result<Prepared, String> {
    let (shapes, sealed) =
        parse_opaque(opaque).ok_or("the custom call's opaque bytes are damaged")?;
    let program =
        LoadedProgram::load(sealed, &ovl::Options::default()).map_err(|e| e.to_string())?;
    if shapes.len() != program.feeds.len() {
        return Err(format!(
            "{} inputs given, program `{}` takes {}",
            shapes.len(),
            program.name,
            program.feeds.len()
        ));
    }
    for (k, shape) in shapes.iter().enumerate() {
        let dtype = program.feeds[k].1.dtype;
        if let Some(dtypes) = dtypes {
            if dtypes[k] != crate::tf::tf_dtype(dtype) {
                return Err(format!(
                    "input {k} (`{}`) has another dtype than the {} program `{}` was exported for",
                    program.feeds[k].0,
                    ovl::program::tensorflow_dtype_name(dtype),
                    program.name
                ));
            }
        }
        program
            .check_feed(k, dtype, shape)
            .map_err(|e| e.to_string())?;
    }
    let slices: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
    let binding = program.bind(&slices).map_err(|e| e.to_string())?;
    let threads = if program.largest_work(&binding) < parallel_min_work() {
        1
    } else {
        0
    };
    Ok(Prepared {
        program,
        binding,
        threads,
    })
}

/// The prepared program of `key` and `text` (the hexadecimal opaque bytes): the thread's last
/// one, else the cache's, else prepared now from `text`.
fn find(key: u64, text: &[u8]) -> Result<Arc<Entry<Prepared>>, String> {
    CACHE.find(key, text, |opaque| prepare(opaque, None))
}

/// Prepares a `DynamicLib` program for inputs of the given dtypes (TensorFlow's enum values) and
/// static shapes (`ranks[k]` dimensions of input `k`, all of them in `dims`, in order), and
/// returns its key in `*key` and the hexadecimal text of its shapes and program in
/// `*text`/`*text_len` (free it with [`ovl_tf_xla_free`]): the custom call's attributes.
/// Returns 0, or non-zero with the reason in `error`.
///
/// # Safety
/// `program` must hold `program_len` bytes, `dtypes` and `ranks` `n_in` entries, `dims` the
/// sum of `ranks` entries; `key`, `text` and `text_len` must be writable; `error` writable
/// for `error_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn ovl_tf_xla_prepare(
    program: *const u8,
    program_len: usize,
    n_in: usize,
    dtypes: *const c_int,
    ranks: *const u32,
    dims: *const i64,
    key: *mut u64,
    text: *mut *mut u8,
    text_len: *mut usize,
    error: *mut c_char,
    error_len: usize,
) -> c_int {
    let result = catch_unwind(AssertUnwindSafe(|| -> Result<(), String> {
        // SAFETY: the caller's contract.
        let (sealed, dtypes, ranks) = unsafe {
            (
                std::slice::from_raw_parts(program, program_len),
                std::slice::from_raw_parts(dtypes, n_in),
                std::slice::from_raw_parts(ranks, n_in),
            )
        };
        let total: usize = ranks.iter().map(|&r| r as usize).sum();
        // SAFETY: the caller's contract.
        let dims = unsafe { std::slice::from_raw_parts(dims, total) };
        let mut shapes = Vec::with_capacity(n_in);
        let mut at = 0;
        for &r in ranks {
            let shape: Vec<usize> = dims[at..at + r as usize]
                .iter()
                .map(|&d| usize::try_from(d).map_err(|_| format!("a dimension is {d}")))
                .collect::<Result<_, _>>()?;
            at += r as usize;
            shapes.push(shape);
        }
        let bytes = opaque_of(sealed, &shapes);
        let prepared = CACHE.insert(&bytes, prepare(&bytes, Some(dtypes))?);
        let boxed = prepared.text.clone();
        // SAFETY: the caller's contract; freed by ovl_tf_xla_free with this length.
        unsafe {
            *key = prepared.key;
            *text_len = boxed.len();
            *text = Box::into_raw(boxed).cast::<u8>();
        }
        Ok(())
    }));
    // SAFETY: the caller's contract.
    unsafe { status(result, error, error_len) }
}

/// Frees the text returned by [`ovl_tf_xla_prepare`].
///
/// # Safety
/// `text` and `text_len` must be what [`ovl_tf_xla_prepare`] returned, freed once.
#[no_mangle]
pub unsafe extern "C" fn ovl_tf_xla_free(text: *mut u8, text_len: usize) {
    if !text.is_null() {
        // SAFETY: made by Box::into_raw of a boxed slice of this length.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(text, text_len)) });
    }
}

/// Output `k` of the program prepared under `key` and `text` (what [`ovl_tf_xla_prepare`]
/// returned): its dtype (TensorFlow's enum value) in `*dtype`, its rank in `*rank` and its
/// dimensions in `dims` (at most `dims_cap`). Returns 0, or non-zero when there is no such
/// output or it does not fit.
///
/// # Safety
/// `text` must hold `text_len` bytes; `dtype` and `rank` must be writable, `dims` for
/// `dims_cap` entries.
#[no_mangle]
pub unsafe extern "C" fn ovl_tf_xla_output(
    key: u64,
    text: *const u8,
    text_len: usize,
    k: usize,
    dtype: *mut c_int,
    rank: *mut u32,
    dims: *mut i64,
    dims_cap: usize,
) -> c_int {
    let result = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the caller's contract.
        let text = unsafe { std::slice::from_raw_parts(text, text_len) };
        let p = find(key, text).ok()?;
        let sig = p.value.binding.outputs.get(k)?;
        if sig.shape.len() > dims_cap {
            return None;
        }
        // SAFETY: the caller's contract; sig.shape.len() <= dims_cap.
        unsafe {
            *dtype = crate::tf::tf_dtype(sig.dtype);
            *rank = sig.shape.len() as u32;
            for (d, &n) in sig.shape.iter().enumerate() {
                *dims.add(d) = n as i64;
            }
        }
        Some(())
    }));
    match result {
        Ok(Some(())) => 0,
        _ => 1,
    }
}

/// Runs the program prepared under `key` (`text`: the hexadecimal text [`ovl_tf_xla_prepare`]
/// returned with it, which prepares it again when it was evicted) on XLA's buffers: `inputs[k]` holds input `k` (of
/// the prepared dtype and shape, row-major), `outputs[k]` receives output `k`. Returns 0, or
/// non-zero with the reason in `error` (an index out of bounds in the program, say).
///
/// # Safety
/// `text` must hold `text_len` bytes; `inputs` and `outputs` must hold one buffer per
/// input and output of the prepared program, of its types, the outputs writable and distinct
/// from every other buffer; `error` writable for `error_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn ovl_tf_xla_run(
    key: u64,
    text: *const u8,
    text_len: usize,
    inputs: *const *const c_void,
    outputs: *const *mut c_void,
    error: *mut c_char,
    error_len: usize,
) -> c_int {
    let result = catch_unwind(AssertUnwindSafe(|| -> Result<(), String> {
        // SAFETY: the caller's contract.
        let text = unsafe { std::slice::from_raw_parts(text, text_len) };
        let p = &find(key, text)?.value;
        // SAFETY: the caller's contract: one buffer per input and output.
        let (ins, outs) = unsafe {
            (
                std::slice::from_raw_parts(inputs, p.program.feeds.len()),
                std::slice::from_raw_parts(outputs, p.program.outputs.len()),
            )
        };
        // SAFETY: XLA's buffers have the prepared types (the custom call's operand and result
        // shapes were made from them), the outputs distinct from the inputs.
        unsafe { p.program.run_bound(&p.binding, ins, outs, p.threads) }.map_err(|e| {
            format!(
                "DynamicLib (XLA) `{}` ({}): {e}",
                p.program.name,
                p.binding
                    .outputs
                    .iter()
                    .map(tensorflow_type_name)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
    }));
    // SAFETY: the caller's contract.
    unsafe { status(result, error, error_len) }
}

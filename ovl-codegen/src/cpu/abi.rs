//! The C ABI between the runtime and a generated library.
//!
//! Every library exports (with C linkage):
//!
//! ```c
//! struct ovl_status {            // the first fault of one call; the caller zeroes it
//!   int32_t code;                // 0: none, 1: index out of bounds, 2: non-positive RANGE step
//!   int32_t expression;          // the READ/WRITE or RANGE expression
//!   int32_t tensor_kind;         // ir::TensorKind: 1 input, 2 output, 3 local
//!   int32_t tensor_index;
//!   int32_t axis;
//!   int32_t index_signed;        // 1: index_bits holds an int64_t, 0: a uint64_t
//!   uint64_t index_bits;
//!   uint64_t size;               // the size of the dimension indexed
//!   int64_t worker;              // row-major flattened index of the faulting worker
//!   int64_t step;                // the RANGE step
//! };
//! // Runs workers [begin, end) of the row-major flattened workgroup. inputs[i] / outputs[i]
//! // point to the contiguous row-major elements of input / output i (bool: 1 byte, 0 or 1),
//! // sized for the symbol values symbols[0 .. ovl_symbol_count()) (proto/ovl.proto, "Symbolic
//! // sizes"; unused, and may be null, when the operator has none). Returns status->code.
//! // Thread-safe: disjoint ranges may run concurrently, each with its own status.
//! int ovl_run(const void* const* inputs, void* const* outputs, const int64_t* symbols,
//!             int64_t begin, int64_t end, ovl_status* status);
//! uint32_t ovl_abi_version(void);      // ABI_VERSION
//! const char* ovl_cache_key(void);     // the cache key the library was compiled for
//! uint32_t ovl_symbol_count(void);     // how many symbol values ovl_run takes
//! // The number of workers for those symbol values; -1 when a workgroup dimension would be
//! // negative or the count exceeds INT64_MAX (the caller checks the values first).
//! int64_t ovl_worker_count(const int64_t* symbols);
//! ```
//!
//! One library serves every symbol value: sizes known when compiling are literals of the
//! generated code, sizes given at run time are computed from `symbols` (worker count, row
//! length, strides, bounds checks, OP_SYMBOL).

pub use crate::shared::fault::Status;
use std::ffi::{c_char, c_void};

/// The version of this ABI; a cached library with another version is recompiled.
pub const ABI_VERSION: u32 = 2;

/// `ovl_run`.
pub type RunFn = unsafe extern "C" fn(
    inputs: *const *const c_void,
    outputs: *const *mut c_void,
    symbols: *const i64,
    begin: i64,
    end: i64,
    status: *mut Status,
) -> i32;

/// `ovl_abi_version`.
pub type AbiVersionFn = unsafe extern "C" fn() -> u32;

/// `ovl_cache_key`.
pub type CacheKeyFn = unsafe extern "C" fn() -> *const c_char;

/// `ovl_worker_count`.
pub type WorkerCountFn = unsafe extern "C" fn(symbols: *const i64) -> i64;

/// `ovl_symbol_count`.
pub type SymbolCountFn = unsafe extern "C" fn() -> u32;

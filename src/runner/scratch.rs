//! The CPU runner's temporaries (the intermediate tensors of a graph), kept between runs on
//! the same thread instead of allocated afresh: a fresh buffer of megabytes costs a page fault
//! per page on its first touch, every run (the LSTM layer at T = 35, B = 20, H = 650 measured
//! about 4 ms of 32 forward and 8 ms of 92 forward + backward in faults; docs/benchmarks.md,
//! "A whole LSTM layer"). A buffer taken back is zeroed unless its operator writes all of it,
//! so a run sees the same values as with fresh zeroed memory.

use ovl_core::{AllocError, DType, HostTensor};
use std::cell::RefCell;

/// The most bytes the pool of one thread keeps between runs.
const MAX_POOLED_BYTES: usize = 1 << 30;

std::thread_local! {
    /// Buffers given back, each with its byte size.
    static POOL: RefCell<Vec<(usize, HostTensor)>> = const { RefCell::new(Vec::new()) };
}

/// A temporary of `dtype` and `shape`: a pooled buffer of the same type and length if there is
/// one (zeroed unless `overwritten`: its operator writes every element), else fresh zeros.
pub(super) fn take(
    dtype: DType,
    shape: &[usize],
    overwritten: bool,
) -> Result<HostTensor, AllocError> {
    let len: Option<usize> = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
    let pooled = len.and_then(|len| {
        POOL.with(|pool| {
            let mut pool = pool.borrow_mut();
            let i = pool
                .iter()
                .position(|(_, t)| t.dtype() == dtype && t.len() == len)?;
            Some(pool.swap_remove(i).1)
        })
    });
    match pooled {
        Some(mut t) => {
            if !overwritten {
                t.fill_zero();
            }
            t.shape = shape.to_vec();
            Ok(t)
        }
        None => HostTensor::try_zeros(dtype, shape),
    }
}

/// Gives a temporary back for later runs (dropped when the pool is full).
pub(super) fn give(t: HostTensor) {
    let bytes = t.len() * t.dtype().size();
    POOL.with(|pool| {
        let mut pool = pool.borrow_mut();
        let held: usize = pool.iter().map(|(b, _)| b).sum();
        if held + bytes <= MAX_POOLED_BYTES {
            pool.push((bytes, t));
        }
    });
}

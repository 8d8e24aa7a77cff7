//! The CPU runner's temporaries (the intermediate tensors of a graph), kept between runs
//! instead of allocated afresh: a fresh buffer of megabytes costs a page fault per page on its
//! first touch, every run (the LSTM layer at T = 35, B = 20, H = 650 measured about 4 ms of 32
//! forward and 8 ms of 92 forward + backward in faults; docs/benchmarks.md, "A whole LSTM
//! layer"). A buffer taken back is zeroed unless its operator writes all of it, so a run sees
//! the same values as with fresh zeroed memory.
//!
//! One pool serves every thread of the process (TensorFlow calls the op from many threads at
//! once; a pool per thread would keep a copy of a graph's temporaries per thread) and keeps at
//! most its capacity in bytes: [`DEFAULT_CAPACITY`], or `OVL_SCRATCH_BYTES` when set to a
//! number, or what [`set_capacity`] (`ovl::set_scratch_capacity`) says; 0 keeps nothing.
//! `ovl::clear_caches` empties it.

use ovl_core::{AllocError, DType, HostTensor};
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};

/// The bytes the pool keeps at most unless `OVL_SCRATCH_BYTES` or [`set_capacity`] says
/// otherwise.
pub const DEFAULT_CAPACITY: usize = 1 << 30;

/// The environment variable that sets the pool's first capacity, in bytes.
pub const CAPACITY_VAR: &str = "OVL_SCRATCH_BYTES";

/// Buffers given back, by element type and length.
struct Pool {
    capacity: usize,
    held: usize,
    free: HashMap<(DType, usize), Vec<HostTensor>>,
}

impl Pool {
    /// Takes buffers out until at most `capacity` bytes are held; the caller drops them
    /// (outside the lock: freeing megabytes unmaps pages).
    fn shrink_to(&mut self, capacity: usize) -> Vec<HostTensor> {
        let mut dropped = Vec::new();
        while self.held > capacity {
            let Some(&key) = self.free.keys().next() else {
                break;
            };
            let list = self.free.get_mut(&key).expect("a key just listed");
            if let Some(t) = list.pop() {
                self.held -= bytes(&t);
                dropped.push(t);
            }
            if list.is_empty() {
                self.free.remove(&key);
            }
        }
        dropped
    }
}

fn pool() -> MutexGuard<'static, Pool> {
    static POOL: OnceLock<Mutex<Pool>> = OnceLock::new();
    POOL.get_or_init(|| {
        Mutex::new(Pool {
            capacity: ovl_core::lru::capacity_from_env(CAPACITY_VAR, DEFAULT_CAPACITY),
            held: 0,
            free: HashMap::new(),
        })
    })
    // A panic while the lock was held left the pool's bookkeeping whole (every change is one
    // statement), so a poisoned lock is used as it is.
    .lock()
    .unwrap_or_else(PoisonError::into_inner)
}

fn bytes(t: &HostTensor) -> usize {
    t.len() * t.dtype().size()
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
        let mut pool = pool();
        let list = pool.free.get_mut(&(dtype, len))?;
        let t = list.pop()?;
        if list.is_empty() {
            pool.free.remove(&(dtype, len));
        }
        pool.held -= bytes(&t);
        Some(t)
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

/// Gives a temporary back for later runs (dropped when the pool would exceed its capacity).
pub(super) fn give(t: HostTensor) {
    let size = bytes(&t);
    let mut pool = pool();
    if pool.held + size <= pool.capacity {
        pool.held += size;
        pool.free.entry((t.dtype(), t.len())).or_default().push(t);
    } else {
        drop(pool);
        drop(t);
    }
}

/// Sets the most bytes the pool keeps (0: none); buffers beyond it are freed now.
pub fn set_capacity(capacity: usize) {
    let dropped = {
        let mut pool = pool();
        pool.capacity = capacity;
        pool.shrink_to(capacity)
    };
    drop(dropped);
}

/// Frees every pooled buffer (the capacity stays).
pub fn clear() {
    let dropped = pool().shrink_to(0);
    drop(dropped);
}

/// The bytes the pool holds now, and its capacity.
pub fn usage() -> (usize, usize) {
    let pool = pool();
    (pool.held, pool.capacity)
}

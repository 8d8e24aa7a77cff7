//! Fault statuses of runs on a caller's stream, read without synchronizing.
//!
//! A kernel that can fault records the first faulting worker of its launch in a status of
//! [`STATUS_BYTES`] bytes (`ovl_cuda_status`: the fault, then a spin lock the writing worker
//! holds). Here the statuses live in host memory mapped into the device's address space
//! (`cuMemHostAlloc` with `CU_MEMHOSTALLOC_DEVICEMAP`), one block per program, device and
//! shapes, allocated once outside any capture: kernels write it directly, replays of a captured
//! graph write the same addresses, and the host reads it whenever it likes, with no copy and no
//! synchronization. A status is sticky: the kernel keeps the earliest worker's fault until the
//! host takes it ([`FaultBlock::take_first`]: read, checked twice, then cleared by a
//! compare-and-swap of its code), so a fault is never overwritten by a later call's success.

use super::device::Gpu;
use super::error::StreamError;
use crate::cuda::operator::{STATUS_BYTES, STATUS_LOCK_OFFSET};
use cudarc::driver::{result, sys};
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};

/// How long the host waits for a worker that is writing a fault (spins of the lock): a write
/// takes microseconds; one still locked after this is taken at the next read instead.
const SPIN_LIMIT: u32 = 1 << 16;

/// One status per kernel slot, in host-mapped memory of one GPU.
pub struct FaultBlock {
    host: *mut u8,
    device: u64,
    slots: usize,
    gpu: &'static Gpu,
}

// SAFETY: the block is plain memory the driver allocated for the process (portable); the host
// touches it only through atomics and volatile reads, and frees it once, on drop.
unsafe impl Send for FaultBlock {}
// SAFETY: as above: shared access is atomic or volatile.
unsafe impl Sync for FaultBlock {}

impl std::fmt::Debug for FaultBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultBlock")
            .field("device", &self.gpu.ordinal)
            .field("slots", &self.slots)
            .finish_non_exhaustive()
    }
}

impl FaultBlock {
    /// Zeroed statuses for `slots` kernels, mapped into `gpu`'s address space. Allocates pinned
    /// memory: never while a stream captures (the caller checks).
    pub(crate) fn new(gpu: &'static Gpu, slots: usize) -> Result<FaultBlock, StreamError> {
        let bytes = slots.max(1) * STATUS_BYTES;
        let err = |action: &str, e: String| StreamError::driver(gpu.ordinal, action, e);
        let _bound = gpu.bind()?;
        let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
        // SAFETY: a plain allocation; the memory is zeroed below before any use.
        let host = unsafe { result::malloc_host(bytes, flags) }.map_err(|e| {
            err(
                "allocating the fault statuses (mapped host memory)",
                e.to_string(),
            )
        })?;
        // SAFETY: `host` holds `bytes` bytes just allocated.
        unsafe { std::ptr::write_bytes(host.cast::<u8>(), 0, bytes) };
        let mut device: sys::CUdeviceptr = 0;
        // SAFETY: a mapped allocation of this context and a valid out-pointer.
        let r = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device, host, 0) };
        if r != sys::CUresult::CUDA_SUCCESS {
            // SAFETY: allocated above, used by nothing yet.
            let _ = unsafe { result::free_host(host) };
            return Err(err("mapping the fault statuses", format!("{r:?}")));
        }
        Ok(FaultBlock {
            host: host.cast(),
            device,
            slots: slots.max(1),
            gpu,
        })
    }

    /// The device address of kernel `k`'s status.
    pub fn slot(&self, k: usize) -> u64 {
        self.device + (k.min(self.slots - 1) * STATUS_BYTES) as u64
    }

    /// The device this block is mapped into.
    pub fn device(&self) -> i32 {
        self.gpu.ordinal
    }

    /// Takes the fault of the lowest slot that holds one, clearing that slot; the others stay
    /// for the next read. `None`: no fault recorded (or one still being written).
    pub fn take_first(&self) -> Option<(usize, [u8; STATUS_BYTES])> {
        (0..self.slots).find_map(|k| {
            // SAFETY: slot `k` of the block: `STATUS_BYTES` bytes, 8-byte aligned (pinned
            // memory is page-aligned), live while `self` is.
            unsafe { take(self.host.add(k * STATUS_BYTES)) }.map(|s| (k, s))
        })
    }
}

impl Drop for FaultBlock {
    fn drop(&mut self) {
        if let Ok(_bound) = self.gpu.bind() {
            // Kernels still queued may write a fault here: the device's work ends first (a
            // program is dropped rarely; an error, e.g. under another thread's capture, frees
            // anyway, as the program's contract allows).
            // SAFETY: the device's context is current.
            let _ = unsafe { sys::cuCtxSynchronize() };
            // SAFETY: allocated by `new`, freed once; the owner outlives the work that writes
            // it (the program's contract).
            let _ = unsafe { result::free_host(self.host.cast()) };
        }
    }
}

/// Reads one status's bytes.
///
/// # Safety
/// `slot` holds `STATUS_BYTES` readable bytes.
unsafe fn read(slot: *const u8) -> [u8; STATUS_BYTES] {
    let mut copy = [0u8; STATUS_BYTES];
    for (i, b) in copy.iter_mut().enumerate() {
        // SAFETY: within the status (the caller's contract); volatile: the device writes it.
        *b = unsafe { slot.add(i).read_volatile() };
    }
    copy
}

/// Takes the fault recorded in one status, if any: waits (briefly) for a writer holding its
/// lock, reads it twice (a writer that started meanwhile changes it: read again), and clears
/// it by swapping its code for 0, so that the kernel's next fault is recorded afresh.
///
/// # Safety
/// `slot` is a status of `STATUS_BYTES` bytes, 4-byte aligned, that only kernels (through the
/// lock) and this function write.
pub(crate) unsafe fn take(slot: *mut u8) -> Option<[u8; STATUS_BYTES]> {
    // SAFETY: the code is the status's first field, an aligned i32 (the caller's contract).
    let code = unsafe { &*(slot as *const AtomicI32) };
    // SAFETY: the lock is an aligned u32 of the status.
    let lock = unsafe { &*(slot.add(STATUS_LOCK_OFFSET) as *const AtomicU32) };
    for _ in 0..4 {
        let c = code.load(Ordering::Acquire);
        if c == 0 {
            return None;
        }
        let mut spins = 0;
        while lock.load(Ordering::Acquire) != 0 {
            spins += 1;
            if spins > SPIN_LIMIT {
                return None;
            }
            std::hint::spin_loop();
        }
        // SAFETY: the status's bytes (the caller's contract).
        let (first, second) = unsafe { (read(slot), read(slot)) };
        if first != second || first[..4] != c.to_ne_bytes() {
            continue;
        }
        if code
            .compare_exchange(c, 0, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            return Some(first);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Statuses in ordinary memory, 8-byte aligned, as the mapped block is.
    fn block(slots: usize) -> Vec<u64> {
        vec![0u64; slots * STATUS_BYTES / 8]
    }

    fn write_fault(mem: &mut [u64], slot: usize, code: i32, worker: i64) {
        let bytes: &mut [u8] = bytemuck_bytes(mem);
        let base = slot * STATUS_BYTES;
        bytes[base..base + 4].copy_from_slice(&code.to_ne_bytes());
        // The worker field's offset does not matter here: any byte after the code.
        bytes[base + 8..base + 16].copy_from_slice(&worker.to_ne_bytes());
    }

    fn bytemuck_bytes(mem: &mut [u64]) -> &mut [u8] {
        // SAFETY: u64s viewed as their bytes, within the same allocation.
        unsafe { std::slice::from_raw_parts_mut(mem.as_mut_ptr().cast(), mem.len() * 8) }
    }

    #[test]
    fn the_status_layout_is_the_preludes() {
        // ovl_cuda_status: the fault (56 bytes), then the lock and padding.
        assert_eq!(STATUS_BYTES, 64);
        assert_eq!(STATUS_LOCK_OFFSET, 56);
    }

    #[test]
    fn a_recorded_fault_is_taken_once_and_the_slot_cleared() {
        let mut mem = block(2);
        write_fault(&mut mem, 1, 1, 7);
        let slot = |mem: &mut Vec<u64>, k: usize| {
            // SAFETY: within the block.
            unsafe { bytemuck_bytes(mem).as_mut_ptr().add(k * STATUS_BYTES) }
        };
        // SAFETY: a status of the block, written only here.
        assert_eq!(unsafe { take(slot(&mut mem, 0)) }, None);
        // SAFETY: as above.
        let got = unsafe { take(slot(&mut mem, 1)) }.expect("the fault");
        assert_eq!(got[..4], 1i32.to_ne_bytes());
        assert_eq!(got[8..16], 7i64.to_ne_bytes());
        // SAFETY: as above.
        assert_eq!(unsafe { take(slot(&mut mem, 1)) }, None, "cleared");
        // A later fault in the same slot is recorded afresh and taken again.
        write_fault(&mut mem, 1, 2, 3);
        // SAFETY: as above.
        let again = unsafe { take(slot(&mut mem, 1)) }.expect("the second fault");
        assert_eq!(again[..4], 2i32.to_ne_bytes());
    }

    #[test]
    fn a_fault_still_being_written_is_left_for_the_next_read() {
        let mut mem = block(1);
        write_fault(&mut mem, 0, 1, 9);
        let bytes = bytemuck_bytes(&mut mem);
        bytes[STATUS_LOCK_OFFSET..STATUS_LOCK_OFFSET + 4].copy_from_slice(&1u32.to_ne_bytes());
        let p = bytes.as_mut_ptr();
        // SAFETY: a status of the block.
        assert_eq!(unsafe { take(p) }, None, "locked: not taken");
        // SAFETY: the lock of that status.
        unsafe { p.add(STATUS_LOCK_OFFSET).cast::<u32>().write(0) };
        // SAFETY: as above.
        assert!(unsafe { take(p) }.is_some(), "unlocked: taken");
    }
}

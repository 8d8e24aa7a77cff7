//! Scratch memory of a run on a caller's stream: the intermediates between a program's kernels
//! and cuBLAS' workspace, stream-ordered on the call's stream, from one of three sources
//! ([`Scratch`]).

use super::error::StreamError;
use cudarc::driver::{result, sys};

/// Device memory from the caller's allocator, stream-ordered on the call's stream: PyTorch's
/// caching allocator (`raw_alloc_with_stream` / `raw_delete`), XLA's scratch allocator, or any
/// other. ovl asks for each intermediate before the first kernel that writes it is queued and
/// gives it back once the last kernel that reads it is queued; the allocator may hand the block
/// to work queued later on the same stream.
///
/// The call's device ordinal and stream handle come with each request, so that one allocator
/// serves every call; the device's primary context is current meanwhile.
pub trait DeviceAllocator: Sync {
    /// `bytes` bytes (more than 0) of GPU `device`, usable by work queued on `stream` from now
    /// on; at least 256-byte aligned.
    fn alloc(&self, device: i32, stream: usize, bytes: usize) -> Result<u64, String>;
    /// Takes back a block [`alloc`](Self::alloc) gave for `device` and `stream`, in stream
    /// order (work already queued may still use it).
    fn free(&self, device: i32, stream: usize, ptr: u64, bytes: usize);
}

/// Where a run on a caller's stream takes its scratch memory from.
#[derive(Clone, Copy, Default)]
pub enum Scratch<'a> {
    /// ovl's stream-ordered allocation: `cuMemAllocAsync` / `cuMemFreeAsync` on the call's
    /// stream (the device's default memory pool). Legal under stream capture, where they
    /// become the graph's memory nodes.
    #[default]
    StreamOrdered,
    /// The caller's allocator.
    Allocator(&'a dyn DeviceAllocator),
    /// One block the caller allocated for the call, at least the binding's `scratch_bytes`
    /// long (XLA's FFI workspace, a `torch.empty` of bytes): intermediates are placed in it
    /// one after the other, and nothing is allocated at all.
    Arena {
        /// Its device address (256-byte aligned).
        ptr: u64,
        /// Its length in bytes.
        bytes: usize,
    },
}

impl std::fmt::Debug for Scratch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scratch::StreamOrdered => f.write_str("StreamOrdered"),
            Scratch::Allocator(_) => f.write_str("Allocator(..)"),
            Scratch::Arena { ptr, bytes } => write!(f, "Arena {{ ptr: {ptr:#x}, bytes: {bytes} }}"),
        }
    }
}

/// The alignment of every scratch block (what `cudaMalloc` gives; vector loads need 16).
pub const SCRATCH_ALIGN: usize = 256;

/// The bytes an arena needs for blocks of `sizes`: each rounded up to [`SCRATCH_ALIGN`] (an
/// empty one takes one unit), placed one after the other.
pub fn arena_bytes(sizes: impl IntoIterator<Item = usize>) -> usize {
    sizes
        .into_iter()
        .map(|b| b.max(1).div_ceil(SCRATCH_ALIGN) * SCRATCH_ALIGN)
        .sum()
}

/// The scratch of one call: a [`Scratch`] bound to the call's device and stream.
pub(crate) struct CallScratch<'a> {
    scratch: Scratch<'a>,
    device: i32,
    stream: usize,
    memory_pools: bool,
    /// Bytes of the arena used so far.
    used: usize,
}

impl<'a> CallScratch<'a> {
    pub(crate) fn new(
        scratch: Scratch<'a>,
        device: i32,
        stream: usize,
        memory_pools: bool,
    ) -> Self {
        CallScratch {
            scratch,
            device,
            stream,
            memory_pools,
            used: 0,
        }
    }

    /// A block of `bytes` bytes for what `what()` names (in an error), usable by work queued
    /// from now on.
    pub(crate) fn alloc(
        &mut self,
        bytes: usize,
        what: &dyn Fn() -> String,
    ) -> Result<u64, StreamError> {
        let bytes = bytes.max(1);
        let fail = |message: String| StreamError::Alloc {
            device: self.device,
            bytes,
            what: what(),
            message,
        };
        match self.scratch {
            Scratch::StreamOrdered => {
                if !self.memory_pools {
                    return Err(fail(
                        "the device has no stream-ordered memory pools (cuMemAllocAsync); pass \
                         the caller's allocator or an arena"
                            .into(),
                    ));
                }
                // SAFETY: a plain stream-ordered allocation on the call's stream (the device's
                // context is current); the block is used only by work queued on that stream.
                unsafe { result::malloc_async(self.stream as sys::CUstream, bytes) }
                    .map_err(|e| fail(e.to_string()))
            }
            Scratch::Allocator(a) => a.alloc(self.device, self.stream, bytes).map_err(fail),
            Scratch::Arena { ptr, bytes: len } => {
                let offset = self.used;
                let end = offset + arena_bytes([bytes]);
                if end > len {
                    return Err(fail(format!(
                        "the arena of {len} bytes is used up ({offset} bytes taken); give at \
                         least the binding's scratch_bytes"
                    )));
                }
                self.used = end;
                Ok(ptr + offset as u64)
            }
        }
    }

    /// Gives a block back, in stream order (work queued so far may still use it).
    pub(crate) fn free(&mut self, ptr: u64, bytes: usize) -> Result<(), StreamError> {
        match self.scratch {
            Scratch::StreamOrdered => {
                // SAFETY: a block `alloc` took on this stream; later work on the stream does
                // not use it, and work queued before still may (the free is stream-ordered).
                unsafe { result::free_async(ptr, self.stream as sys::CUstream) }
                    .map_err(|e| StreamError::driver(self.device, "freeing scratch", e))
            }
            Scratch::Allocator(a) => {
                a.free(self.device, self.stream, ptr, bytes.max(1));
                Ok(())
            }
            // Blocks of an arena are not reused within a call (its size is the sum of all).
            Scratch::Arena { .. } => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn arenas_round_every_block_up_to_the_alignment() {
        assert_eq!(arena_bytes([]), 0);
        assert_eq!(arena_bytes([0]), 256);
        assert_eq!(arena_bytes([1, 256, 257]), 256 + 256 + 512);
    }

    #[test]
    fn an_arena_places_blocks_one_after_the_other_and_refuses_overflow() {
        let mut s = CallScratch::new(
            Scratch::Arena {
                ptr: 4096,
                bytes: 768,
            },
            0,
            0,
            false,
        );
        assert_eq!(s.alloc(10, &|| "a".into()).unwrap(), 4096);
        assert_eq!(s.alloc(300, &|| "b".into()).unwrap(), 4096 + 256);
        s.free(4096, 10).unwrap();
        let e = s.alloc(1, &|| "the third".into()).unwrap_err();
        assert!(e.to_string().contains("the third"), "{e}");
        assert!(e.to_string().contains("768"), "{e}");
    }

    struct Recorder(Mutex<Vec<String>>);

    impl DeviceAllocator for Recorder {
        fn alloc(&self, device: i32, stream: usize, bytes: usize) -> Result<u64, String> {
            let mut log = self.0.lock().unwrap();
            log.push(format!("alloc {bytes} on {device}/{stream:#x}"));
            if bytes > 1000 {
                return Err("too big".into());
            }
            Ok(0x1000 * log.len() as u64)
        }
        fn free(&self, device: i32, stream: usize, ptr: u64, bytes: usize) {
            let what = format!("free {ptr:#x} {bytes} on {device}/{stream:#x}");
            self.0.lock().unwrap().push(what);
        }
    }

    #[test]
    fn the_callers_allocator_gets_every_request_and_its_errors_name_the_block() {
        let a = Recorder(Mutex::new(Vec::new()));
        let mut s = CallScratch::new(Scratch::Allocator(&a), 1, 0x50, true);
        let p = s.alloc(0, &|| "x".into()).unwrap();
        s.free(p, 0).unwrap();
        let e = s
            .alloc(5000, &|| "an intermediate of operator 2".into())
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "could not allocate 5000 bytes of scratch for an intermediate of operator 2 on CUDA \
             device 1: too big"
        );
        assert_eq!(
            *a.0.lock().unwrap(),
            [
                "alloc 1 on 1/0x50",
                "free 0x1000 1 on 1/0x50",
                "alloc 5000 on 1/0x50"
            ]
        );
    }

    #[test]
    fn stream_ordered_scratch_needs_memory_pools() {
        let mut s = CallScratch::new(Scratch::StreamOrdered, 0, 0, false);
        let e = s.alloc(8, &|| "y".into()).unwrap_err();
        assert!(e.to_string().contains("memory pools"), "{e}");
    }
}

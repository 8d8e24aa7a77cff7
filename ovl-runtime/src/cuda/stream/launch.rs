//! Launching a compiled kernel on a caller's stream through the driver API (`cuLaunchKernel`):
//! its grid, and its parameters packed as the generated kernel declares them (one device
//! pointer per input and output, one `int64_t` per symbol value, the status pointer; all 8
//! bytes).

use super::error::StreamError;
use cudarc::driver::{result, sys};
use std::ffi::c_void;

/// The grid for `workers` workers of `workers_per_block` per block of `block` threads: enough
/// blocks to cover them, at most 8 waves of blocks resident on every multiprocessor (the
/// kernel's grid-stride loop covers the rest); as `CudaOperator::run_device` sizes it.
pub(crate) fn grid(workers: u64, workers_per_block: u32, block: u32, multiprocessors: u32) -> u32 {
    let blocks_needed = workers.div_ceil(u64::from(workers_per_block.max(1)));
    let limit = u64::from(multiprocessors.max(1)) * (2048 / u64::from(block.max(1))).max(1) * 8;
    blocks_needed.min(limit).clamp(1, i32::MAX as u64) as u32
}

/// A kernel's parameters: the values, in the kernel's order.
pub(crate) struct KernelArgs {
    values: Vec<u64>,
}

impl KernelArgs {
    /// `inputs`, `outputs` (device addresses), `symbols` (passed as `int64_t`; every value is
    /// at most `i64::MAX`, checked by the workgroup), then `status`.
    pub(crate) fn new(inputs: &[u64], outputs: &[u64], symbols: &[u64], status: u64) -> Self {
        let mut values = Vec::with_capacity(inputs.len() + outputs.len() + symbols.len() + 1);
        values.extend_from_slice(inputs);
        values.extend_from_slice(outputs);
        values.extend(symbols.iter().map(|&v| (v as i64) as u64));
        values.push(status);
        KernelArgs { values }
    }

    /// The values (for tests and messages).
    #[cfg(test)]
    pub(crate) fn values(&self) -> &[u64] {
        &self.values
    }

    /// Queues the kernel on `stream`.
    ///
    /// # Safety
    /// `function` is a live kernel of the current context taking exactly these parameters;
    /// every address is a live block of the type the kernel expects, until the kernel ran;
    /// `stream` is a stream of the current context.
    pub(crate) unsafe fn launch(
        &mut self,
        function: sys::CUfunction,
        grid: u32,
        block: u32,
        stream: usize,
        device: i32,
    ) -> Result<(), StreamError> {
        let mut params: Vec<*mut c_void> = self
            .values
            .iter_mut()
            .map(|v| (v as *mut u64).cast::<c_void>())
            .collect();
        // SAFETY: the caller's contract; `params` points at one 8-byte value per parameter,
        // alive for the call (the driver copies them at launch).
        unsafe {
            result::launch_kernel(
                function,
                (grid, 1, 1),
                (block, 1, 1),
                0,
                stream as sys::CUstream,
                &mut params,
            )
        }
        .map_err(|e| StreamError::driver(device, "launching a kernel", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_inputs_outputs_symbols_then_the_status() {
        let a = KernelArgs::new(&[0x10, 0x20], &[0x30], &[5, 7], 0x99);
        assert_eq!(a.values(), &[0x10, 0x20, 0x30, 5, 7, 0x99]);
        let none = KernelArgs::new(&[], &[0x30], &[], 0);
        assert_eq!(none.values(), &[0x30, 0]);
    }

    #[test]
    fn the_grid_covers_the_workers_up_to_eight_waves() {
        // 1000 workers, 256 per block: 4 blocks.
        assert_eq!(grid(1000, 256, 256, 132), 4);
        // Vector lanes: 4 workers per thread.
        assert_eq!(grid(1000, 1024, 256, 132), 1);
        // Capped at 132 SMs x 8 blocks of 256 x 8 waves.
        assert_eq!(grid(u64::MAX / 2, 256, 256, 132), 132 * 8 * 8);
        // Never an empty grid.
        assert_eq!(grid(0, 256, 256, 1), 1);
    }
}

//! GEMMs on half inputs (f16, bf16) on the CPU: the operands are widened to f32 (exactly),
//! multiplied by the f32 kernels of [`super`] (f32 accumulation, `proto/ovl.proto` "GEMM"), and C
//! is rounded once into the half type. The conversions read and write each operand and C once
//! (O(mk + kn + mn) against the product's O(mnk)), with the `half` crate's slice conversions
//! (F16C's vector instructions for f16).

use super::gemm_sum;
use ovl_core::library::GemmDims;
use ovl_core::DType;
use std::ffi::c_void;

/// `C = Σ_t op(A_t) · op(B_t)` for half dtype `d`: [`gemm_sum`] on the operands widened to f32,
/// C rounded into `d`.
///
/// # Safety
/// As [`super::GemmKernel::run`]: `inputs` holds `2 * dims.terms` buffers of `d` elements (A:
/// `batch * m * k`, B: `batch * k * n` each), `c` one of `batch * m * n`.
pub(crate) unsafe fn gemm_half(
    d: DType,
    dims: &GemmDims,
    inputs: &[*const c_void],
    c: *mut c_void,
    threads: usize,
) {
    let (batch, m, n, k) = (
        dims.batch as usize,
        dims.m as usize,
        dims.n as usize,
        dims.k as usize,
    );
    let widened: Vec<Vec<f32>> = inputs
        .iter()
        .enumerate()
        .map(|(i, &p)| {
            let len = batch * if i % 2 == 0 { m * k } else { k * n };
            // SAFETY: the caller's contract: operand `i` holds `len` elements of 2 bytes.
            let bits = unsafe { std::slice::from_raw_parts(p.cast::<u16>(), len) };
            let mut out = vec![0f32; len];
            ovl_core::half_float::widen_slice(d, bits, &mut out);
            out
        })
        .collect();
    let pointers: Vec<*const c_void> = widened.iter().map(|w| w.as_ptr().cast()).collect();
    let mut c32 = vec![0f32; batch * m * n];
    // SAFETY: the widened operands have the sizes of `dims` in f32; C is a buffer of its own.
    unsafe { gemm_sum::<f32>(dims, &pointers, c32.as_mut_ptr().cast(), threads) };
    // SAFETY: the caller's contract: C holds `batch * m * n` elements of 2 bytes.
    let c = unsafe { std::slice::from_raw_parts_mut(c.cast::<u16>(), c32.len()) };
    ovl_core::half_float::narrow_slice(d, &c32, c);
}

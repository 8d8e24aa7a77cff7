//! `f32` products with few rows (`m <= MAX_ROWS`, the LSTM layer's per-step products: 20 or 64
//! rows against a `[I, 4H]` weight) on CPUs with AVX-512, without packing the large operand.
//!
//! The `gemm` crate packs both operands into its own layout on every call. With 20 rows, packing
//! the `[k, n]` weight costs as much memory traffic as the product itself (it reads the weight
//! and writes a copy that the kernel reads again), and the crate's kernels use AVX2 on stable
//! Rust. Here only the small operand (A, `m x k`) is packed; the weight is streamed once from
//! memory in column strips (`C = A · B`) or row groups (`C = A · Bᵀ`), each strip staying in the
//! core's L2 cache while every block of rows of A passes over it, with the block's results in
//! AVX-512 registers for the whole sum over `k`. Column strips (row groups) are split between
//! the threads. The register blocks of `C = A · B` depend on the number of rows (20 rows: two
//! blocks of 10 x 32 columns), and a B larger than the last-level cache is read in panels of
//! rows, each thread along long runs of its rows, the sums continued in C from panel to panel
//! (the same order over `k`, so the same bits). Successive products with one B walk its strips
//! in alternate directions, so that each starts on the strips the last one read.
//!
//! `C = A · Bᵀ` from 8 rows runs through [`nt_broadcast`] instead: the transpose `Cᵀ = B · Aᵀ`,
//! B's values broadcast against A packed once per call, B read once in sequential row
//! streams. [`gemm_nt`] (dot products over `k`, 16 lanes each) stays for fewer rows, where a
//! block's rows of A stay in L1.

use std::arch::x86_64::*;

mod nn;
pub(super) mod nt_broadcast;

pub(super) use nn::gemm_nn;

/// The most rows of C (or, for `C = A · B`, terms of each sum) these kernels take; larger
/// products go to the `gemm` crate.
pub(super) const MAX_ROWS: usize = ovl_fuse::FusionTarget::CPU.few_rows as usize;

/// Whether this CPU runs the kernels of this module.
pub(super) fn available() -> bool {
    is_x86_feature_detected!("avx512f")
}

/// Rows of A (of C) per register block of `C = A · Bᵀ`.
const NT_ROWS: usize = 4;
/// Rows of B (columns of C) per register block of `C = A · Bᵀ` (4 x 6 = 24 registers).
const NT_COLS: usize = 6;

/// Raw pointers shared by the worker threads of one call (each writes a disjoint part of C).
#[derive(Clone, Copy)]
pub(super) struct Shared {
    pub(super) a: *const f32,
    pub(super) b: *const f32,
    pub(super) c: *mut f32,
}

// SAFETY: the pointers are only dereferenced inside one call, whose contract makes every
// thread's writes disjoint and the inputs unchanged while it runs.
unsafe impl Send for Shared {}
// SAFETY: as for `Send` above.
unsafe impl Sync for Shared {}

// Closures call these (not the fields), so that they capture the whole `Shared` (`Sync`), not
// its raw pointer fields.
impl Shared {
    pub(super) fn a(&self) -> *const f32 {
        self.a
    }
    fn b(&self) -> *const f32 {
        self.b
    }
    pub(super) fn c(&self) -> *mut f32 {
        self.c
    }
}

/// Splits `m` rows into `ceil(m / max)` blocks of nearly equal sizes: `(first row, rows)`.
pub(super) fn row_blocks(m: usize, max: usize) -> Vec<(usize, usize)> {
    let count = m.div_ceil(max);
    let (base, extra) = (m / count, m % count);
    let mut first = 0;
    (0..count)
        .map(|i| {
            let rows = base + usize::from(i < extra);
            let block = (first, rows);
            first += rows;
            block
        })
        .collect()
}

/// Runs `work(task)` for every task in `0..tasks`, on up to `threads` threads of the pool the
/// generated kernels run on (`ovl_codegen::for_each_parallel`: one pool for every kernel).
pub(super) fn for_each_task(tasks: usize, threads: usize, work: impl Fn(usize) + Sync) {
    crate::cpu::pool::for_each_parallel(tasks, threads, &work);
}

/// `C[m, n] = A[m, k] · B[n, k]ᵀ`: C row-major (row stride `n`), A and B row-major with row
/// strides `k`. Requires `m <= MAX_ROWS`, `k > 0` and [`available`].
///
/// # Safety
/// The pointers hold the elements described; C overlaps neither input.
pub(super) unsafe fn gemm_nt(
    (m, n, k): (usize, usize, usize),
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    threads: usize,
) {
    debug_assert!(m <= MAX_ROWS && k > 0 && available());
    let blocks = row_blocks(m, NT_ROWS);
    let shared = Shared { a, b, c };
    let groups = n.div_ceil(NT_COLS);
    for_each_task(groups, threads, |group| {
        let first_col = group * NT_COLS;
        let cols = NT_COLS.min(n - first_col);
        for &(first, rows) in &blocks {
            // SAFETY: the block's rows of A, the group's rows of B and the block's part of C
            // lie inside the buffers; groups are disjoint in C.
            unsafe {
                let ap = shared.a().add(first * k);
                let bp = shared.b().add(first_col * k);
                let cp = shared.c().add(first * n + first_col);
                match rows {
                    1 => nt_block::<1>(k, ap, bp, cols, cp, n),
                    2 => nt_block::<2>(k, ap, bp, cols, cp, n),
                    3 => nt_block::<3>(k, ap, bp, cols, cp, n),
                    _ => nt_block::<4>(k, ap, bp, cols, cp, n),
                }
            }
        }
    });
}

/// One register block of `C = A · Bᵀ`: `R` rows of A by `cols <= NT_COLS` rows of B, each
/// result a sum over `k` in 16 lanes, added across the lanes at the end.
///
/// # Safety
/// `a` holds `R` rows and `b` `cols` rows of `k` values (row stride `k`); `c` rows `0..R`
/// (stride `ldc`) hold `cols` values; AVX-512F is available.
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx512f")]
unsafe fn nt_block<const R: usize>(
    k: usize,
    a: *const f32,
    b: *const f32,
    cols: usize,
    c: *mut f32,
    ldc: usize,
) {
    // Rows of B past `cols` repeat the last one (their sums are computed and dropped).
    let mut brows = [b; NT_COLS];
    for (j, row) in brows.iter_mut().enumerate() {
        // SAFETY: row min(j, cols - 1) of B is inside the buffer.
        *row = unsafe { b.add(j.min(cols - 1) * k) };
    }
    let mut acc = [[_mm512_setzero_ps(); NT_COLS]; R];
    // SAFETY: all loads and stores: inside the rows by the contract; masked-off lanes are not
    // read. (No closures here: every intrinsic inlines into this function.)
    unsafe {
        for offset in (0..k).step_by(16) {
            let mask = if k - offset >= 16 {
                u16::MAX
            } else {
                ((1u32 << (k - offset)) - 1) as u16
            };
            let mut bv = [_mm512_setzero_ps(); NT_COLS];
            for j in 0..NT_COLS {
                bv[j] = _mm512_maskz_loadu_ps(mask, brows[j].add(offset));
            }
            for i in 0..R {
                let av = _mm512_maskz_loadu_ps(mask, a.add(i * k + offset));
                for j in 0..NT_COLS {
                    acc[i][j] = _mm512_fmadd_ps(av, bv[j], acc[i][j]);
                }
            }
        }
        for (i, acc) in acc.iter().enumerate() {
            for (j, sum) in acc.iter().enumerate().take(cols) {
                *c.add(i * ldc + j) = _mm512_reduce_add_ps(*sum);
            }
        }
    }
}

/// Writes the transpose of the 16 x 16 tile at `src` (row stride `lds`) at `dst` (row stride
/// `ldd`): `dst[l][j] = src[j][l]`.
///
/// # Safety
/// Both tiles lie in their buffers; AVX-512F is available.
#[target_feature(enable = "avx512f")]
pub(in crate::gemm) unsafe fn transpose_16(src: *const f32, lds: usize, dst: *mut f32, ldd: usize) {
    // SAFETY: the caller's contract.
    unsafe {
        let r: [__m512; 16] = std::array::from_fn(|j| _mm512_loadu_ps(src.add(j * lds)));
        // Pairs of rows interleaved by elements, then by pairs of elements (within each 128-bit
        // lane), then 128-bit lanes exchanged twice.
        let t: [__m512; 16] = std::array::from_fn(|i| {
            let (p, hi) = (i / 2 * 2, i % 2 == 1);
            if hi {
                _mm512_unpackhi_ps(r[p], r[p + 1])
            } else {
                _mm512_unpacklo_ps(r[p], r[p + 1])
            }
        });
        let u: [__m512; 16] = std::array::from_fn(|i| {
            // Within each group of 4: (t0, t2) lo, (t0, t2) hi, (t1, t3) lo, (t1, t3) hi.
            let g = i / 4 * 4;
            let (x, y) = match i % 4 {
                0 | 1 => (t[g], t[g + 2]),
                _ => (t[g + 1], t[g + 3]),
            };
            let (x, y) = (_mm512_castps_pd(x), _mm512_castps_pd(y));
            _mm512_castpd_ps(if i % 2 == 0 {
                _mm512_unpacklo_pd(x, y)
            } else {
                _mm512_unpackhi_pd(x, y)
            })
        });
        let v: [__m512; 16] = std::array::from_fn(|i| {
            // Groups of 8: (u_i, u_{i+4}) for the first four of each half, lanes 0 and 2 of
            // each, then lanes 1 and 3.
            let g = i / 8 * 8;
            let q = i % 4;
            if i % 8 < 4 {
                _mm512_shuffle_f32x4::<0x88>(u[g + q], u[g + q + 4])
            } else {
                _mm512_shuffle_f32x4::<0xdd>(u[g + q], u[g + q + 4])
            }
        });
        for i in 0..16 {
            let q = i % 8;
            let w = if i < 8 {
                _mm512_shuffle_f32x4::<0x88>(v[q], v[q + 8])
            } else {
                _mm512_shuffle_f32x4::<0xdd>(v[q], v[q + 8])
            };
            _mm512_storeu_ps(dst.add(i * ldd), w);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `op(A) · op(B)` in f64 from row-major A `[m, k]` (or `[k, m]` with `ta`) and B `[k, n]`
    /// (or `[n, k]` with `tb`).
    pub(super) fn reference(
        m: usize,
        n: usize,
        k: usize,
        a: &[f32],
        ta: bool,
        b: &[f32],
        tb: bool,
    ) -> Vec<f64> {
        let mut c = vec![0f64; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k)
                    .map(|l| {
                        let x = if ta { a[l * m + i] } else { a[i * k + l] };
                        let y = if tb { b[j * k + l] } else { b[l * n + j] };
                        f64::from(x) * f64::from(y)
                    })
                    .sum();
            }
        }
        c
    }

    pub(super) fn values(len: usize, seed: f64) -> Vec<f32> {
        (0..len)
            .map(|i| ((i as f64) * 0.37 + seed).sin() as f32)
            .collect()
    }

    pub(super) fn check(c: &[f32], expected: &[f64], k: usize) {
        for (x, e) in c.iter().zip(expected) {
            assert!(
                (f64::from(*x) - e).abs() <= 1e-5 * (k as f64).sqrt() * (1.0 + e.abs())
                    || (x.is_nan() && e.is_nan()),
                "{x} against {e}"
            );
        }
    }

    #[test]
    fn row_blocks_cover_the_rows_in_nearly_equal_parts() {
        assert_eq!(row_blocks(20, 6), vec![(0, 5), (5, 5), (10, 5), (15, 5)]);
        assert_eq!(row_blocks(7, 6), vec![(0, 4), (4, 3)]);
        assert_eq!(row_blocks(1, 4), vec![(0, 1)]);
        assert_eq!(row_blocks(20, 12), vec![(0, 10), (10, 10)]);
        assert_eq!(row_blocks(64, 8).len(), 8);
    }

    /// Odd sizes (partial strips, partial row blocks, a `k` tail), transposed A, one and two
    /// threads, against an f64 reference.
    #[test]
    fn small_row_products_match_the_reference() {
        if !available() {
            eprintln!("DID NOT RUN: this CPU has no AVX-512F");
            return;
        }
        for &(m, n, k) in &[
            (1, 1, 1),
            (5, 17, 3),
            (20, 130, 33),
            (7, 64, 16),
            (64, 71, 129),
            // B's rows 4 KiB apart: each strip copied before the blocks pass over it.
            (20, 1024, 9),
            (13, 2048, 70),
        ] {
            let a = values(m * k, 0.1);
            let b = values(k * n, 0.2);
            for ta in [false, true] {
                for threads in [1, 2] {
                    let mut c = vec![f32::NAN; m * n];
                    let strides = if ta { (1, m) } else { (k, 1) };
                    // SAFETY: the buffers hold the sizes given.
                    unsafe {
                        gemm_nn(
                            (m, n, k),
                            a.as_ptr(),
                            strides,
                            b.as_ptr(),
                            c.as_mut_ptr(),
                            threads,
                        )
                    };
                    check(&c, &reference(m, n, k, &a, ta, &b, false), k);
                }
            }
            for threads in [1, 2].into_iter().filter(|_| m <= MAX_ROWS) {
                let mut c = vec![f32::NAN; m * n];
                // SAFETY: as above, B read as `[n, k]`.
                unsafe { gemm_nt((m, n, k), a.as_ptr(), b.as_ptr(), c.as_mut_ptr(), threads) };
                check(&c, &reference(m, n, k, &a, false, &b, true), k);
            }
        }
    }

    /// `C = A · Bᵀ` through the broadcast kernel: every layout of A's rows (1 to 64), blocks of
    /// B's rows cut short, a `k` tail in every unit size, sums in several chunks, A read
    /// through either strides, one and two threads, against an f64 reference; then NaNs.
    #[test]
    fn broadcast_nt_products_match_the_reference() {
        if !nt_broadcast::available() {
            eprintln!("DID NOT RUN: this CPU has no AVX-512F and DQ");
            return;
        }
        let run = |(m, n, k): (usize, usize, usize), a: &[f32], ta: bool, b: &[f32], threads| {
            let mut c = vec![f32::NAN; m * n];
            let strides = if ta { (1, m) } else { (k, 1) };
            // SAFETY: the buffers hold the sizes given (B read as `[n, k]`).
            unsafe {
                nt_broadcast::gemm_nt_broadcast(
                    (m, n, k),
                    a.as_ptr(),
                    strides,
                    b.as_ptr(),
                    c.as_mut_ptr(),
                    threads,
                )
            };
            c
        };
        let mut shapes = Vec::new();
        for m in [
            1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 20, 24, 31, 32, 33, 47, 50, 56, 60, 64,
        ] {
            for (n, k) in [(1, 1), (13, 3), (37, 17), (29, 70)] {
                shapes.push((m, n, k));
            }
        }
        // Several chunks of the sum (a panel of blocks per task, the last one short); packed A
        // too large to keep between calls; then a smaller one in the kept buffer again.
        shapes.extend([
            (20, 150, 3500),
            (64, 61, 2100),
            (3, 40, 20_000),
            (64, 7, 17_000),
        ]);
        shapes.push((20, 29, 70));
        for (m, n, k) in shapes {
            let a = values(m * k, 0.1);
            let b = values(n * k, 0.2);
            for ta in [false, true] {
                let expected = reference(m, n, k, &a, ta, &b, true);
                for threads in [1, 2] {
                    check(&run((m, n, k), &a, ta, &b, threads), &expected, k);
                }
            }
        }
        // A NaN in A fills its row of C, one in B its column, as in the reference.
        let (m, n, k) = (20, 37, 70);
        let (mut a, mut b) = (values(m * k, 0.1), values(n * k, 0.2));
        a[3 * k + 69] = f32::NAN;
        b[30 * k + 5] = f32::NAN;
        let expected = reference(m, n, k, &a, false, &b, true);
        assert_eq!(expected.iter().filter(|e| e.is_nan()).count(), n + m - 1);
        let c = run((m, n, k), &a, false, &b, 2);
        for (x, e) in c.iter().zip(&expected) {
            assert_eq!(x.is_nan(), e.is_nan(), "{x} against {e}");
        }
        check(&c, &expected, k);
    }
}

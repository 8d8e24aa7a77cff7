//! `f32` products with many rows and long sums (`m` and `k` above `gemm_small::MAX_ROWS`: the
//! LSTM layer's stacked products and its weight gradients) on CPUs with AVX-512, in any layout,
//! and for a sum of products (`C = Σ_t op(A_t) · op(B_t)`, a library call with several terms)
//! without joining the terms' operands into new matrices first.
//!
//! Both operands are packed, as BLAS libraries do: A into blocks of 6 rows, `[k][6]` each (once
//! per call, in parallel), and B, for each strip of 64 columns of C and each chunk of the sum,
//! into a per-thread buffer `[chunk][64]` that stays in the core's L2 cache while every block
//! of rows of A passes over it, with the block's 6 x 64 results in AVX-512 registers for the
//! whole chunk. Packing reads each operand's elements through its strides and the terms'
//! pointers, so a transposed operand or a sum of terms costs one packing pass like any other:
//! where the `gemm` crate's product of terms needed the terms copied side by side first (two
//! more passes over both operands), the terms are read in place here.

use super::small::{available, for_each_task, row_blocks, transpose_16, Shared};
use ovl_ir::isa::CpuIsa;
use std::arch::x86_64::*;

/// Rows of C per register block (6 rows x 64 columns: 24 of the 32 registers).
const ROWS: usize = 6;
/// Columns of C per register block and per strip of B (4 registers of 16 lanes).
const COLS: usize = 64;
/// The most terms of each sum packed at once (a chunk of B's strip, `KC x 64` values, 256 KiB,
/// stays in a core's L2 cache while the blocks of A pass over it).
const KC: usize = 1024;

/// One operand of a product, op(A) `[m, k]` or op(B)ᵀ `[n, k]`, as `terms.len()` matrices
/// joined along `k`: element `(r, l)`, with `l = t * k_term + l'`, lies at
/// `terms[t] + r * strides.0 + l' * strides.1`.
#[derive(Clone, Copy)]
pub(super) struct Operand<'a> {
    pub terms: &'a [*const f32],
    pub strides: (usize, usize),
    pub k_term: usize,
}

// SAFETY: the terms are only read, inside one call whose contract keeps them alive and unchanged.
unsafe impl Sync for Operand<'_> {}

impl Operand<'_> {
    /// The parts of the sum's range `[l0, l1)` inside single terms: (term, first index in the
    /// term, length, offset from `l0`).
    fn segments(
        &self,
        (l0, l1): (usize, usize),
    ) -> impl Iterator<Item = (usize, usize, usize, usize)> {
        let kt = self.k_term;
        let mut l = l0;
        std::iter::from_fn(move || {
            (l < l1).then(|| {
                let (t, start) = (l / kt, l % kt);
                let len = (kt - start).min(l1 - l);
                let segment = (t, start, len, l - l0);
                l += len;
                segment
            })
        })
    }
}

/// Whether [`gemm_packed`] takes a product of these sizes on `threads` threads: AVX-512F
/// (not held to AVX2), many rows and a long sum (else `gemm_small`'s kernels or the `gemm`
/// crate), and enough columns to give every thread work ([`enough_strips`]). Without AVX-512
/// the `gemm` crate takes these products: an AVX2 version of this kernel (6 x 16 blocks in 12
/// registers) ran 10-25% slower than the crate on AVX2 at every such shape of the kernels
/// bench (docs/benchmarks.md, "Held to AVX2"), and was removed.
pub(super) fn applies((m, n, k): (usize, usize, usize), threads: usize, isa: CpuIsa) -> bool {
    use super::small::MAX_ROWS;
    m > MAX_ROWS && k > MAX_ROWS && enough_strips(n, threads) && isa.avx512f()
}

/// Whether C's `n` columns make enough strips (a task each) for `threads` threads to end at
/// about the same time.
pub(super) fn enough_strips(n: usize, threads: usize) -> bool {
    n.div_ceil(COLS) >= 4 * threads.max(1)
}

/// C's `n` columns as strips of whole vectors of 16 (the last one possibly partial), at most
/// 64 columns each, widest first: `(first column, columns)`. Where there are few strips per
/// thread their number is rounded up to a multiple of `threads`, so that the threads end
/// together: in 11 strips of 64 one of two threads took 6 strips' time, in 12 strips of 3 or 4
/// vectors each takes half (`[700, 2600] x [2600, 704]` on 2 threads, Zen 5: 427-433 GFLOP/s
/// in 11 strips, 457-460 in 12).
fn strips(n: usize, threads: usize) -> Vec<(usize, usize)> {
    const LANES: usize = 16;
    let vectors = n.div_ceil(LANES);
    let threads = threads.max(1);
    let mut count = vectors.div_ceil(COLS / LANES);
    if count < 8 * threads {
        count = count.div_ceil(threads) * threads;
    }
    let count = count.min(vectors);
    let (base, extra) = (vectors / count, vectors % count);
    let mut first = 0;
    (0..count)
        .map(|i| {
            let width = LANES * (base + usize::from(i < extra));
            let strip = (first, width.min(n - first));
            first += width;
            strip
        })
        .collect()
}

/// The fewest rows from which `C = A · Bᵀ` with few rows runs faster through [`gemm_packed`]
/// than through `gemm_small::gemm_nt` (B transposed once into the strips, which every block
/// of rows then reads as in `C = A · B`). Measured (f32, 2 threads, the 2-core development
/// machine): 64 x 4096 x 1024 at 161 GFLOP/s against 102, 40 x 2600 x 650 at 135 against 130;
/// 20 x 2600 x 650 at 121 against 141. (Only on CPUs without AVX-512DQ: elsewhere
/// `gemm_small::nt_broadcast` takes these products from 8 rows, faster than either.)
pub(super) const NT_MIN_ROWS: usize = 32;

/// `C[m, n] = op(A) · op(B)`, op(B) given as its transpose `bt` (`[n, k]`: element `(j, l)` is
/// op(B)'s `(l, j)`), C row-major (row stride `n`), on up to `threads` threads. Requires
/// `k > 0`, both operands' `k_term` dividing `k` alike, and AVX-512F ([`available`]).
///
/// # Safety
/// Every term's elements lie in its buffer; C holds `m * n` values and overlaps no operand.
pub(super) unsafe fn gemm_packed(
    (m, n, k): (usize, usize, usize),
    a: Operand<'_>,
    bt: Operand<'_>,
    c: *mut f32,
    threads: usize,
) {
    debug_assert!(k > 0 && available());
    let blocks = row_blocks(m, ROWS);
    // Chunks of the sum of nearly equal lengths, at most KC.
    let chunks = row_blocks(k, KC);
    PACKED_A.with(|packed| {
        let mut packed = packed.borrow_mut();
        if packed.len() < m * k {
            packed.resize(m * k, 0.0);
        }
        let shared = Shared {
            a: packed.as_ptr(),
            b: std::ptr::null(),
            c: packed.as_mut_ptr(),
        };
        // A packed chunk by chunk (`[m][chunk]` each, from offset `first * m`), each chunk
        // block by block (`[chunk][rows]` from offset `first * chunk`), in parallel by blocks.
        for_each_task(blocks.len(), threads, |i| {
            let (first, rows) = blocks[i];
            for &(l0, kc) in &chunks {
                // SAFETY: the block's part of each chunk lies in the buffer (m * k values),
                // disjoint from the other blocks'; the operand's elements by the contract.
                unsafe {
                    let dst = shared.c().add(l0 * m + first * kc);
                    pack_a(a, (first, rows), (l0, l0 + kc), dst);
                }
            }
        });
        let shared = Shared {
            a: packed.as_ptr(),
            b: std::ptr::null(),
            c,
        };
        let strips = strips(n, threads);
        // A task per strip ([`applies`] asks for several per thread).
        for_each_task(strips.len(), threads, |strip| {
            let (first_col, cols) = strips[strip];
            let masks: [u16; 4] = std::array::from_fn(|q| {
                let valid = cols.saturating_sub(16 * q).min(16);
                ((1u32 << valid) - 1) as u16
            });
            STRIP.with(|buffer| {
                let mut buffer = buffer.borrow_mut();
                if buffer.len() < KC * COLS {
                    buffer.resize(KC * COLS, 0.0);
                }
                for (chunk, &(l0, kc)) in chunks.iter().enumerate() {
                    // SAFETY: the strip's columns of op(B) by the contract; the buffer holds
                    // KC x 64 values.
                    unsafe { pack_b(bt, (first_col, cols), (l0, l0 + kc), buffer.as_mut_ptr()) };
                    let bp = buffer.as_ptr();
                    for &(first, rows) in &blocks {
                        // SAFETY: the block's packed A, the packed strip and the block's part
                        // of C lie inside the buffers; strips are disjoint in C.
                        unsafe {
                            let ap = shared.a().add(l0 * m + first * kc);
                            let cp = (shared.c().add(first * n + first_col), n);
                            block_of(rows, cols.div_ceil(16), (kc, ap, bp, cp, masks, chunk > 0));
                        }
                    }
                }
            })
        });
    });
}

/// The arguments of [`block`] after its sizes.
type BlockArgs = (
    usize,
    *const f32,
    *const f32,
    (*mut f32, usize),
    [u16; 4],
    bool,
);

/// [`block`] for `rows` rows (1 to 6) and `vectors` vectors of 16 columns (1 to 4).
///
/// # Safety
/// As [`block`].
unsafe fn block_of(rows: usize, vectors: usize, args: BlockArgs) {
    macro_rules! by_vectors {
        ($r:literal) => {
            match vectors {
                1 => block::<$r, 1>(args),
                2 => block::<$r, 2>(args),
                3 => block::<$r, 3>(args),
                _ => block::<$r, 4>(args),
            }
        };
    }
    // SAFETY: the caller's contract.
    unsafe {
        match rows {
            1 => by_vectors!(1),
            2 => by_vectors!(2),
            3 => by_vectors!(3),
            4 => by_vectors!(4),
            5 => by_vectors!(5),
            _ => by_vectors!(6),
        }
    }
}

std::thread_local! {
    /// The packed A of the calls this thread makes (kept between calls: a fresh buffer of
    /// megabytes costs a page fault per 4 KiB on every call).
    static PACKED_A: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
    /// Each thread's packed chunk of a strip of B.
    static STRIP: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Packs rows `[first, first + rows)` of op(A), sum indices `[l0, l1)`, into `dst` as
/// `[l1 - l0][rows]`.
///
/// # Safety
/// The elements lie in the operand's terms; `dst` holds `(l1 - l0) * rows` values.
unsafe fn pack_a(
    a: Operand<'_>,
    (first, rows): (usize, usize),
    range: (usize, usize),
    dst: *mut f32,
) {
    let (rs, ls) = a.strides;
    for (t, start, len, offset) in a.segments(range) {
        // SAFETY: the caller's contract.
        unsafe {
            let src = a.terms[t].add(first * rs + start * ls);
            let dst = dst.add(offset * rows);
            for l in 0..len {
                for i in 0..rows {
                    *dst.add(l * rows + i) = *src.add(i * rs + l * ls);
                }
            }
        }
    }
}

/// Packs columns `[first, first + cols)` of op(B) (rows of `bt`), sum indices `[l0, l1)`, into
/// `dst` as `[l1 - l0][64]`, columns past `cols` as zeros; a transposed operand through
/// AVX-512 registers.
///
/// # Safety
/// The elements lie in the operand's terms; `dst` holds `(l1 - l0) * 64` values.
unsafe fn pack_b(
    bt: Operand<'_>,
    (first, cols): (usize, usize),
    range: (usize, usize),
    dst: *mut f32,
) {
    let (js, ls) = bt.strides;
    for (t, start, len, offset) in bt.segments(range) {
        // SAFETY: the caller's contract.
        unsafe {
            let src = bt.terms[t].add(first * js + start * ls);
            let dst = dst.add(offset * COLS);
            if js == 1 {
                // op(B) row-major: each row of the strip is contiguous.
                for l in 0..len {
                    std::ptr::copy_nonoverlapping(src.add(l * ls), dst.add(l * COLS), cols);
                    std::ptr::write_bytes(dst.add(l * COLS + cols), 0, COLS - cols);
                }
            } else {
                // Transposed: each column of the strip is contiguous when `ls` is 1, and
                // tiles of 16 x 16 are transposed in registers; the rest (and other strides)
                // element by element, in tiles of 16 sum indices that keep the writes in a few
                // cache lines.
                let tiled = if ls == 1 { len / 16 * 16 } else { 0 };
                let full = cols / 16 * 16;
                // 16 rows of `bt` at a time along the chunk: 16 streams of reads, which the
                // hardware prefetches (64 rows at a time, their cache lines 4 KiB apart when
                // `js` is a multiple of 1024, measured slower).
                for j0 in (0..full).step_by(16) {
                    for l0 in (0..tiled).step_by(16) {
                        transpose_16(src.add(j0 * js + l0), js, dst.add(l0 * COLS + j0), COLS);
                    }
                }
                for l0 in (0..len).step_by(16) {
                    let l1 = (l0 + 16).min(len);
                    let done = if l1 <= tiled { full } else { 0 };
                    for j in done..cols {
                        let column = src.add(j * js);
                        for l in l0..l1 {
                            *dst.add(l * COLS + j) = *column.add(l * ls);
                        }
                    }
                    for l in l0..l1 {
                        std::ptr::write_bytes(dst.add(l * COLS + cols), 0, COLS - cols);
                    }
                }
            }
        }
    }
}

/// One register block: `R` rows by up to `16 V` columns (the lanes in `masks`) of C, over `kc`
/// terms of the sum, added to C's values (`accumulate`) or replacing them.
///
/// # Safety
/// `ap` holds `kc * R` packed values, `bp` `kc * 64`; `c` rows `0..R` (stride `ldc`) hold the
/// masked lanes; AVX-512F is available.
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx512f")]
unsafe fn block<const R: usize, const V: usize>(
    (kc, ap, bp, (c, ldc), masks, accumulate): BlockArgs,
) {
    let mut acc = [[_mm512_setzero_ps(); V]; R];
    // SAFETY: all loads and stores: inside the buffers by the contract; masked-off lanes of C
    // are neither read nor written. (No closures: every intrinsic inlines here.)
    unsafe {
        if accumulate {
            for i in 0..R {
                for q in 0..V {
                    acc[i][q] = _mm512_maskz_loadu_ps(masks[q], c.add(i * ldc + 16 * q));
                }
            }
        }
        for l in 0..kc {
            let row = bp.add(l * COLS);
            let mut bv = [_mm512_setzero_ps(); V];
            for q in 0..V {
                bv[q] = _mm512_loadu_ps(row.add(16 * q));
            }
            for i in 0..R {
                let av = _mm512_set1_ps(*ap.add(l * R + i));
                for q in 0..V {
                    acc[i][q] = _mm512_fmadd_ps(av, bv[q], acc[i][q]);
                }
            }
        }
        for i in 0..R {
            for q in 0..V {
                _mm512_mask_storeu_ps(c.add(i * ldc + 16 * q), masks[q], acc[i][q]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(len: usize, seed: f64) -> Vec<f32> {
        (0..len)
            .map(|i| ((i as f64) * 0.37 + seed).sin() as f32)
            .collect()
    }

    #[test]
    fn tiles_transpose() {
        if !available() {
            eprintln!("DID NOT RUN: this CPU has no AVX-512F");
            return;
        }
        let src = values(16 * 20, 0.3);
        let mut dst = vec![0f32; 16 * 24];
        // SAFETY: a 16 x 16 tile with row stride 20 read, one with row stride 24 written.
        unsafe { transpose_16(src.as_ptr(), 20, dst.as_mut_ptr(), 24) };
        for l in 0..16 {
            for j in 0..16 {
                assert_eq!(dst[l * 24 + j], src[j * 20 + l], "({l}, {j})");
            }
        }
    }

    /// The dispatch: the packed kernel on AVX-512 only (held to AVX2, the `gemm` crate), and
    /// which GEMM epilogue pairs may run.
    #[test]
    fn the_setting_chooses_the_kernel() {
        let avx512 = available();
        assert_eq!(applies((700, 2600, 650), 2, CpuIsa::Native), avx512);
        assert!(!applies((700, 2600, 650), 2, CpuIsa::Avx2), "held to AVX2");
        assert!(!applies((20, 2600, 650), 2, CpuIsa::Native), "few rows");
        // GEMM epilogue pairs: f32 pairs only where the few-row kernels compute the blocks.
        use crate::gemm::Element;
        assert!(!<f32 as Element>::epilogue_rule_holds(CpuIsa::Avx2));
        assert_eq!(
            <f32 as Element>::epilogue_rule_holds(CpuIsa::Native),
            avx512
        );
        assert!(<f64 as Element>::epilogue_rule_holds(CpuIsa::Avx2));
    }

    /// The strips cover C's columns once, in whole vectors of at most 64 columns, and where
    /// each thread gets few their number is a multiple of the threads.
    #[test]
    fn strips_cover_the_columns_and_even_out_the_threads() {
        for (n, threads) in [
            (650, 2),
            (704, 2),
            (640, 2),
            (2600, 2),
            (65, 1),
            (700, 16),
            (33, 4),
        ] {
            let strips = strips(n, threads);
            let mut next = 0;
            for &(first, cols) in &strips {
                assert_eq!(first, next, "n {n}: strips {strips:?}");
                assert!(
                    first % 16 == 0 && cols > 0 && cols <= COLS,
                    "n {n}: {strips:?}"
                );
                next += cols;
            }
            assert_eq!(next, n, "n {n}: {strips:?}");
            let few = n.div_ceil(COLS) < 8 * threads;
            if few && strips.len() >= threads {
                assert_eq!(
                    strips.len() % threads,
                    0,
                    "n {n}, {threads} threads: {strips:?}"
                );
            }
        }
        assert_eq!(strips(704, 2).len(), 12);
        assert_eq!(strips(2600, 2).len(), 41);
    }

    /// Sums of 1 to 3 products in every layout (A and B each row-major or transposed), sizes
    /// that leave partial strips, partial blocks of rows, partial 16 x 16 tiles and several
    /// chunks of the sum, on one and two threads, against an f64 reference.
    #[test]
    fn packed_products_match_the_reference() {
        if !available() {
            eprintln!("DID NOT RUN: this CPU has no AVX-512F");
            return;
        }
        for &(m, n, k, terms) in &[
            (65, 70, 65, 1),
            (70, 200, 100, 1),
            (131, 300, 37, 3),
            (67, 129, 700, 2),
            (100, 64, 2100, 1),
        ] {
            let a: Vec<Vec<f32>> = (0..terms).map(|t| values(m * k, 0.1 + t as f64)).collect();
            let b: Vec<Vec<f32>> = (0..terms).map(|t| values(k * n, 0.2 - t as f64)).collect();
            for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
                // op(A)[i, l] and op(B)[l, j] of term t.
                let a_at = |t: usize, i: usize, l: usize| {
                    f64::from(if ta { a[t][l * m + i] } else { a[t][i * k + l] })
                };
                let b_at = |t: usize, l: usize, j: usize| {
                    f64::from(if tb { b[t][j * k + l] } else { b[t][l * n + j] })
                };
                let a_strides = if ta { (1, m) } else { (k, 1) };
                let bt_strides = if tb { (k, 1) } else { (1, n) };
                let a_ptrs: Vec<*const f32> = a.iter().map(|x| x.as_ptr()).collect();
                let b_ptrs: Vec<*const f32> = b.iter().map(|x| x.as_ptr()).collect();
                for threads in [1, 2] {
                    let mut c = vec![f32::NAN; m * n];
                    let operand = |terms, strides| Operand {
                        terms,
                        strides,
                        k_term: k,
                    };
                    // SAFETY: every term holds the sizes given; C holds m x n values.
                    unsafe {
                        gemm_packed(
                            (m, n, k * terms),
                            operand(&a_ptrs, a_strides),
                            operand(&b_ptrs, bt_strides),
                            c.as_mut_ptr(),
                            threads,
                        )
                    };
                    for i in 0..m {
                        for j in 0..n {
                            let e: f64 = (0..terms)
                                .flat_map(|t| (0..k).map(move |l| (t, l)))
                                .map(|(t, l)| a_at(t, i, l) * b_at(t, l, j))
                                .sum();
                            let x = f64::from(c[i * n + j]);
                            assert!(
                                (x - e).abs() <= 1e-5 * ((k * terms) as f64).sqrt() * (1.0 + e.abs()),
                                "{m}x{n}x{k} ({terms} terms, ta {ta}, tb {tb}) at ({i}, {j}): {x} against {e}"
                            );
                        }
                    }
                }
            }
        }
    }
}

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
//! the threads.
//!
//! `C = A · Bᵀ` from 8 rows runs through [`nt_broadcast`] instead: the transpose `Cᵀ = B · Aᵀ`,
//! B's values broadcast against A packed once per call, B read once in sequential row
//! streams. [`gemm_nt`] (dot products over `k`, 16 lanes each) stays for fewer rows, where a
//! block's rows of A stay in L1.

use std::arch::x86_64::*;

pub(super) mod nt_broadcast;

/// The most rows of C (or, for `C = A · B`, terms of each sum) these kernels take; larger
/// products go to the `gemm` crate.
pub(super) const MAX_ROWS: usize = 64;

/// Whether this CPU runs the kernels of this module.
pub(super) fn available() -> bool {
    is_x86_feature_detected!("avx512f")
}

/// How many rows of B ahead the first block of rows of a strip prefetches (more than a memory
/// latency's worth of steps over `k`: 64 measured 10-25% faster than 16 on Zen 5 where B
/// comes from memory).
const PREFETCH_ROWS: usize = 64;
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
    ovl_codegen::for_each_parallel(tasks, threads, &work);
}

/// `C[m, n] = op(A)[m, k] · B[k, n]`: C row-major (row stride `n`), B row-major (row stride
/// `n`), op(A)'s element `(i, l)` at `a + i * a_rs + l * a_cs`. Requires `k > 0` and
/// [`available`]; fast where `m <= MAX_ROWS` (B streamed once from memory) or
/// `k <= MAX_ROWS` (each strip of B stays in L1 while every block of rows passes over it).
///
/// # Safety
/// The pointers hold the elements described; C overlaps neither input.
pub(super) unsafe fn gemm_nn(
    (m, n, k): (usize, usize, usize),
    a: *const f32,
    a_strides: (usize, usize),
    b: *const f32,
    c: *mut f32,
    threads: usize,
) {
    let plan = NnPlan {
        blocking: NnBlocking::for_rows(m),
        reverse: m <= MAX_ROWS && StripOrder::reverse_for(b),
        large: k * n * std::mem::size_of::<f32>() > last_level_cache(),
    };
    // SAFETY: the caller's contract.
    unsafe { gemm_nn_with(plan, (m, n, k), a, a_strides, b, c, threads) }
}

/// How [`gemm_nn_with`] runs one product.
#[derive(Clone, Copy, Debug)]
struct NnPlan {
    blocking: NnBlocking,
    /// Walk B's strips last to first.
    reverse: bool,
    /// B is larger than the last-level cache: each thread takes one range of strips and
    /// fetches the next strip into L2 while the second block of rows runs over this one.
    large: bool,
}

/// A register block of `C = A · B`: up to `rows` rows by `vectors` x 16 columns.
#[derive(Clone, Copy, Debug, PartialEq)]
struct NnBlocking {
    rows: usize,
    vectors: usize,
}

impl NnBlocking {
    /// The register blocks for `m` rows (Zen 5, two 512-bit FMAs and loads per cycle; measured
    /// in docs/benchmarks.md, "A whole LSTM layer"). Up to 6 rows: one block of 64 columns.
    /// Up to 24 rows: 32 columns by up to 12 rows (20 rows in two blocks of 10: each strip of B
    /// read from L2 twice, not four times as by 6 x 64). More rows: 48 columns by up to 8 rows
    /// (64 rows in 8 blocks of 8: 24 accumulators, 3 loads of B for 24 FMAs per step). Many
    /// rows (a short sum): 6 x 64.
    fn for_rows(m: usize) -> NnBlocking {
        let (rows, vectors) = match m {
            7..=24 => (12, 2),
            25..=MAX_ROWS => (8, 3),
            _ => (6, 4),
        };
        NnBlocking { rows, vectors }
    }
}

/// The order in which successive products with the same B walk its strips. Each call reads
/// all of B; a B larger than the last-level cache, read in the same order every time, leaves
/// the cache holding the strips read last when the next call starts with the first ones, and
/// every strip misses (an LRU-like cache). Walking every other call backwards starts each
/// call on the strips the previous one read last, still in the cache. Only the order of the
/// strips changes: each value of C is the same sum, in the same order over `k`.
struct StripOrder;

impl StripOrder {
    /// Whether this call with B at `b` walks the strips backwards: the opposite of the last
    /// call with the same B among the last few Bs (an LSTM layer's steps alternate one weight
    /// with other products).
    fn reverse_for(b: *const f32) -> bool {
        static LAST: std::sync::Mutex<[(usize, bool); StripOrder::KEPT]> =
            std::sync::Mutex::new([(0, false); StripOrder::KEPT]);
        let mut last = LAST.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        StripOrder::update(&mut last, b as usize)
    }

    /// How many Bs [`StripOrder::reverse_for`] remembers.
    const KEPT: usize = 8;

    /// `last`: (B's address, whether its last call walked backwards), the most recent first.
    /// Returns the order of this call with B at `key` and moves B to the front.
    fn update(last: &mut [(usize, bool); StripOrder::KEPT], key: usize) -> bool {
        let found = last.iter().position(|&(address, _)| address == key);
        let reverse = found.is_some_and(|i| !last[i].1);
        let end = found.unwrap_or(StripOrder::KEPT - 1);
        last.copy_within(0..end, 1);
        last[0] = (key, reverse);
        reverse
    }
}

/// The size of the last-level cache in bytes (CPU 0's L3 from sysfs; 32 MiB where unknown).
fn last_level_cache() -> usize {
    static BYTES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *BYTES.get_or_init(|| {
        let size = std::fs::read_to_string("/sys/devices/system/cpu/cpu0/cache/index3/size");
        size.ok()
            .and_then(|s| {
                let s = s.trim();
                let (digits, unit) = match s.strip_suffix('K') {
                    Some(digits) => (digits, 1 << 10),
                    None => match s.strip_suffix('M') {
                        Some(digits) => (digits, 1 << 20),
                        None => (s, 1),
                    },
                };
                digits.parse::<usize>().ok().map(|v| v * unit)
            })
            .filter(|&bytes| bytes > 0)
            .unwrap_or(32 << 20)
    })
}

/// [`gemm_nn`] as `plan` says.
///
/// # Safety
/// As [`gemm_nn`].
unsafe fn gemm_nn_with(
    plan: NnPlan,
    (m, n, k): (usize, usize, usize),
    a: *const f32,
    (a_rs, a_cs): (usize, usize),
    b: *const f32,
    c: *mut f32,
    threads: usize,
) {
    debug_assert!(k > 0 && available());
    let blocking = plan.blocking;
    let cols_per_strip = 16 * blocking.vectors;
    let blocks = row_blocks(m, blocking.rows);
    // A packed block by block, each `[k][rows]`, so that a step over `k` reads adjacent values.
    let mut packed = vec![0f32; m * k];
    for &(first, rows) in &blocks {
        let block = &mut packed[first * k..(first + rows) * k];
        for l in 0..k {
            for i in 0..rows {
                // SAFETY: (first + i, l) is an element of op(A).
                block[l * rows + i] = unsafe { *a.add((first + i) * a_rs + l * a_cs) };
            }
        }
    }
    let shared = Shared {
        a: packed.as_ptr(),
        b,
        c,
    };
    let strips = n.div_ceil(cols_per_strip);
    let strip_at = |position: usize| {
        if plan.reverse {
            strips - 1 - position
        } else {
            position
        }
    };
    let masks_of = |strip: usize| -> [u16; 4] {
        let cols = cols_per_strip.min(n - strip * cols_per_strip);
        std::array::from_fn(|q| {
            let valid = cols.saturating_sub(16 * q).min(16);
            ((1u32 << valid) - 1) as u16
        })
    };
    // One block of rows by one strip of columns, the strip read at `b` with row stride `ldb`.
    let block = |(first, rows): (usize, usize), strip: usize, b: (*const f32, usize), fetch| {
        let masks = masks_of(strip);
        // SAFETY: the block's packed A, the strip's columns of B and the block's part of C lie
        // inside the buffers (the caller's contract); tasks below are disjoint in C.
        unsafe {
            let ap = shared.a().add(first * k);
            let c = (shared.c().add(first * n + strip * cols_per_strip), n);
            nn_block_of((rows, blocking.vectors), k, ap, b, c, masks, fetch);
        }
    };
    // The strip of B in place (row stride `n`).
    let in_place = |strip: usize| (shared.b().wrapping_add(strip * cols_per_strip), n);
    if m > MAX_ROWS {
        // Many rows (a short sum, B small): a task per block of rows, writing whole rows of C
        // (strips of C's rows would leave cache lines half written).
        for_each_task(blocks.len(), threads, |i| {
            (0..strips).for_each(|strip| block(blocks[i], strip, in_place(strip), Fetch::None))
        });
        return;
    }
    // Few rows: B read once from memory, a strip at a time, then from L2 for the other blocks
    // of rows. The first block prefetches the strip's rows ahead: each row of a strip lies in
    // another page, where the hardware's prefetcher stops.
    //
    // B's rows a multiple of 4 KiB apart fall into a few sets of the caches, which then hold
    // a small part of a strip: every block of rows would read it from memory again (149
    // GFLOP/s at [64, 1024] x [1024, 4096] against 208 at [20, 650] x [650, 2600], Zen 4; with
    // the copy 178-191). There the first block copies the strip into a contiguous buffer as it
    // reads it, and the other blocks read the copy (copying where the rows are not aliased
    // measured 11% slower at [20, 650] x [650, 2600]).
    let aliased = (n * std::mem::size_of::<f32>()).is_multiple_of(4096);
    let copy = blocks.len() > 1 && aliased;
    // Where B is larger than the last-level cache, the first block waits on memory. Each thread
    // then takes one range of consecutive strips, and its second block of rows fetches the next
    // strip into L2 as it runs: the first block reads it from there.
    let next_ahead = plan.large && blocks.len() > 1;
    let ranges = if next_ahead {
        row_blocks(strips, strips.div_ceil(threads.max(1)))
    } else {
        (0..strips).map(|position| (position, 1)).collect()
    };
    for_each_task(ranges.len(), threads, |task| {
        let (start, count) = ranges[task];
        for position in start..start + count {
            let strip = strip_at(position);
            let next = (next_ahead && position + 1 < start + count)
                .then(|| in_place(strip_at(position + 1)));
            let run = |buffer: Option<*mut f32>| {
                for (i, &rows) in blocks.iter().enumerate() {
                    let fetch = match (i, next) {
                        (0, _) => Fetch::Ahead(buffer),
                        (1, Some(next)) => Fetch::Next(next),
                        _ => Fetch::None,
                    };
                    match buffer {
                        Some(copy) if i > 0 => block(rows, strip, (copy, cols_per_strip), fetch),
                        _ => block(rows, strip, in_place(strip), fetch),
                    }
                }
            };
            if copy {
                STRIP.with(|buffer| {
                    let mut buffer = buffer.borrow_mut();
                    buffer.resize(k * cols_per_strip, 0.0);
                    run(Some(buffer.as_mut_ptr()));
                })
            } else {
                run(None)
            }
        }
    });
}

/// What a register block of `C = A · B` fetches besides its strip of B.
#[derive(Clone, Copy)]
enum Fetch {
    None,
    /// Rows of the strip `PREFETCH_ROWS` ahead into L1; each row also stored into the buffer,
    /// if any (row stride the strip's width, lanes outside the strip as zeros).
    Ahead(Option<*mut f32>),
    /// Row `l` of the strip at this address and row stride into L2 at step `l`.
    Next((*const f32, usize)),
}

/// Runs [`nn_block`] for `rows` rows and `vectors` registers per row.
///
/// # Safety
/// As [`nn_block`]; `(rows, vectors)` within one of [`NnBlocking::for_rows`]'s blocks.
unsafe fn nn_block_of(
    (rows, vectors): (usize, usize),
    k: usize,
    ap: *const f32,
    b: (*const f32, usize),
    c: (*mut f32, usize),
    masks: [u16; 4],
    fetch: Fetch,
) {
    macro_rules! dispatch {
        ($( $q:literal: [$($r:literal),*] ),*) => {
            match (vectors, rows) {
                $($( ($q, $r) => nn_block::<$r, $q>(k, ap, b, c, masks, fetch), )*)*
                _ => unreachable!("no register block of {rows} x {vectors}"),
            }
        };
    }
    // SAFETY: the caller's contract.
    unsafe {
        dispatch!(
            2: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12],
            3: [1, 2, 3, 4, 5, 6, 7, 8],
            4: [1, 2, 3, 4, 5, 6]
        )
    }
}

std::thread_local! {
    /// Each thread's copy of the strip of B it works on (see [`gemm_nn`]).
    static STRIP: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// One register block of `C = A · B`: `R` rows by up to `16 Q` columns (the lanes in `masks`).
///
/// # Safety
/// `ap` holds `k * R` packed values; `b` rows `0..k` (stride `ldb`) and `c` rows `0..R`
/// (stride `ldc`) hold the masked lanes; a buffer in `fetch` has room for `k` rows of `16 Q`,
/// an address in `fetch` is one of `k` rows of `16 Q` values; AVX-512F is available.
// Indexed loops over the register arrays: fixed trip counts the compiler unrolls into registers.
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx512f")]
unsafe fn nn_block<const R: usize, const Q: usize>(
    k: usize,
    ap: *const f32,
    (b, ldb): (*const f32, usize),
    (c, ldc): (*mut f32, usize),
    masks: [u16; 4],
    fetch: Fetch,
) {
    let mut acc = [[_mm512_setzero_ps(); Q]; R];
    let full = masks[..Q].iter().all(|&mask| mask == u16::MAX);
    let (ahead, copy, next) = match fetch {
        Fetch::None => (false, None, None),
        Fetch::Ahead(copy) => (true, copy, None),
        Fetch::Next(next) => (false, None, Some(next)),
    };
    // SAFETY (all loads, stores and prefetches): inside the buffers by the contract;
    // masked-off lanes are neither read nor written. (No closures here: every intrinsic inlines
    // into this function.)
    unsafe {
        for l in 0..k {
            let row = b.add(l * ldb);
            if ahead && l + PREFETCH_ROWS < k {
                let ahead = row.add(PREFETCH_ROWS * ldb).cast::<i8>();
                for q in 0..Q {
                    _mm_prefetch::<_MM_HINT_T0>(ahead.add(64 * q));
                }
            }
            if let Some((next, ld)) = next {
                let line = next.add(l * ld).cast::<i8>();
                for q in 0..Q {
                    _mm_prefetch::<_MM_HINT_T1>(line.add(64 * q));
                }
            }
            let mut bv = [_mm512_setzero_ps(); Q];
            if full {
                for q in 0..Q {
                    bv[q] = _mm512_loadu_ps(row.add(16 * q));
                }
            } else {
                for q in 0..Q {
                    bv[q] = _mm512_maskz_loadu_ps(masks[q], row.add(16 * q));
                }
            }
            if let Some(copy) = copy {
                for q in 0..Q {
                    _mm512_storeu_ps(copy.add(l * 16 * Q + 16 * q), bv[q]);
                }
            }
            for i in 0..R {
                let av = _mm512_set1_ps(*ap.add(l * R + i));
                for q in 0..Q {
                    acc[i][q] = _mm512_fmadd_ps(av, bv[q], acc[i][q]);
                }
            }
        }
        for (i, acc) in acc.iter().enumerate() {
            for q in 0..Q {
                _mm512_mask_storeu_ps(c.add(i * ldc + 16 * q), masks[q], acc[q]);
            }
        }
    }
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
    // SAFETY (all loads and stores): inside the rows by the contract; masked-off lanes are not
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `op(A) · op(B)` in f64 from row-major A `[m, k]` (or `[k, m]` with `ta`) and B `[k, n]`
    /// (or `[n, k]` with `tb`).
    fn reference(
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

    fn values(len: usize, seed: f64) -> Vec<f32> {
        (0..len)
            .map(|i| ((i as f64) * 0.37 + seed).sin() as f32)
            .collect()
    }

    fn check(c: &[f32], expected: &[f64], k: usize) {
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

    /// `C = A · B` with every register blocking [`NnBlocking::for_rows`] picks (1 to 64 rows),
    /// strips cut short, `k` odd and 1, B's rows 4 KiB apart (the copied strip), strips walked
    /// either way, with and without the next strip fetched ahead, one and two threads: every
    /// variant against an f64 reference and bit-identical to the others (each value of C is the
    /// same sum in the same order); then [`gemm_nn`] called twice (the order of the strips
    /// alternating) gives the same bits.
    #[test]
    fn nn_plans_match_the_reference_and_each_other() {
        if !available() {
            eprintln!("DID NOT RUN: this CPU has no AVX-512F");
            return;
        }
        let ms = [1, 2, 5, 6, 7, 10, 12, 13, 20, 24, 25, 33, 47, 64];
        for m in ms {
            for (n, k) in [(1, 1), (37, 1), (70, 3), (130, 33), (1024, 9), (100, 150)] {
                let a = values(m * k, 0.1);
                let b = values(k * n, 0.2);
                let expected = reference(m, n, k, &a, false, &b, false);
                let mut first: Option<Vec<f32>> = None;
                for (reverse, large, threads) in (0..8).map(|i| (i & 1 != 0, i & 2 != 0, 1 + i / 4))
                {
                    let plan = NnPlan {
                        blocking: NnBlocking::for_rows(m),
                        reverse,
                        large,
                    };
                    let mut c = vec![f32::NAN; m * n];
                    // SAFETY: the buffers hold the sizes given.
                    unsafe {
                        gemm_nn_with(
                            plan,
                            (m, n, k),
                            a.as_ptr(),
                            (k, 1),
                            b.as_ptr(),
                            c.as_mut_ptr(),
                            threads,
                        )
                    };
                    check(&c, &expected, k);
                    let first = first.get_or_insert_with(|| c.clone());
                    let same = first
                        .iter()
                        .zip(&c)
                        .all(|(x, y)| x.to_bits() == y.to_bits());
                    assert!(same, "{m} x {n} x {k}: {plan:?}, {threads} threads");
                }
            }
        }
        // Through `gemm_nn`, B larger than the last-level cache where that is at most 64 MiB.
        let (m, k) = (20, 301);
        let n = (last_level_cache() / 4 / k + 100).min((64 << 20) / 4 / k);
        let a = values(m * k, 0.3);
        let b = values(k * n, 0.4);
        let run = || {
            let mut c = vec![f32::NAN; m * n];
            // SAFETY: the buffers hold the sizes given.
            unsafe { gemm_nn((m, n, k), a.as_ptr(), (k, 1), b.as_ptr(), c.as_mut_ptr(), 2) };
            c
        };
        let (once, twice) = (run(), run());
        assert!(once
            .iter()
            .zip(&twice)
            .all(|(x, y)| x.to_bits() == y.to_bits()));
        for j in [0, 1, n / 2, n - 1] {
            for i in [0, m - 1] {
                let e: f64 = (0..k)
                    .map(|l| f64::from(a[i * k + l]) * f64::from(b[l * n + j]))
                    .sum();
                check(&once[i * n + j..i * n + j + 1], &[e], k);
            }
        }
    }

    /// Each B walks its strips the other way than on its last call, whatever the calls with
    /// other Bs between, as long as it is among the last `KEPT`.
    #[test]
    fn strip_order_alternates_per_operand() {
        let mut last = [(0, false); StripOrder::KEPT];
        let mut order = |key| StripOrder::update(&mut last, key);
        assert!(!order(10));
        assert!(!order(20));
        assert!(order(10));
        assert!(!order(10));
        assert!(order(20));
        for key in 100..100 + StripOrder::KEPT - 1 {
            assert!(!order(key));
        }
        // 20 was used more recently than 10, which is forgotten.
        assert!(!order(20));
        assert!(!order(10));
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

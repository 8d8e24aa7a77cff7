//! `C = A · B` with few rows (see the parent module): A packed by blocks of rows, B streamed in
//! column strips, each block's results in AVX-512 registers. The register blocks depend on the
//! number of rows; a B larger than the last-level cache is read in panels of rows; successive
//! calls with one B walk its strips in alternate directions.

use std::arch::x86_64::*;

use super::{available, for_each_task, row_blocks, Shared, MAX_ROWS};

/// How many rows of B ahead the first block of rows of a strip prefetches (more than a memory
/// latency's worth of steps over `k`; Zen 5: 64 rows measured about 3% faster than 16 at
/// [64, 1024] x [1024, 4096], and 20% with B from memory in strips of the whole depth).
const PREFETCH_ROWS: usize = 64;
/// Rows of B per panel where B is larger than the last-level cache (a strip of 128 x 32 values
/// takes 16 KiB of L1; 64 to 512 measured about the same at [20, 1500] x [1500, 6000], Zen 5).
const PANEL_ROWS: usize = 128;
/// How many strips ahead the first block of rows fetches the panel's rows of B.
const FETCH_STRIPS_AHEAD: usize = 2;

/// `C[m, n] = op(A)[m, k] · B[k, n]`: C row-major (row stride `n`), B row-major (row stride
/// `n`), op(A)'s element `(i, l)` at `a + i * a_rs + l * a_cs`. Requires `k > 0` and
/// [`available`]; fast where `m <= MAX_ROWS` (B streamed once from memory) or
/// `k <= MAX_ROWS` (each strip of B stays in L1 while every block of rows passes over it).
///
/// # Safety
/// The pointers hold the elements described; C overlaps neither input.
pub(in crate::gemm) unsafe fn gemm_nn(
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
        large: k * n * std::mem::size_of::<f32>() > ovl_core::machine::last_level_cache(),
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
    /// B is larger than the last-level cache: read in panels of `PANEL_ROWS` rows (see
    /// [`gemm_nn_with`]).
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
            nn_block_of((rows, blocking.vectors), k, ap, b, c, masks, fetch, false);
        }
    };
    // The strip of B in place (row stride `n`).
    let in_place = |strip: usize| (shared.b().wrapping_add(strip * cols_per_strip), n);
    if m > MAX_ROWS {
        // Many rows (a short sum, B small): a task per block of rows, writing whole rows of C
        // (strips of C's rows would leave cache lines half written).
        for_each_task(blocks.len(), threads, |i| {
            (0..strips).for_each(|strip| block(blocks[i], strip, in_place(strip), Fetch::default()))
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
    // One strip (or its rows `rows`) through every block of rows: the first block reads it in
    // place (and copies it), the others read it from L2 (or the copy). `next`: the strip the
    // first block fetches meanwhile; `sum`: continue the sums in C.
    let strip_through_blocks = |strip: usize,
                                rows: std::ops::Range<usize>,
                                next: Option<(*const f32, usize)>,
                                sum: bool| {
        let (b, ldb) = in_place(strip);
        let run = |buffer: Option<*mut f32>| {
            for (i, &(first, count)) in blocks.iter().enumerate() {
                let fetch = Fetch {
                    ahead: i == 0 && next.is_none(),
                    copy: buffer.filter(|_| i == 0),
                    next: next.filter(|_| i == 0),
                };
                let b = match buffer {
                    Some(copy) if i > 0 => (copy.cast_const(), cols_per_strip),
                    _ => (b.wrapping_add(rows.start * ldb), ldb),
                };
                let masks = masks_of(strip);
                // SAFETY: the block's packed A (its rows `rows` of the sum), the strip's rows
                // `rows` of B and the block's part of C lie inside the buffers (the caller's
                // contract); tasks below are disjoint in C.
                unsafe {
                    let ap = shared.a().add(first * k + rows.start * count);
                    let c = (shared.c().add(first * n + strip * cols_per_strip), n);
                    let shape = (count, blocking.vectors);
                    nn_block_of(shape, rows.len(), ap, b, c, masks, fetch, sum);
                }
            }
        };
        if copy {
            STRIP.with(|buffer| {
                let mut buffer = buffer.borrow_mut();
                buffer.resize(rows.len() * cols_per_strip, 0.0);
                run(Some(buffer.as_mut_ptr()));
            })
        } else {
            run(None)
        }
    };
    if plan.large {
        // B larger than the last-level cache: read from memory once per call whatever the
        // order, in long runs along its rows. Each thread takes one range of strips and walks
        // it a panel of `PANEL_ROWS` rows of B at a time, the sums continued in C from one panel
        // to the next (in the same order over `k` as in one pass). A panel's strip (128 rows of
        // 32 columns, 16 KiB) stays in L1 while every block of rows passes over it; the first
        // block fetches the strip two ahead, so that each row of the thread's range is read
        // from memory in one run of a few KiB while the others compute (by strips of the whole
        // depth, the first block waits on memory: 128 or 256 bytes per row, each in another
        // page).
        // (0 threads: one per core, as for_each_task takes it.)
        let threads = if threads == 0 {
            crate::cpu::pool::cpu_count()
        } else {
            threads
        };
        let ranges = row_blocks(strips, strips.div_ceil(threads));
        for_each_task(ranges.len(), threads, |task| {
            let (start, count) = ranges[task];
            for first_row in (0..k).step_by(PANEL_ROWS) {
                let rows = first_row..k.min(first_row + PANEL_ROWS);
                for position in start..start + count {
                    let next = (position + FETCH_STRIPS_AHEAD < start + count).then(|| {
                        let (b, ldb) = in_place(strip_at(position + FETCH_STRIPS_AHEAD));
                        (b.wrapping_add(first_row * ldb), ldb)
                    });
                    strip_through_blocks(strip_at(position), rows.clone(), next, first_row > 0);
                }
            }
        });
    } else {
        // A task per strip, the whole sum at once.
        for_each_task(strips, threads, |position| {
            strip_through_blocks(strip_at(position), 0..k, None, false)
        });
    }
}

/// What a register block of `C = A · B` fetches and stores besides its strip of B.
#[derive(Clone, Copy, Default)]
struct Fetch {
    /// Fetch the strip's rows `PREFETCH_ROWS` ahead into L1.
    ahead: bool,
    /// Store each row of the strip there (row stride the strip's width, lanes outside the
    /// strip as zeros).
    copy: Option<*mut f32>,
    /// Fetch row `l` of the strip at this address and row stride at step `l`.
    next: Option<(*const f32, usize)>,
}

/// Runs [`nn_block`] for `rows` rows and `vectors` registers per row.
///
/// # Safety
/// As [`nn_block`]; `(rows, vectors)` within one of [`NnBlocking::for_rows`]'s blocks.
#[allow(clippy::too_many_arguments)]
unsafe fn nn_block_of(
    (rows, vectors): (usize, usize),
    k: usize,
    ap: *const f32,
    b: (*const f32, usize),
    c: (*mut f32, usize),
    masks: [u16; 4],
    fetch: Fetch,
    sum: bool,
) {
    macro_rules! dispatch {
        ($( $q:literal: [$($r:literal),*] ),*) => {
            match (vectors, rows) {
                $($( ($q, $r) => nn_block::<$r, $q>(k, ap, b, c, masks, fetch, sum), )*)*
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
/// an address in `fetch` is one of `k` rows of `16 Q` values; AVX-512F is available. `sum`:
/// start from the values in C (a sum continued from earlier rows of B), else from zeros.
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
    sum: bool,
) {
    let mut acc = [[_mm512_setzero_ps(); Q]; R];
    if sum {
        for i in 0..R {
            for q in 0..Q {
                // SAFETY: C's masked lanes are inside the buffer by the contract.
                acc[i][q] = unsafe { _mm512_maskz_loadu_ps(masks[q], c.add(i * ldc + 16 * q)) };
            }
        }
    }
    let full = masks[..Q].iter().all(|&mask| mask == u16::MAX);
    let Fetch { ahead, copy, next } = fetch;
    // SAFETY: all loads, stores and prefetches: inside the buffers by the contract;
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

#[cfg(test)]
mod tests {
    use super::super::tests::{check, reference, values};
    use super::*;

    /// `C = A · B` with every register blocking [`NnBlocking::for_rows`] picks (1 to 64 rows),
    /// strips cut short, `k` odd and 1, B's rows 4 KiB apart (the copied strip), strips walked
    /// either way, B in one pass or in panels (as if larger than the cache), one and two
    /// threads: every
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
            // (k above PANEL_ROWS: sums continued over panels of B, copied where aliased.)
            for (n, k) in [
                (1, 1),
                (37, 1),
                (70, 3),
                (130, 33),
                (1024, 9),
                (100, 261),
                (1024, 131),
            ] {
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
        let n = (ovl_core::machine::last_level_cache() / 4 / k + 100).min((64 << 20) / 4 / k);
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
}

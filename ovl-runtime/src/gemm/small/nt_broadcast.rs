//! `C = A · Bᵀ` with few rows (`m <= MAX_ROWS`) computed as its transpose, `Cᵀ[n, m] =
//! B[n, k] · Aᵀ[k, m]`, by broadcasting B's values against the packed columns of A.
//!
//! The dot-product kernel ([`super::gemm_nt`]) keeps blocks of 4 rows of A by 6 rows of B in
//! registers, each sum in 16 lanes over `k`: every step over `k` loads a vector from each of
//! the 10 rows, and at the LSTM layer's shapes (`dz_t Uᵀ`, `[20, 2600] x [650, 2600]ᵀ`) those
//! rows (10 KB each, 100 KB per block) come from L2, which then limits it. Here A is packed
//! once per call, transposed, its `m` rows in the lanes, and every block of `R` rows of B
//! keeps its `R x m` results in registers for the whole sum: each step over `k` loads the
//! packed column of A (a vector per 16 rows of A, from L2) and broadcasts each block row's
//! value of B into an FMA. B is read once, in `R` sequential streams of 4 bytes per step.
//!
//! Rows of A past a multiple of 16 fill a last vector so that few lanes go unused: up to 8 of
//! them share it with consecutive steps of `k`, `16 / g` rows by `g` steps (`g` = 2, 4, 8 or
//! 16: the fewest rows that hold them), against a broadcast of `g` consecutive values of each
//! row of B, and the `g` lanes of each row of A are added at the end (20 rows: a vector of
//! 16 rows and one of 4 rows by 4 steps, every lane used). 9 to 15 rows take a whole vector,
//! one step per lane.
//!
//! Where packed A is larger than L2 holds alongside B's streams (many rows and a long sum),
//! the sum runs in chunks of `k`, each block's results kept between chunks in memory, and a
//! task takes several blocks of rows of B so that each chunk of packed A is read from L2 by
//! all of them. The results are written transposed into C. Tasks (blocks of rows of B) are
//! split between the threads.
//!
//! Each result of a full vector is one sum in order over `k`, as in the packed kernel
//! (`gemm_large`), and each row of a shared last vector the sum of its `g` partial sums, where
//! the dot-product kernel adds 16 partial sums: up to several times its rounding error on long
//! sums (measured in docs/benchmarks.md, section "A whole LSTM layer").

use super::{for_each_task, transpose_16, Shared, MAX_ROWS};
use std::arch::x86_64::*;

/// Lanes of a vector.
const LANES: usize = 16;

/// The most bytes of packed A one chunk of the sum reads (kept in the core's L2 alongside the
/// streams of B).
const CHUNK_BYTES: usize = 256 * 1024;

/// Blocks of rows of B per task where the sum runs in several chunks.
const PANEL_BLOCKS: usize = 8;

/// The most floats of packed A a calling thread keeps between calls (4 MiB).
const KEEP_FLOATS: usize = 1 << 20;

/// Whether this CPU runs [`gemm_nt_broadcast`].
pub(in crate::gemm) fn available() -> bool {
    super::available() && is_x86_feature_detected!("avx512dq")
}

/// How A's `m` rows lie in the lanes: `full` vectors of 16 rows (one step of `k` each), and,
/// where `group > 0`, a last vector of `16 / group` rows by `group` consecutive steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Layout {
    full: usize,
    group: usize,
}

impl Layout {
    fn of(m: usize) -> Layout {
        let (full, rest) = (m / LANES, m % LANES);
        let group = match rest {
            0 => 0,
            1 => 16,
            2 => 8,
            3..=4 => 4,
            5..=8 => 2,
            _ => {
                return Layout {
                    full: full + 1,
                    group: 0,
                }
            }
        };
        Layout { full, group }
    }

    /// Steps over `k` per unit of packed A.
    fn unit(self) -> usize {
        self.group.max(1)
    }

    /// Vectors of results per row of B.
    fn vectors(self) -> usize {
        self.full + usize::from(self.group > 0)
    }

    /// Floats per unit of packed A: `unit` steps of the full vectors, then the last vector.
    fn unit_len(self) -> usize {
        (self.unit() * self.full + usize::from(self.group > 0)) * LANES
    }
}

/// `C[m, n] = A[m, k] · B[n, k]ᵀ`: C row-major (row stride `n`), A's element `(i, l)` at
/// `a + i * a_rs + l * a_cs`, B row-major with row stride `k`. Requires `m <= MAX_ROWS`,
/// `k > 0` and [`available`].
///
/// # Safety
/// The pointers hold the elements described; C overlaps neither input.
pub(in crate::gemm) unsafe fn gemm_nt_broadcast(
    (m, n, k): (usize, usize, usize),
    a: *const f32,
    (a_rs, a_cs): (usize, usize),
    b: *const f32,
    c: *mut f32,
    threads: usize,
) {
    debug_assert!(m <= MAX_ROWS && m > 0 && k > 0 && available());
    let layout = Layout::of(m);
    let len = k.div_ceil(layout.unit()) * layout.unit_len();
    // Packed A in a buffer kept by the calling thread between calls, up to `KEEP_FLOATS` (a
    // fresh one of hundreds of KB would cost a page fault per page on first touch, every call;
    // a larger A packs in proportion to a larger product).
    PACKED.with(|buffer| {
        let mut own = Vec::new();
        let mut kept = buffer.try_borrow_mut();
        let packed = match kept.as_deref_mut() {
            Ok(kept) if len <= KEEP_FLOATS => kept,
            _ => &mut own,
        };
        packed.resize(len, 0.0);
        // SAFETY: the caller's contract.
        unsafe {
            pack(layout, (m, k), a, (a_rs, a_cs), packed);
            run(layout, (m, n, k), &packed[..len], b, c, threads);
        }
    })
}

std::thread_local! {
    /// Each calling thread's packed A (see [`gemm_nt_broadcast`]).
    static PACKED: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The most result floats one block of rows keeps between chunks: `R x vectors` vectors.
const STATE_LEN: usize = {
    let (mut most, mut vectors) = (0, 1);
    while vectors <= 4 {
        let len = block_rows(vectors) * vectors * LANES;
        if len > most {
            most = len;
        }
        vectors += 1;
    }
    most
};

/// [`gemm_nt_broadcast`] with A packed.
///
/// # Safety
/// As [`gemm_nt_broadcast`]; `packed` is A packed by [`pack`].
unsafe fn run(
    layout: Layout,
    (m, n, k): (usize, usize, usize),
    packed: &[f32],
    b: *const f32,
    c: *mut f32,
    threads: usize,
) {
    let (unit, unit_len) = (layout.unit(), layout.unit_len());
    let units = k.div_ceil(unit);
    let chunk_units = (CHUNK_BYTES / (unit_len * 4)).max(1);
    let chunks = units.div_ceil(chunk_units);
    let rows = block_rows(layout.vectors());
    let blocks = n.div_ceil(rows);
    let panel = if chunks == 1 { 1 } else { PANEL_BLOCKS };
    let tasks = blocks.div_ceil(panel);
    let state_len = rows * layout.vectors() * LANES;
    assert!(state_len <= STATE_LEN);
    let shared = Shared {
        a: packed.as_ptr(),
        b,
        c,
    };
    for_each_task(tasks, threads, |task| {
        let first_block = task * panel;
        let panel_blocks = panel.min(blocks - first_block);
        // Written by each block's first chunk before anything reads it.
        let mut state = [std::mem::MaybeUninit::<f32>::uninit(); PANEL_BLOCKS * STATE_LEN];
        for chunk in 0..chunks {
            let first_unit = chunk * chunk_units;
            let (k0, k1) = (
                first_unit * unit,
                ((first_unit + chunk_units) * unit).min(k),
            );
            for p in 0..panel_blocks {
                let first_row = (first_block + p) * rows;
                let valid = rows.min(n - first_row);
                // SAFETY: the block's rows of B (the last repeated past `valid`) and the
                // chunk's packed A lie inside the buffers; the state is this task's.
                unsafe {
                    let state = state.as_mut_ptr().add(p * state_len).cast::<f32>();
                    let ap = shared.a().add(first_unit * unit_len);
                    let bp = shared.b().add(first_row * k + k0);
                    block(layout, (ap, bp, k, valid), k1 - k0, state, chunk > 0);
                }
            }
        }
        for p in 0..panel_blocks {
            let first_row = (first_block + p) * rows;
            let valid = rows.min(n - first_row);
            // SAFETY: the block's state, written by its chunks above.
            let state = unsafe {
                std::slice::from_raw_parts(state.as_ptr().add(p * state_len).cast(), state_len)
            };
            // SAFETY: columns `first_row..first_row + valid` of C are this task's.
            unsafe { store(layout, m, state, valid, shared.c().add(first_row), n) };
        }
    });
}

/// A packed into `packed` (`ceil(k / unit)` units of `layout`): unit `u` holds, for each of
/// its steps `s`, the full vectors (lane `q` of vector `v`: row `16 v + q`, step
/// `u * unit + s`), then the last vector (lane `q`: row `16 full + q / group`, step
/// `u * unit + q % group`); zeros past `m` and `k`.
///
/// # Safety
/// A holds the `m x k` elements its strides describe.
unsafe fn pack(
    layout: Layout,
    (m, k): (usize, usize),
    a: *const f32,
    (a_rs, a_cs): (usize, usize),
    packed: &mut [f32],
) {
    let (unit, unit_len, full) = (layout.unit(), layout.unit_len(), layout.full);
    // Where A's rows are contiguous, its whole vectors of 16 rows are packed by tiles of 16
    // steps, transposed in registers (the rest element by element).
    let (tiled_rows, tiled_k) = match a_cs {
        1 => (m / LANES * LANES, k / LANES * LANES),
        _ => (0, 0),
    };
    let mut tile = [0f32; LANES * LANES];
    for v in 0..tiled_rows / LANES {
        for l0 in (0..tiled_k).step_by(LANES) {
            // SAFETY: rows 16 v.. 16 v + 16 and steps l0..l0 + 16 are elements of A.
            unsafe { transpose_16(a.add(v * LANES * a_rs + l0), a_rs, tile.as_mut_ptr(), LANES) };
            for (s, step) in tile.chunks_exact(LANES).enumerate() {
                let l = l0 + s;
                let at = (l / unit) * unit_len + (l % unit * full + v) * LANES;
                packed[at..at + LANES].copy_from_slice(step);
            }
        }
    }
    // SAFETY: (i, l) with i < m, l < k is an element of A.
    let at = |i: usize, l: usize| {
        if i < m && l < k {
            // SAFETY: (i, l) with i < m, l < k is an element of A.
            unsafe { *a.add(i * a_rs + l * a_cs) }
        } else {
            0.0
        }
    };
    let group = layout.group;
    for (u, dst) in packed.chunks_exact_mut(unit_len).enumerate() {
        let (steps, last) = dst.split_at_mut(unit * full * LANES);
        for (s, step) in steps.chunks_exact_mut(full.max(1) * LANES).enumerate() {
            let l = u * unit + s;
            let first = if l < tiled_k { tiled_rows } else { 0 };
            for (i, x) in step.iter_mut().enumerate().skip(first) {
                *x = at(i, l);
            }
        }
        // The last vector: `group` consecutive steps of each of its rows.
        let l0 = u * unit;
        for (j, lanes) in last.chunks_exact_mut(group.max(1)).enumerate() {
            let i = full * LANES + j;
            if a_cs == 1 && i < m && l0 + group <= k {
                // SAFETY: steps l0..l0 + group of row i are elements of A.
                let row = unsafe { std::slice::from_raw_parts(a.add(i * a_rs + l0), group) };
                lanes.copy_from_slice(row);
            } else {
                for (s, x) in lanes.iter_mut().enumerate() {
                    *x = at(i, l0 + s);
                }
            }
        }
    }
}

/// One block of rows of B over one chunk of the sum: dispatches on the layout.
///
/// # Safety
/// As [`block_kernel`].
unsafe fn block(
    layout: Layout,
    b: (*const f32, *const f32, usize, usize),
    len: usize,
    state: *mut f32,
    resume: bool,
) {
    macro_rules! dispatch {
        ($(($full:literal, $group:literal)),*) => {
            match (layout.full, layout.group) {
                $(($full, $group) => {
                    const R: usize = block_rows($full + ($group > 0) as usize);
                    // SAFETY: the caller's contract.
                    unsafe { block_kernel::<$full, $group, R>(b, len, state, resume) }
                })*
                _ => unreachable!("no layout {layout:?}"),
            }
        };
    }
    dispatch!(
        (0, 16),
        (0, 8),
        (0, 4),
        (0, 2),
        (1, 0),
        (1, 16),
        (1, 8),
        (1, 4),
        (1, 2),
        (2, 0),
        (2, 16),
        (2, 8),
        (2, 4),
        (2, 2),
        (3, 0),
        (3, 16),
        (3, 8),
        (3, 4),
        (3, 2),
        (4, 0)
    )
}

/// Rows of B per register block with `vectors` vectors of results per row: as many as the
/// 32 registers hold next to A's vectors.
const fn block_rows(vectors: usize) -> usize {
    match vectors {
        1 => 16,
        2 => 12,
        3 => 8,
        _ => 6,
    }
}

/// One block of `R` rows of B by the `len` steps of one chunk: `(ap, b, ldb, valid)`: packed A
/// at the chunk's first unit, B's first row at the chunk's first step (row stride `ldb`, rows
/// past `valid` read as the last valid one). `state`: the block's `R x vectors` result vectors
/// (read first where `resume`), written at the end.
///
/// # Safety
/// `ap` holds `ceil(len / unit)` units; the `valid` rows of B hold `len` values from `b`;
/// `state` holds `R * vectors * 16` floats; AVX-512F and DQ are available.
// Indexed loops over the register arrays: fixed trip counts the compiler unrolls into registers.
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx512f,avx512dq")]
unsafe fn block_kernel<const FULL: usize, const GROUP: usize, const R: usize>(
    (ap, b, ldb, valid): (*const f32, *const f32, usize, usize),
    len: usize,
    state: *mut f32,
    resume: bool,
) {
    let unit = if GROUP == 0 { 1 } else { GROUP };
    let unit_len = (unit * FULL + usize::from(GROUP > 0)) * LANES;
    let vectors = FULL + usize::from(GROUP > 0);
    let mut acc = [[_mm512_setzero_ps(); FULL]; R];
    let mut last = [_mm512_setzero_ps(); R];
    // SAFETY: all loads and stores: inside the buffers by the contract. (No closures here:
    // every intrinsic inlines into this function.)
    unsafe {
        if resume {
            for r in 0..R {
                for v in 0..FULL {
                    acc[r][v] = _mm512_loadu_ps(state.add((r * vectors + v) * LANES));
                }
                if GROUP > 0 {
                    last[r] = _mm512_loadu_ps(state.add((r * vectors + FULL) * LANES));
                }
            }
        }
        let mut rows = [b; R];
        for (r, row) in rows.iter_mut().enumerate() {
            *row = b.add(r.min(valid - 1) * ldb);
        }
        // One unit of packed A at `$ap` against B's rows from `$rows` (each `unit` values).
        macro_rules! unit {
            ($ap:expr, $rows:expr) => {{
                let (ap, rows): (*const f32, [*const f32; R]) = ($ap, $rows);
                for s in 0..unit {
                    let mut av = [_mm512_setzero_ps(); FULL];
                    for v in 0..FULL {
                        av[v] = _mm512_loadu_ps(ap.add((s * FULL + v) * LANES));
                    }
                    for r in 0..R {
                        let bv = _mm512_set1_ps(*rows[r].add(s));
                        for v in 0..FULL {
                            acc[r][v] = _mm512_fmadd_ps(av[v], bv, acc[r][v]);
                        }
                    }
                }
                if GROUP > 0 {
                    let av = _mm512_loadu_ps(ap.add(unit * FULL * LANES));
                    for r in 0..R {
                        let p = rows[r];
                        let bv = match GROUP {
                            16 => _mm512_loadu_ps(p),
                            8 => _mm512_broadcast_f32x8(_mm256_loadu_ps(p)),
                            4 => _mm512_broadcast_f32x4(_mm_loadu_ps(p)),
                            _ => _mm512_castpd_ps(_mm512_set1_pd(p.cast::<f64>().read_unaligned())),
                        };
                        last[r] = _mm512_fmadd_ps(av, bv, last[r]);
                    }
                }
            }};
        }
        let whole = len / unit;
        for u in 0..whole {
            let mut at = rows;
            for row in at.iter_mut() {
                *row = row.add(u * unit);
            }
            unit!(ap.add(u * unit_len), at);
        }
        let rest = len % unit;
        if rest > 0 {
            // The last, partial unit: B's remaining values copied beside zeros (packed A holds
            // zeros there too, and no value of B past the rows is read).
            let mut tail = [[0f32; LANES]; R];
            let mut at = rows;
            for r in 0..R {
                std::ptr::copy_nonoverlapping(
                    rows[r].add(whole * unit),
                    tail[r].as_mut_ptr(),
                    rest,
                );
                at[r] = tail[r].as_ptr();
            }
            unit!(ap.add(whole * unit_len), at);
        }
        for r in 0..R {
            for v in 0..FULL {
                _mm512_storeu_ps(state.add((r * vectors + v) * LANES), acc[r][v]);
            }
            if GROUP > 0 {
                _mm512_storeu_ps(state.add((r * vectors + FULL) * LANES), last[r]);
            }
        }
    }
}

/// Writes a block's results (`state`, as [`block_kernel`] leaves it) into columns
/// `0..valid` of C (at `c`, row stride `ldc`): row `i` of A gives row `i` of C.
///
/// # Safety
/// C's rows `0..m` hold columns `0..valid` at `c`.
unsafe fn store(layout: Layout, m: usize, state: &[f32], valid: usize, c: *mut f32, ldc: usize) {
    let vectors = layout.vectors();
    for i in 0..m {
        for r in 0..valid {
            let row = &state[r * vectors * LANES..(r + 1) * vectors * LANES];
            let x = if i < layout.full * LANES {
                row[i]
            } else {
                let q = i - layout.full * LANES;
                let lanes = &row[layout.full * LANES + q * layout.group..][..layout.group];
                lanes.iter().sum()
            };
            // SAFETY: (i, r) is an element of C's columns here (the caller's contract).
            unsafe { *c.add(i * ldc + r) = x };
        }
    }
}

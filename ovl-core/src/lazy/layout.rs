//! Bringing a user's array of any layout into row-major order, the layout every kernel reads.
//!
//! An array in standard layout is one `memcpy` (or no copy at all when it is moved in). An
//! array whose last axis is its fastest (a sub-block, stepped or reversed rows or columns,
//! broadcast rows) is copied row by row, a `memcpy` per row whose elements are contiguous, rows
//! split over the cores when large.
//! Any other layout (a transpose, Fortran order, permuted axes) is copied by walking the source
//! along its fastest axis and writing the destination along its last: in tiles of
//! [`TILE`] x [`TILE`] elements, each source line read whole and each destination line written
//! whole (4-byte elements: a 16 x 16 tile in AVX-512 registers where the CPU has AVX-512F, its
//! tiles placed so that their lines are aligned cache lines and the partial ones at the edges
//! read and written through masks; else through SSE registers and a small buffer on x86_64, so
//! lines that share a cache set, strides a power of two of 4 KiB, are touched once each), and
//! tiles in groups that keep the pages in the TLB and read each source line as part of a
//! sequential stream. A strided element-by-element copy of a transposed 16 MB matrix touches a
//! new cache line (and a new page) at every element; this one moves whole lines.

use ndarray::{ArrayView, Dimension};

/// The edge of a tile, in elements: 16 f32 are a cache line.
const TILE: usize = 16;

/// A group of tiles: `GROUP_F` rows (along the source's fast axis) by `GROUP_L` columns. The
/// group's source lines lie on at most `GROUP_L` runs of pages and its destination lines on
/// `GROUP_F`, few enough for the TLB, and within a group each source column is read down
/// `GROUP_F` elements as one sequential stream, which the prefetcher follows (sizes measured on
/// a transposed 4096 x 1024 f32 matrix).
const GROUP_F: usize = 512;
const GROUP_L: usize = 128;

/// From this many bytes on, a copy is split over the cores ([`threads_for`]): one core does not
/// reach the memory's bandwidth (on the 2-core development machine a 16 MB copy takes about
/// 1 ms on one core, about 0.6 ms on two), and starting a thread costs tens of microseconds.
const PARALLEL_BYTES: usize = 4 << 20;

/// The threads a copy of `bytes` bytes runs on: 1 below [`PARALLEL_BYTES`], else one per core
/// this process may use (at most 8).
fn threads_for(bytes: usize) -> usize {
    if bytes < PARALLEL_BYTES {
        return 1;
    }
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(8)
}

/// Runs `work(i)` for every `i` in `0..tasks` on `threads` threads (the caller's and scoped
/// ones), each taking the next task until none is left.
fn for_each_task(tasks: usize, threads: usize, work: &(dyn Fn(usize) + Sync)) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    let drain = || loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= tasks {
            break;
        }
        work(i);
    };
    let threads = threads.min(tasks).max(1);
    if threads == 1 {
        drain();
        return;
    }
    std::thread::scope(|s| {
        for _ in 1..threads {
            s.spawn(drain);
        }
        drain();
    });
}

/// A copy of contiguous elements, split over the cores when large.
fn copy_contiguous<T: Copy + Send + Sync>(s: &[T]) -> Vec<T> {
    let threads = threads_for(std::mem::size_of_val(s));
    if threads == 1 {
        return s.to_vec();
    }
    let n = s.len();
    let mut out: Vec<T> = Vec::with_capacity(n);
    // Chunks of 1 MiB or more (whole cache lines), about 4 per thread.
    let chunk = (n.div_ceil(threads * 4)).max((1 << 20) / std::mem::size_of::<T>().max(1));
    let chunk = chunk.div_ceil(16) * 16;
    let dst = SendPtr(out.as_mut_ptr());
    let d = &dst; // the whole wrapper, not its pointer field, goes into the closure
    for_each_task(n.div_ceil(chunk), threads, &|c| {
        let (lo, hi) = (c * chunk, ((c + 1) * chunk).min(n));
        // SAFETY: the chunks are disjoint ranges of `out`'s capacity of `n` elements, each
        // written by one task from the same range of `s`.
        unsafe { std::ptr::copy_nonoverlapping(s.as_ptr().add(lo), d.0.add(lo), hi - lo) };
    });
    // SAFETY: the chunks cover all `n` elements, each written once.
    unsafe { out.set_len(n) };
    out
}

/// A pointer handed to the threads of a copy, which write disjoint parts of its buffer.
struct SendPtr<T>(*mut T);
// SAFETY: the threads that share it write disjoint elements (see the callers), and `T: Copy`
// data moves between threads as bits.
unsafe impl<T: Send> Sync for SendPtr<T> {}

/// The elements of `a` in row-major (standard) order.
pub fn standard_order<T: Copy + Send + Sync, D: Dimension>(a: ArrayView<'_, T, D>) -> Vec<T> {
    if let Some(s) = a.as_slice() {
        return copy_contiguous(s);
    }
    let n = a.len();
    if n == 0 {
        return Vec::new();
    }
    // Axes of length 1 do not change the order: without them, the last axis is one that moves.
    let (shape, strides): (Vec<usize>, Vec<isize>) = a
        .shape()
        .iter()
        .zip(a.strides())
        .filter(|(&d, _)| d != 1)
        .map(|(&d, &s)| (d, s))
        .unzip();
    let Some(last) = shape.len().checked_sub(1) else {
        return a.iter().copied().collect(); // one element
    };
    // The axis the source walks fastest: the smallest nonzero stride (a broadcast axis, stride
    // 0, reads one element again and again wherever it is).
    let fast = (0..shape.len())
        .filter(|&i| strides[i] != 0)
        .min_by_key(|&i| strides[i].unsigned_abs());
    match fast {
        Some(f) if f != last => tiled(a.as_ptr(), &shape, &strides, f),
        // Rows in order (sub-blocks, stepped or reversed rows, broadcast rows, stepped or
        // reversed columns): each row read with its own stride, written contiguously.
        _ => by_rows(a.as_ptr(), &shape, &strides),
    }
}

/// The copy of [`standard_order`] for a source whose last axis is its fastest: row by row
/// (one `memcpy` for a row whose elements are contiguous, else an element at a time along the
/// row's stride), in tasks of whole rows of about 1 MiB split over the cores when large. An
/// element-by-element iterator took 15 times a plain copy of the same bytes for a 16 MB
/// sub-block of a larger matrix.
fn by_rows<T: Copy + Send + Sync>(src: *const T, shape: &[usize], strides: &[isize]) -> Vec<T> {
    let rank = shape.len();
    let (outer, outer_strides) = (&shape[..rank - 1], &strides[..rank - 1]);
    let (len, step) = (shape[rank - 1], strides[rank - 1]);
    let n = outer.iter().product::<usize>() * len;
    let rows = n / len;
    let per_task = ((1usize << 20) / (len * std::mem::size_of::<T>()).max(1)).max(1);
    let mut out: Vec<T> = Vec::with_capacity(n);
    let (src, dst) = (SendConst(src), SendPtr(out.as_mut_ptr()));
    let (src, dst) = (&src, &dst); // the whole wrappers go into the closure
    for_each_task(
        rows.div_ceil(per_task),
        threads_for(n * std::mem::size_of::<T>()),
        &|t| {
            let (r0, r1) = (t * per_task, ((t + 1) * per_task).min(rows));
            // The position of row r0 along the outer axes, then counted up row by row.
            let mut index = vec![0usize; outer.len()];
            let mut rest = r0;
            for k in (0..outer.len()).rev() {
                index[k] = rest % outer[k];
                rest /= outer[k];
            }
            let mut offset: isize = index
                .iter()
                .zip(outer_strides)
                .map(|(&i, &s)| i as isize * s)
                .sum();
            for r in r0..r1 {
                // SAFETY: `offset` is the source offset of a valid index (row r, element 0) and
                // every element of the row is inside the source; the destination row r is
                // inside `out`'s capacity of `n` elements and written by this task alone.
                unsafe {
                    let (from, to) = (src.0.offset(offset), dst.0.add(r * len));
                    if step == 1 {
                        std::ptr::copy_nonoverlapping(from, to, len);
                    } else {
                        for j in 0..len {
                            to.add(j).write(*from.offset(j as isize * step));
                        }
                    }
                }
                for k in (0..outer.len()).rev() {
                    index[k] += 1;
                    offset += outer_strides[k];
                    if index[k] < outer[k] {
                        break;
                    }
                    offset -= outer_strides[k] * outer[k] as isize;
                    index[k] = 0;
                }
            }
        },
    );
    // SAFETY: the tasks cover every row once, each row's `len` elements written.
    unsafe { out.set_len(n) };
    out
}

/// A source pointer handed to the threads of a copy, which only read through it.
struct SendConst<T>(*const T);
// SAFETY: the threads only read the source's elements, which stay unchanged during the copy
// (the caller's view borrows them).
unsafe impl<T: Sync> Sync for SendConst<T> {}

/// One 2-d plane to copy: the source's first element and strides along the fast axis and the
/// last axis; the destination's first element and stride along the fast axis (1 along the last);
/// where its tiles start (see [`Plane::grid`]) and whether they go through AVX-512 registers.
#[derive(Clone, Copy)]
struct Plane<T> {
    src: *const T,
    sf: isize,
    sl: isize,
    dst: *mut T,
    df: usize,
    /// Tile edges lie at positions `≡ phase_f (mod TILE)` along the fast axis and
    /// `≡ phase_l (mod TILE)` along the last.
    phase_f: usize,
    phase_l: usize,
    avx512: bool,
}

impl<T> Plane<T> {
    /// A plane whose tiles start at 0 on both axes.
    fn new(src: *const T, (sf, sl): (isize, isize), dst: *mut T, df: usize) -> Self {
        let mut p = Plane {
            src,
            sf,
            sl,
            dst,
            df,
            phase_f: 0,
            phase_l: 0,
            avx512: false,
        };
        #[cfg(target_arch = "x86_64")]
        if std::mem::size_of::<T>() == 4
            && sf == 1
            && std::arch::is_x86_feature_detected!("avx512f")
        {
            // Through registers, with masked loads and stores for partial tiles, so the tiles
            // can start anywhere: where every source line and every destination line of a
            // whole tile is one aligned cache line (a line straddling two costs both; measured
            // on a transposed 4096 x 1024 f32 matrix: 1.07-1.13 ms with neither side aligned,
            // 0.81-0.86 ms with both). Possible on a side whose lines all share an alignment,
            // its stride a multiple of a cache line.
            p.avx512 = true;
            let phase = |addr: usize, stride: isize| -> usize {
                if (stride * 4).rem_euclid(LINE as isize) != 0 || !addr.is_multiple_of(4) {
                    return 0;
                }
                (LINE - addr % LINE) % LINE / 4
            };
            p.phase_f = phase(src as usize, sl);
            p.phase_l = phase(dst as usize, df as isize);
        }
        p
    }

    /// The first position of the grid of tiles along an axis whose tile edges lie at `phase`
    /// (mod [`TILE`]): one tile before the first edge at or above 0, so that the tile `[0,
    /// phase)` is part of it (an empty tile when `phase` is 0).
    fn grid(phase: usize) -> isize {
        phase as isize - TILE as isize
    }
}

/// A cache line, in bytes.
const LINE: usize = 64;

/// The copy of [`standard_order`] for a source whose fastest axis `f` is not the last.
fn tiled<T: Copy + Send + Sync>(
    src: *const T,
    shape: &[usize],
    strides: &[isize],
    f: usize,
) -> Vec<T> {
    let rank = shape.len();
    let last = rank - 1;
    let n: usize = shape.iter().product();
    // Row-major strides of the destination.
    let mut dst_strides = vec![1usize; rank];
    for i in (0..last).rev() {
        dst_strides[i] = dst_strides[i + 1] * shape[i + 1];
    }
    // Every axis but `f` and the last is walked by an odometer, one 2-d plane per position.
    let outer: Vec<usize> = (0..rank).filter(|&i| i != f && i != last).collect();
    let (nf, nl) = (shape[f], shape[last]);
    let mut out: Vec<T> = Vec::with_capacity(n);
    let dst = out.as_mut_ptr();
    let mut planes = Vec::new();
    let mut index = vec![0usize; outer.len()];
    'planes: loop {
        let src_base: isize = outer
            .iter()
            .zip(&index)
            .map(|(&axis, &i)| i as isize * strides[axis])
            .sum();
        let dst_base: usize = outer
            .iter()
            .zip(&index)
            .map(|(&axis, &i)| i * dst_strides[axis])
            .sum();
        planes.push(Plane::new(
            // SAFETY (both offsets): the position of the odometer is a valid index of the
            // source (with 0 on `f` and the last axis), so the source offset stays inside its
            // allocation, and the destination offset, that index in row-major order, is below
            // `n`, inside `out`'s capacity.
            unsafe { src.offset(src_base) },
            (strides[f], strides[last]),
            unsafe { dst.add(dst_base) },
            dst_strides[f],
        ));
        let mut k = outer.len();
        loop {
            if k == 0 {
                break 'planes;
            }
            k -= 1;
            index[k] += 1;
            if index[k] < shape[outer[k]] {
                break;
            }
            index[k] = 0;
        }
    }
    // One task per plane and group of tiles (rows along the fast axis by columns along the
    // last): tasks write disjoint parts of the destination. A plane's grid starts up to one
    // tile before 0 (its phases), hence one more tile on each axis.
    let (groups_f, groups_l) = ((nf + TILE).div_ceil(GROUP_F), (nl + TILE).div_ceil(GROUP_L));
    let per_plane = groups_f * groups_l;
    let planes = SendPlanes(planes);
    let planes = &planes; // the whole wrapper goes into the closure
    for_each_task(
        planes.0.len() * per_plane,
        threads_for(n * std::mem::size_of::<T>()),
        &|t| {
            let p = &planes.0[t / per_plane];
            let (g, h) = ((t % per_plane) / groups_l, t % groups_l);
            // SAFETY: the group's tiles are clipped to the plane's rows and columns, all inside
            // it (see above); the task's group of this plane is written by it alone.
            unsafe { copy_group(p, (nf, nl), (g, h)) };
        },
    );
    // SAFETY: every one of the `n` elements was written exactly once: the planes cover every
    // position of the axes other than `f` and the last, and each plane's rows and columns are
    // all copied.
    unsafe { out.set_len(n) };
    out
}

/// The planes of a copy, shared by its threads.
struct SendPlanes<T>(Vec<Plane<T>>);
// SAFETY: the threads read the planes' sources and write disjoint rows of their destinations
// (one task per plane and group of rows); `T: Copy` data moves between threads as bits.
unsafe impl<T: Send + Sync> Sync for SendPlanes<T> {}

/// Copies group `(g, h)` of a plane of `nf` x `nl` elements: [`GROUP_F`] positions of its grid
/// along the fast axis by [`GROUP_L`] along the last, clipped to the plane, tile by tile down
/// each run of source lines.
///
/// # Safety
/// The plane's source and destination hold `nf` x `nl` elements.
unsafe fn copy_group<T: Copy>(p: &Plane<T>, (nf, nl): (usize, usize), (g, h): (usize, usize)) {
    let clip = |start: isize, n: usize| -> (usize, usize) {
        let lo = start.max(0) as usize;
        (lo.min(n), ((start + TILE as isize).max(0) as usize).min(n))
    };
    let f_start = Plane::<T>::grid(p.phase_f) + (g * GROUP_F) as isize;
    let l_start = Plane::<T>::grid(p.phase_l) + (h * GROUP_L) as isize;
    for l in (l_start..l_start + GROUP_L as isize).step_by(TILE) {
        let (l0, l1) = clip(l, nl);
        if l0 == l1 {
            continue;
        }
        for f in (f_start..f_start + GROUP_F as isize).step_by(TILE) {
            let (f0, f1) = clip(f, nf);
            if f0 < f1 {
                copy_tile(p, (f0, f1), (l0, l1));
            }
        }
    }
}

/// One tile: rows `f0..f1`, columns `l0..l1` (at most [`TILE`] of each).
///
/// # Safety
/// Every element of those rows and columns is inside the plane's source and destination.
#[inline]
unsafe fn copy_tile<T: Copy>(p: &Plane<T>, (f0, f1): (usize, usize), (l0, l1): (usize, usize)) {
    #[cfg(target_arch = "x86_64")]
    if p.avx512 {
        // 4-byte elements, the fast axis contiguous (see `Plane::new`): the whole tile in 16
        // AVX-512 registers, each source line read whole and each destination line written
        // whole, no buffer; a partial tile through masks.
        let from = (p.src as *const f32).offset(f0 as isize + l0 as isize * p.sl);
        let to = (p.dst as *mut f32).add(f0 * p.df + l0);
        transpose16(from, p.sl, to, p.df, (f1 - f0, l1 - l0));
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if std::mem::size_of::<T>() == 4 && p.sf == 1 && f1 - f0 == TILE && l1 - l0 == TILE {
        // Through a buffer: each of the source's 16 lines (16 elements along `f`) is read
        // whole, 4 x 4 blocks at a time through SSE registers (bits moved unchanged), and each
        // of the destination's 16 lines is written whole, so lines that share a cache set
        // (strides a power of two of 4 KiB) are each touched once.
        // Not zeroed first (a memset of the whole buffer per tile cost a quarter of the copy):
        // the 4 x 4 blocks write every element before the rows are read.
        let mut buffer = std::mem::MaybeUninit::<[f32; TILE * TILE]>::uninit();
        let buf = buffer.as_mut_ptr().cast::<f32>();
        let src = p.src as *const f32;
        for jq in (0..TILE).step_by(4) {
            for iq in (0..TILE).step_by(4) {
                let from = src.offset((f0 + iq) as isize + (l0 + jq) as isize * p.sl);
                transpose4(from, p.sl, buf.add(iq * TILE + jq), TILE);
            }
        }
        let dst = p.dst as *mut f32;
        for r in 0..TILE {
            std::ptr::copy_nonoverlapping(buf.add(r * TILE), dst.add((f0 + r) * p.df + l0), TILE);
        }
        return;
    }
    copy_elements(p, (f0, f1), (l0, l1));
}

/// Rows `f0..f1`, columns `l0..l1`, element by element.
///
/// # Safety
/// As [`copy_group`].
#[inline]
unsafe fn copy_elements<T: Copy>(p: &Plane<T>, (f0, f1): (usize, usize), (l0, l1): (usize, usize)) {
    for i in f0..f1 {
        let s_row = p.src.offset(i as isize * p.sf);
        let d_row = p.dst.add(i * p.df);
        for j in l0..l1 {
            d_row.add(j).write(*s_row.offset(j as isize * p.sl));
        }
    }
}

/// A 16 x 16 block of 4-byte elements: source lines `src + l * sl` (l in 0..16) of 16
/// contiguous elements become the destination lines `dst + i * df`, in registers (bits moved
/// unchanged). A partial block (`len` elements per source line, `lines` lines, fewer than 16 of
/// either) is read and written through masks: nothing outside it is touched.
///
/// # Safety
/// The block's source and destination elements are inside their tensors, `len` and `lines`
/// are at most 16, and the CPU has AVX-512F (the caller checks).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn transpose16(
    src: *const f32,
    sl: isize,
    dst: *mut f32,
    df: usize,
    (len, lines): (usize, usize),
) {
    use std::arch::x86_64::*;
    if len == TILE && lines == TILE {
        // Unrolled whole: no masks, the 16 registers never spilled.
        let r: [__m512; 16] = std::array::from_fn(|l| _mm512_loadu_ps(src.offset(l as isize * sl)));
        for (i, v) in transpose_registers(r).iter().enumerate() {
            _mm512_storeu_ps(dst.add(i * df), *v);
        }
        return;
    }
    let mask = |n: usize| -> __mmask16 { ((1u32 << n) - 1) as __mmask16 };
    let r: [__m512; 16] = std::array::from_fn(|l| {
        if l < lines {
            _mm512_maskz_loadu_ps(mask(len), src.offset(l as isize * sl))
        } else {
            _mm512_setzero_ps()
        }
    });
    for (i, v) in transpose_registers(r).iter().enumerate().take(len) {
        _mm512_mask_storeu_ps(dst.add(i * df), mask(lines), *v);
    }
}

/// The transpose of 16 registers of 16 lanes: lane `i` of register `l` becomes lane `l` of
/// register `i`. Pairs of registers interleaved by 1, then 2 lanes, then 128-bit lanes twice.
///
/// # Safety
/// The CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn transpose_registers(
    mut r: [std::arch::x86_64::__m512; 16],
) -> [std::arch::x86_64::__m512; 16] {
    use std::arch::x86_64::*;
    let mut t = [_mm512_setzero_ps(); 16];
    for k in 0..8 {
        t[2 * k] = _mm512_unpacklo_ps(r[2 * k], r[2 * k + 1]);
        t[2 * k + 1] = _mm512_unpackhi_ps(r[2 * k], r[2 * k + 1]);
    }
    let (lo, hi) = (
        |a: __m512, b: __m512| {
            _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)))
        },
        |a: __m512, b: __m512| {
            _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)))
        },
    );
    for q in 0..4 {
        let b = 4 * q;
        r[b] = lo(t[b], t[b + 2]);
        r[b + 1] = hi(t[b], t[b + 2]);
        r[b + 2] = lo(t[b + 1], t[b + 3]);
        r[b + 3] = hi(t[b + 1], t[b + 3]);
    }
    for h in 0..2 {
        let b = 8 * h;
        for k in 0..4 {
            t[b + k] = _mm512_shuffle_f32x4(r[b + k], r[b + k + 4], 0x88);
            t[b + k + 4] = _mm512_shuffle_f32x4(r[b + k], r[b + k + 4], 0xdd);
        }
    }
    for k in 0..8 {
        r[k] = _mm512_shuffle_f32x4(t[k], t[k + 8], 0x88);
        r[k + 8] = _mm512_shuffle_f32x4(t[k], t[k + 8], 0xdd);
    }
    r
}

/// A 4 x 4 block: source rows `src + c * sl` (c in 0..4) of 4 contiguous elements become the
/// destination rows `dst + r * df`.
///
/// # Safety
/// The 16 source and 16 destination elements are inside their tensors.
#[cfg(target_arch = "x86_64")]
#[inline]
unsafe fn transpose4(src: *const f32, sl: isize, dst: *mut f32, df: usize) {
    use std::arch::x86_64::*;
    // SSE is part of x86_64: always available.
    let c0 = _mm_loadu_ps(src);
    let c1 = _mm_loadu_ps(src.offset(sl));
    let c2 = _mm_loadu_ps(src.offset(2 * sl));
    let c3 = _mm_loadu_ps(src.offset(3 * sl));
    let t0 = _mm_unpacklo_ps(c0, c1);
    let t1 = _mm_unpacklo_ps(c2, c3);
    let t2 = _mm_unpackhi_ps(c0, c1);
    let t3 = _mm_unpackhi_ps(c2, c3);
    _mm_storeu_ps(dst, _mm_movelh_ps(t0, t1));
    _mm_storeu_ps(dst.add(df), _mm_movehl_ps(t1, t0));
    _mm_storeu_ps(dst.add(2 * df), _mm_movelh_ps(t2, t3));
    _mm_storeu_ps(dst.add(3 * df), _mm_movehl_ps(t3, t2));
}

#[cfg(test)]
mod tests {
    use super::standard_order;
    use ndarray::{s, Array, ArrayD, IxDyn, ShapeBuilder};

    fn reference<T: Copy>(a: &ndarray::ArrayViewD<'_, T>) -> Vec<T> {
        // Index by index, in row-major order: independent of any iterator.
        ndarray::indices(a.raw_dim())
            .into_iter()
            .map(|i| a[i])
            .collect()
    }

    #[test]
    fn every_layout_comes_out_in_row_major_order() {
        let c = Array::from_shape_fn((37, 70), |(i, j)| (i * 1000 + j) as f32);
        let f = Array::from_shape_fn((37, 70).f(), |(i, j)| (i * 1000 + j) as f32);
        let cube =
            Array::from_shape_fn((5, 33, 41), |(i, j, k)| (i * 100_000 + j * 100 + k) as i64);
        let cube_f = Array::from_shape_fn((5, 33, 41).f(), |(i, j, k)| {
            (i * 100_000 + j * 100 + k) as i64
        });
        let views: Vec<(&str, ArrayD<f64>)> = vec![
            ("c", c.mapv(f64::from).into_dyn()),
            ("fortran", f.mapv(f64::from).into_dyn()),
            ("transposed", c.t().mapv(f64::from).into_dyn()),
            ("empty", ArrayD::zeros(IxDyn(&[0, 3]))),
        ];
        for (name, a) in &views {
            assert_eq!(standard_order(a.view()), reference(&a.view()), "{name}");
        }
        let cases: Vec<(&str, ndarray::ArrayViewD<'_, f32>)> = vec![
            ("c", c.view().into_dyn()),
            ("fortran", f.view().into_dyn()),
            ("transposed view", c.t().into_dyn()),
            ("stepped rows", c.slice(s![..;3, ..]).into_dyn()),
            ("stepped columns", c.slice(s![.., ..;2]).into_dyn()),
            ("stepped fortran", f.slice(s![1..;2, ..;3]).into_dyn()),
            ("reversed", c.slice(s![..;-1, ..;-1]).into_dyn()),
            ("reversed fortran", f.slice(s![..;-2, 3..]).into_dyn()),
            ("one row", c.slice(s![4..5, ..]).into_dyn()),
            ("one column of fortran", f.slice(s![.., 7..8]).into_dyn()),
        ];
        for (name, v) in cases {
            assert_eq!(standard_order(v.view()), reference(&v), "{name}");
        }
        let row = ndarray::Array1::from_shape_fn(70, |j| j as f32);
        let broadcast = row.broadcast((37, 70)).unwrap().into_dyn();
        let column = ndarray::Array2::from_shape_fn((37, 1), |(i, _)| i as f32);
        let broadcast_col = column.broadcast((37, 70)).unwrap().into_dyn();
        for (name, v) in [
            ("broadcast rows", broadcast),
            ("broadcast column", broadcast_col),
        ] {
            assert_eq!(standard_order(v.view()), reference(&v), "{name}");
        }
        let cubes: Vec<(&str, ndarray::ArrayViewD<'_, i64>)> = vec![
            ("fortran cube", cube_f.view().into_dyn()),
            (
                "permuted cube",
                cube.view().permuted_axes([2, 0, 1]).into_dyn(),
            ),
            (
                "middle axis last",
                cube.view().permuted_axes([0, 2, 1]).into_dyn(),
            ),
            (
                "stepped permuted cube",
                cube.slice(s![..;2, 1.., ..;-3])
                    .permuted_axes([1, 2, 0])
                    .into_dyn(),
            ),
        ];
        for (name, v) in cubes {
            assert_eq!(standard_order(v.view()), reference(&v), "{name}");
        }
        // Several groups of tiles along both axes, with partial tiles and groups; 4-byte
        // elements of every kind (through registers) and 8-byte ones (element by element).
        let big = Array::from_shape_fn((1100, 300).f(), |(i, j)| (i * 1000 + j) as u32);
        let big_i = big.mapv(|v| v as i32 - 7);
        let big_d = big.mapv(|v| f64::from(v) * 0.5);
        let nan = big.mapv(|v| f32::from_bits(0x7fc0_0000 | v));
        assert_eq!(
            standard_order(big.view()),
            reference(&big.view().into_dyn())
        );
        assert_eq!(
            standard_order(big_i.view()),
            reference(&big_i.view().into_dyn())
        );
        assert_eq!(
            standard_order(big_d.view()),
            reference(&big_d.view().into_dyn())
        );
        let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
        assert_eq!(
            bits(standard_order(nan.view())),
            bits(reference(&nan.view().into_dyn())),
            "NaN payloads move unchanged"
        );
        // Above PARALLEL_BYTES the copies are split over the cores: contiguous chunks, and
        // planes times groups of rows (several planes, partial groups).
        let large_f = Array::from_shape_fn((1100, 1000).f(), |(i, j)| (i * 1000 + j) as u32);
        assert!(large_f.len() * 4 >= super::PARALLEL_BYTES);
        assert_eq!(
            standard_order(large_f.view()),
            reference(&large_f.view().into_dyn())
        );
        let large_c = large_f.as_standard_layout().to_owned();
        assert_eq!(
            standard_order(large_c.view()),
            reference(&large_c.view().into_dyn())
        );
        let planes = Array::from_shape_fn((3, 700, 300).f(), |(i, j, k)| {
            (i * 1_000_000 + j * 1000 + k) as f64
        });
        assert!(planes.len() * 8 >= super::PARALLEL_BYTES);
        let planes_t = planes.view().permuted_axes([0, 2, 1]);
        assert_eq!(
            standard_order(planes_t.view()),
            reference(&planes_t.into_dyn())
        );
        // Tiles start where source and destination lines are aligned cache lines (strides of
        // 16 or 64 elements), wherever the array begins: partial tiles at every edge, of every
        // width, through masks.
        let aligned = Array::from_shape_fn((1024, 96).f(), |(i, j)| (i * 1000 + j) as u32);
        for off in 0..=17 {
            for (rows, cols) in [(1024 - off, 96 - off), (21, 64), (3, 5), (16 + off, 17)] {
                let v = aligned.slice(s![off..off + rows, off % 7..off % 7 + cols]);
                assert_eq!(
                    standard_order(v),
                    reference(&v.into_dyn()),
                    "offset {off}, {rows} x {cols}"
                );
            }
        }
        // Rows in order, large enough for several tasks on several threads: a sub-block, stepped
        // and reversed rows and columns, broadcast rows, axes of length 1 among the others.
        let grid = Array::from_shape_fn((1100, 2000), |(i, j)| (i * 10_000 + j) as f32);
        let row = ndarray::Array1::from_shape_fn(1500, |j| j as f32);
        let in_rows: Vec<(&str, ndarray::ArrayViewD<'_, f32>)> = vec![
            ("sub-block", grid.slice(s![50..1050, 7..1507]).into_dyn()),
            ("stepped rows", grid.slice(s![..;2, 100..]).into_dyn()),
            ("reversed rows", grid.slice(s![..;-1, ..1500]).into_dyn()),
            ("stepped columns", grid.slice(s![3.., ..;3]).into_dyn()),
            ("reversed columns", grid.slice(s![.., ..;-1]).into_dyn()),
            (
                "broadcast rows",
                row.broadcast((2000, 1500)).unwrap().into_dyn(),
            ),
            (
                "3-d broadcast",
                row.broadcast((3, 700, 1500)).unwrap().into_dyn(),
            ),
            ("a strided column", grid.slice(s![.., 9..10]).into_dyn()),
            (
                "unit axes",
                grid.slice(s![4..5, ..;2])
                    .insert_axis(ndarray::Axis(0))
                    .into_dyn(),
            ),
            ("one element", grid.slice(s![3..4, 8..9]).into_dyn()),
        ];
        for (name, v) in in_rows {
            assert_eq!(standard_order(v.view()), reference(&v), "{name}");
        }
        let wide = Array::from_shape_fn((40, 700), |(i, j)| (i * 1000 + j) as f32);
        let wide_t = wide.t();
        assert_eq!(standard_order(wide_t), reference(&wide_t.into_dyn()));
    }
}

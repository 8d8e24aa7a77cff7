//! The transposing copy of a plane: the source walked along its fastest axis `a`, the
//! destination written along its own fastest axis `b`, in tiles of [`TILE`] x [`TILE`]
//! elements, each source line read whole and each destination line written whole (4-byte
//! elements: a 16 x 16 tile in AVX-512 registers where the CPU has AVX-512F, or as four 8 x 8
//! blocks in AVX2 registers where it has AVX2 (or `OVL_CPU_ISA=avx2` holds ovl there, see
//! `ovl_ir::isa`), its tiles placed so that their lines are aligned cache lines and the partial
//! ones at the edges read and written through masks; else through SSE registers and a small
//! buffer on x86_64, so lines that share a cache set, strides a power of two of 4 KiB, are
//! touched once each), and tiles in groups that
//! keep the pages in the TLB and write each destination line as one sequential run. A strided
//! element-by-element copy of a transposed 16 MB matrix touches a new cache line (and a new page)
//! at every element; this one moves whole lines.

use super::{for_each_task, threads_for};

/// The edge of a tile, in elements: 16 f32 are a cache line.
const TILE: usize = 16;

/// A group of tiles: `GROUP_F` positions along `a` by `GROUP_L` along `b`, copied a row of
/// [`STACK`] tiles across `b` at a time (see [`copy_group`]). Each destination line is written
/// as one sequential run of `GROUP_L` elements; the group's source lines lie on at most
/// `GROUP_L` runs of pages and its destination lines on `GROUP_F`, few enough for the TLB.
/// Measured on a transposed 1024 x 4096 and 4096 x 1024 f32 matrix on an AMD EPYC Zen 5
/// (`ovl-core/examples/layout_copy.rs`, 2 threads, best of 5 runs): 0.60 ms against 1.0-1.2 ms
/// for groups of 512 x 128 walked down each run of source lines instead (the order that
/// measured best on the Zen 4 machine of earlier sessions), and 0.63-0.80 ms for groups of
/// 16-64 x 1024, 128 x 256 or 64 x 2048; a plain copy of the same bytes takes 0.24-0.4 ms.
/// With rows of two tiles ([`STACK`]), groups of 64-256 x 1024-4096 all measured the same.
const GROUP_F: usize = 128;
const GROUP_L: usize = 1024;

/// Tiles per row of a group, stacked along `a`: both read each source line's page at two
/// neighbouring cache lines (128 contiguous bytes) before the next page. Measured as above,
/// the builds alternated within one process (best of 100 copies each, three runs): 0.50-0.54
/// ms against 0.54-0.63 ms for rows of one tile; rows of 3 or 4 tiles 0.55-0.62 ms, and
/// prefetching the next tiles' source lines changed nothing.
const STACK: usize = 2;
const _: () = assert!(
    GROUP_F.is_multiple_of(TILE * STACK),
    "a group holds whole rows"
);

/// A cache line, in bytes.
const LINE: usize = 64;

/// Whether a transposing copy of `bytes` writes its whole tiles with non-temporal stores
/// (straight to memory, no read of each destination line first): where the source and the
/// destination together fill the last-level cache, so that the destination would not stay in
/// it anyway. Measured on the Zen 5 (a transposed 16 MB f32 matrix, 32 MiB L3): the copy alone
/// 0.52-0.53 ms against 0.61-0.63 (best of 30, three runs each); per call of the stdlib
/// reductions on it (`benches/reductions_layouts.rs`: `Lazy::from(&x)` then the kernel, best
/// of 30 and of 3 runs, alternated builds), layer norm 1.40 -> 1.23 ms, RMS norm 1.33 ->
/// 1.10, softmax 1.83 -> 1.70, logsumexp 1.46 -> 1.44, although the kernel then reads its
/// input from memory.
fn streams(bytes: usize) -> bool {
    #[cfg(test)]
    if let Some(forced) = super::tests::FORCE_STREAM.with(|f| f.get()) {
        return forced;
    }
    2 * bytes >= crate::machine::last_level_cache()
}

/// How whole lines of a tile of 4-byte elements move through registers (see [`Plane::new`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Registers {
    /// Not through vector registers as whole lines: SSE and a buffer, or element by element.
    None,
    /// Four 8 x 8 blocks in AVX2 registers ([`transpose16_avx2`]).
    Avx2,
    /// One 16 x 16 block in AVX-512 registers ([`transpose16`]).
    Avx512,
}

/// The registers the tiles of 4-byte elements go through on this CPU, under `OVL_CPU_ISA`.
fn registers() -> Registers {
    #[cfg(test)]
    if let Some(forced) = super::tests::FORCE_REGISTERS.with(|f| f.get()) {
        return forced;
    }
    let isa = ovl_ir::isa::process();
    if isa.avx512f() {
        Registers::Avx512
    } else if isa.avx2_fma() {
        Registers::Avx2
    } else {
        Registers::None
    }
}

/// One 2-d plane to copy: the first element and the strides along `a` and `b` of the source and
/// of the destination; where its tiles start (see [`Plane::grid`]) and which vector registers
/// they go through.
#[derive(Clone, Copy)]
struct Plane<T> {
    src: *const T,
    sf: isize,
    sl: isize,
    dst: *mut T,
    df: isize,
    dl: isize,
    /// Tile edges lie at positions `≡ phase_f (mod TILE)` along `a` and `≡ phase_l (mod TILE)`
    /// along `b`.
    phase_f: usize,
    phase_l: usize,
    registers: Registers,
    /// Whether whole tiles are written with non-temporal stores (see [`streams`]).
    stream: bool,
}

impl<T> Plane<T> {
    /// A plane whose tiles start at 0 on both axes, or where their lines are aligned.
    fn new(src: *const T, (sf, sl): (isize, isize), dst: *mut T, (df, dl): (isize, isize)) -> Self {
        let mut p = Plane {
            src,
            sf,
            sl,
            dst,
            df,
            dl,
            phase_f: 0,
            phase_l: 0,
            registers: Registers::None,
            stream: false,
        };
        #[cfg(target_arch = "x86_64")]
        if std::mem::size_of::<T>() == 4 && sf == 1 && dl == 1 && registers() != Registers::None {
            // Through registers, with masked loads and stores for partial tiles, so the tiles
            // can start anywhere: where every source line and every destination line of a
            // whole tile is one aligned cache line (a line straddling two costs both; measured
            // on a transposed 4096 x 1024 f32 matrix: 1.07-1.13 ms with neither side aligned,
            // 0.81-0.86 ms with both). Possible on a side whose lines all share an alignment,
            // its stride a multiple of a cache line.
            p.registers = registers();
            let phase = |addr: usize, stride: isize| -> usize {
                if (stride * 4).rem_euclid(LINE as isize) != 0 || !addr.is_multiple_of(4) {
                    return 0;
                }
                (LINE - addr % LINE) % LINE / 4
            };
            p.phase_f = phase(src as usize, sl);
            p.phase_l = phase(dst as usize, df);
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

/// Copies every element of `shape` from `src` (strides `ss`) to `dst` (strides `ds`), where
/// `a` is the source's fastest axis and `b`, another, the destination's.
///
/// # Safety
/// Every index of `shape` is inside both tensors through their strides; the destination's
/// elements are distinct and overlap no source element; both stay valid for the call.
pub(super) unsafe fn copy_planes<T: Copy + Send + Sync>(
    (src, ss): (*const T, &[isize]),
    (dst, ds): (*mut T, &[isize]),
    shape: &[usize],
    (a, b): (usize, usize),
) {
    // Every axis but `a` and `b` is walked by an odometer, one 2-d plane per position.
    let outer: Vec<usize> = (0..shape.len()).filter(|&i| i != a && i != b).collect();
    let (nf, nl) = (shape[a], shape[b]);
    let mut planes = Vec::new();
    let mut index = vec![0usize; outer.len()];
    'planes: loop {
        let base = |strides: &[isize]| -> isize {
            outer
                .iter()
                .zip(&index)
                .map(|(&axis, &i)| i as isize * strides[axis])
                .sum()
        };
        planes.push(Plane::new(
            // SAFETY: both offsets: the position of the odometer is a valid index (with 0 on
            // `a` and `b`), so each offset stays inside its tensor (the caller's contract).
            unsafe { src.offset(base(ss)) },
            (ss[a], ss[b]),
            // SAFETY: as for `src` above.
            unsafe { dst.offset(base(ds)) },
            (ds[a], ds[b]),
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
    // One task per plane and group of tiles: tasks write disjoint parts of the destination. A
    // plane's grid starts up to one tile before 0 (its phases), hence one more tile on each
    // axis.
    let (groups_f, groups_l) = ((nf + TILE).div_ceil(GROUP_F), (nl + TILE).div_ceil(GROUP_L));
    let per_plane = groups_f * groups_l;
    let n: usize = shape.iter().product();
    if streams(n * std::mem::size_of::<T>()) {
        for p in planes.iter_mut() {
            p.stream = p.registers != Registers::None && (p.df * 4).rem_euclid(LINE as isize) == 0;
        }
    }
    let planes = SendPlanes(planes);
    let planes = &planes; // the whole wrapper goes into the closure
    for_each_task(
        planes.0.len() * per_plane,
        threads_for(n * std::mem::size_of::<T>()),
        &|t| {
            let p = &planes.0[t / per_plane];
            let (g, h) = ((t % per_plane) / groups_l, t % groups_l);
            // SAFETY: the group's tiles are clipped to the plane's extent, all inside both
            // tensors (the caller's contract); the task's group of this plane is written by it
            // alone.
            unsafe { copy_group(p, (nf, nl), (g, h)) };
            if p.stream {
                // Non-temporal stores are weakly ordered: fenced before the task counts as
                // done, so that whoever reads the destination after the copy sees them.
                #[cfg(target_arch = "x86_64")]
                // SAFETY: SSE is part of x86_64.
                unsafe {
                    std::arch::x86_64::_mm_sfence()
                };
            }
        },
    );
}

/// The planes of a copy, shared by its threads.
struct SendPlanes<T>(Vec<Plane<T>>);
// SAFETY: the threads read the planes' sources and write disjoint parts of their destinations
// (one task per plane and group of tiles); `T: Copy` data moves between threads as bits.
unsafe impl<T: Send + Sync> Sync for SendPlanes<T> {}

/// Copies group `(g, h)` of a plane of `nf` x `nl` elements: [`GROUP_F`] positions of its grid
/// along `a` by [`GROUP_L`] along `b`, clipped to the plane, a row of [`STACK`] tiles across
/// `b` at a time (the stacked tiles one after the other at each position along `b`), so that
/// each destination line is written front to back in one run.
///
/// # Safety
/// The plane's source and destination hold `nf` x `nl` elements.
unsafe fn copy_group<T: Copy>(p: &Plane<T>, (nf, nl): (usize, usize), (g, h): (usize, usize)) {
    // SAFETY: the caller's contract (`# Safety` above) covers every access below.
    unsafe {
        let clip = |start: isize, n: usize| -> (usize, usize) {
            let lo = start.max(0) as usize;
            (lo.min(n), ((start + TILE as isize).max(0) as usize).min(n))
        };
        let f_start = Plane::<T>::grid(p.phase_f) + (g * GROUP_F) as isize;
        let l_start = Plane::<T>::grid(p.phase_l) + (h * GROUP_L) as isize;
        for row in (f_start..f_start + GROUP_F as isize).step_by(TILE * STACK) {
            for l in (l_start..l_start + GROUP_L as isize).step_by(TILE) {
                let (l0, l1) = clip(l, nl);
                if l0 >= l1 {
                    continue;
                }
                for f in (row..row + (TILE * STACK) as isize).step_by(TILE) {
                    let (f0, f1) = clip(f, nf);
                    if f0 < f1 {
                        copy_tile(p, (f0, f1), (l0, l1));
                    }
                }
            }
        }
    }
}

/// One tile: positions `f0..f1` along `a`, `l0..l1` along `b` (at most [`TILE`] of each).
///
/// # Safety
/// Every element of the tile is inside the plane's source and destination.
#[inline]
unsafe fn copy_tile<T: Copy>(p: &Plane<T>, (f0, f1): (usize, usize), (l0, l1): (usize, usize)) {
    // SAFETY: the caller's contract (`# Safety` above) covers every access below.
    unsafe {
        let (f, l) = (f0 as isize, l0 as isize);
        #[cfg(target_arch = "x86_64")]
        if p.registers != Registers::None {
            // 4-byte elements, source lines along `a` and destination lines along `b` contiguous
            // (see `Plane::new`): the whole tile in 16 AVX-512 registers, or as four 8 x 8
            // blocks in AVX2 registers, each source line read whole and each destination line
            // written whole, no buffer; a partial tile through masks.
            let from = (p.src as *const f32).offset(f + l * p.sl);
            let to = (p.dst as *mut f32).offset(f * p.df + l);
            let shape = (f1 - f0, l1 - l0);
            if p.registers == Registers::Avx512 {
                transpose16(from, p.sl, to, p.df, shape, p.stream);
            } else {
                transpose16_avx2(from, p.sl, to, p.df, shape, p.stream);
            }
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if std::mem::size_of::<T>() == 4
            && p.sf == 1
            && p.dl == 1
            && f1 - f0 == TILE
            && l1 - l0 == TILE
        {
            // Through a buffer: each of the source's 16 lines (16 elements along `a`) is read
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
                    let from = src.offset(f + iq as isize + (l + jq as isize) * p.sl);
                    transpose4(from, p.sl, buf.add(iq * TILE + jq), TILE);
                }
            }
            let dst = p.dst as *mut f32;
            for r in 0..TILE {
                let to = dst.offset((f + r as isize) * p.df + l);
                std::ptr::copy_nonoverlapping(buf.add(r * TILE), to, TILE);
            }
            return;
        }
        copy_elements(p, (f0, f1), (l0, l1));
    }
}

/// Positions `f0..f1` along `a`, `l0..l1` along `b`, element by element.
///
/// # Safety
/// As [`copy_tile`].
#[inline]
unsafe fn copy_elements<T: Copy>(p: &Plane<T>, (f0, f1): (usize, usize), (l0, l1): (usize, usize)) {
    // SAFETY: the caller's contract (`# Safety` above) covers every access below.
    unsafe {
        for i in f0 as isize..f1 as isize {
            let (s_row, d_row) = (p.src.offset(i * p.sf), p.dst.offset(i * p.df));
            for j in l0 as isize..l1 as isize {
                d_row.offset(j * p.dl).write(*s_row.offset(j * p.sl));
            }
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
/// are at most 16, and the CPU has AVX-512F (the caller checks). With `stream`, a whole
/// block's destination lines must be aligned cache lines (they are non-temporal stores, which
/// the caller fences).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn transpose16(
    src: *const f32,
    sl: isize,
    dst: *mut f32,
    df: isize,
    (len, lines): (usize, usize),
    stream: bool,
) {
    // SAFETY: the caller's contract (`# Safety` above) covers every access below.
    unsafe {
        use std::arch::x86_64::*;
        if len == TILE && lines == TILE {
            // Unrolled whole: no masks, the 16 registers never spilled.
            let r: [__m512; 16] =
                std::array::from_fn(|l| _mm512_loadu_ps(src.offset(l as isize * sl)));
            let t = transpose_registers(r);
            if stream && (dst as usize).is_multiple_of(LINE) {
                for (i, v) in t.iter().enumerate() {
                    _mm512_stream_ps(dst.offset(i as isize * df), *v);
                }
            } else {
                for (i, v) in t.iter().enumerate() {
                    _mm512_storeu_ps(dst.offset(i as isize * df), *v);
                }
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
            _mm512_mask_storeu_ps(dst.offset(i as isize * df), mask(lines), *v);
        }
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

/// [`transpose16`] through AVX2 registers: the block as four 8 x 8 blocks, the two that make
/// destination lines `8 h .. 8 h + 8` transposed together ([`transpose8_halves`]) and each of
/// those lines then written whole (its two halves one after the other). A partial block through
/// AVX masks.
///
/// # Safety
/// As [`transpose16`], with AVX2 for AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn transpose16_avx2(
    src: *const f32,
    sl: isize,
    dst: *mut f32,
    df: isize,
    (len, lines): (usize, usize),
    stream: bool,
) {
    // SAFETY: the caller's contract (`# Safety` above) covers every access below: only the
    // `len` x `lines` elements are read and written (the masks cover the rest).
    unsafe {
        use std::arch::x86_64::*;
        // Lanes `0..n` set: the 8 values from `8 - n` of [-1 x 8, 0 x 8].
        const SIGNS: [i32; 16] = [-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0];
        let mask = |n: usize| _mm256_loadu_si256(SIGNS.as_ptr().add(8 - n).cast());
        let mask4 = |n: usize| _mm_loadu_si128(SIGNS.as_ptr().add(8 - n).cast());
        let whole = len == TILE && lines == TILE;
        let stream = whole && stream && (dst as usize).is_multiple_of(LINE);
        for h in 0..2 {
            // Elements `8 h ..` of each source line: destination lines `8 h ..`.
            let n = len.saturating_sub(8 * h).min(8);
            if n == 0 {
                break;
            }
            let halves: [[__m256; 8]; 2] = std::array::from_fn(|q| {
                // Source lines `8 q ..`: elements `8 q ..` of the destination lines.
                let m = lines.saturating_sub(8 * q).min(8);
                let at = |l: usize| src.offset(8 * h as isize + (8 * q + l) as isize * sl);
                // Register `r` holds line `r % 4` (4 elements from `4 (r / 4)`) in its low half
                // and line `r % 4 + 4` in its high half: inserting a 128-bit load (a load
                // port's work) replaces the transpose's last exchange of halves.
                let (lo, hi) = (n.min(4), n.saturating_sub(4));
                transpose8_halves(std::array::from_fn(|r| {
                    let (l, e) = (r % 4, 4 * (r / 4));
                    let half = |l: usize| -> __m128 {
                        let count = if e == 0 { lo } else { hi };
                        if whole {
                            _mm_loadu_ps(at(l).add(e))
                        } else if l < m && count > 0 {
                            _mm_maskload_ps(at(l).add(e), mask4(count))
                        } else {
                            _mm_setzero_ps()
                        }
                    };
                    _mm256_insertf128_ps::<1>(_mm256_castps128_ps256(half(l)), half(l + 4))
                }))
            });
            for i in 0..n {
                let line = dst.offset((8 * h + i) as isize * df);
                for (q, half) in halves.iter().enumerate() {
                    let m = lines.saturating_sub(8 * q).min(8);
                    if stream {
                        _mm256_stream_ps(line.add(8 * q), half[i]);
                    } else if whole {
                        _mm256_storeu_ps(line.add(8 * q), half[i]);
                    } else if m > 0 {
                        _mm256_maskstore_ps(line.add(8 * q), mask(m), half[i]);
                    }
                }
            }
        }
    }
}

/// The transpose of an 8 x 8 block whose lines come in as halves: register `r` holds
/// elements `4 (r / 4) ..` of line `r % 4` in its low 128 bits and of line `r % 4 + 4` in its
/// high ones; register `i` of the result holds element `i` of the 8 lines. Pairs interleaved by
/// 1 lane, then by 2: 16 shuffles where registers of whole lines take 24.
///
/// # Safety
/// The CPU has AVX.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
#[inline]
unsafe fn transpose8_halves(r: [std::arch::x86_64::__m256; 8]) -> [std::arch::x86_64::__m256; 8] {
    use std::arch::x86_64::*;
    // t[4 g + 2 p + s]: lines (0, 1) (p = 0) or (2, 3) (p = 1) of group g, interleaved low
    // (s = 0) or high (s = 1).
    let t: [__m256; 8] = std::array::from_fn(|k| {
        let (g, p, s) = (k / 4, (k / 2) % 2, k % 2);
        let (a, b) = (r[4 * g + 2 * p], r[4 * g + 2 * p + 1]);
        if s == 0 {
            _mm256_unpacklo_ps(a, b)
        } else {
            _mm256_unpackhi_ps(a, b)
        }
    });
    // Element i = 4 g + 2 s + c: from t[4 g + s] and t[4 g + 2 + s], pairs c.
    std::array::from_fn(|i| {
        let (g, s, c) = (i / 4, (i / 2) % 2, i % 2);
        let (a, b) = (t[4 * g + s], t[4 * g + 2 + s]);
        if c == 0 {
            _mm256_shuffle_ps::<0x44>(a, b)
        } else {
            _mm256_shuffle_ps::<0xee>(a, b)
        }
    })
}

/// A 4 x 4 block: source rows `src + c * sl` (c in 0..4) of 4 contiguous elements become the
/// destination rows `dst + r * df`.
///
/// # Safety
/// The 16 source and 16 destination elements are inside their tensors.
#[cfg(target_arch = "x86_64")]
#[inline]
unsafe fn transpose4(src: *const f32, sl: isize, dst: *mut f32, df: usize) {
    // SAFETY: the caller's contract (`# Safety` above) covers every access below.
    unsafe {
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
}

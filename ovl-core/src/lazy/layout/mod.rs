//! Bringing a user's array of any layout into row-major order, the layout every kernel reads
//! ([`standard_order`]), and writing row-major results into a user's mutable view of any layout
//! ([`assign_standard_order`]).
//!
//! Row-major elements are one `memcpy` (or no copy at all when an array is moved in). Where
//! both sides walk the same axis fastest (a sub-block, stepped or reversed rows or columns,
//! broadcast rows) the copy goes line by line along that axis, a `memcpy` per line whose
//! elements are contiguous on both sides. Where they walk different axes fastest (a transpose,
//! Fortran order, permuted axes) it is a tiled transpose (`layout/tiles.rs`). Large copies are split
//! over the cores.

mod tiles;

use ndarray::{ArrayView, ArrayViewMut, Dimension};

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

/// A pointer handed to the threads of a copy, which write disjoint elements through it.
struct SendPtr<T>(*mut T);
// SAFETY: the threads that share it write disjoint elements (see the callers), and `T: Copy`
// data moves between threads as bits.
unsafe impl<T: Send> Sync for SendPtr<T> {}

/// A source pointer handed to the threads of a copy, which only read through it.
struct SendConst<T>(*const T);
// SAFETY: the threads only read the source's elements, which stay unchanged during the copy
// (the caller borrows them).
unsafe impl<T: Sync> Sync for SendConst<T> {}

/// The elements of `a` in row-major (standard) order.
pub fn standard_order<T: Copy + Send + Sync, D: Dimension>(a: ArrayView<'_, T, D>) -> Vec<T> {
    let n = a.len();
    let mut out: Vec<T> = Vec::with_capacity(n);
    if let Some(s) = a.as_slice() {
        // SAFETY: `out` has room for the `n` elements of `s`, a distinct allocation.
        unsafe { copy_contiguous(s, out.as_mut_ptr()) };
    } else {
        let row_major = row_major_strides(a.shape());
        // SAFETY: every index of the shape is inside `a` through its strides and inside `out`'s
        // capacity through the row-major strides; `out` is a fresh allocation.
        unsafe {
            copy(
                (a.as_ptr(), a.strides()),
                (out.as_mut_ptr(), &row_major),
                a.shape(),
            )
        };
    }
    // SAFETY: every one of the `n` elements was written.
    unsafe { out.set_len(n) };
    out
}

/// Writes `src`, the row-major elements of `dst`'s shape, into `dst` (in place when `dst` is
/// row-major contiguous, else by the same copies as [`standard_order`], the other way).
/// Returns false, writing nothing, when `src` does not hold as many elements as `dst`.
pub fn assign_standard_order<T: Copy + Send + Sync, D: Dimension>(
    dst: &mut ArrayViewMut<'_, T, D>,
    src: &[T],
) -> bool {
    if src.len() != dst.len() {
        return false;
    }
    let row_major = row_major_strides(dst.shape());
    let shape = dst.shape().to_vec();
    let strides = dst.strides().to_vec();
    if let Some(d) = dst.as_slice_mut() {
        // SAFETY: `d` has room for the elements of `src`; a mutable view never overlaps the
        // caller's shared slice.
        unsafe { copy_contiguous(src, d.as_mut_ptr()) };
    } else {
        // SAFETY: every index of the shape is inside `src` through the row-major strides and
        // inside `dst` through its own; a mutable view's elements are distinct and do not
        // overlap `src`.
        unsafe {
            copy(
                (src.as_ptr(), &row_major),
                (dst.as_mut_ptr(), &strides),
                &shape,
            )
        };
    }
    true
}

/// The strides of a row-major contiguous tensor of `shape`.
fn row_major_strides(shape: &[usize]) -> Vec<isize> {
    let mut strides = vec![1isize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1] as isize;
    }
    strides
}

/// Copies contiguous elements to `dst`, split over the cores when large.
///
/// # Safety
/// `dst` has room for `s.len()` elements and overlaps no element of `s`.
unsafe fn copy_contiguous<T: Copy + Send + Sync>(s: &[T], dst: *mut T) {
    let n = s.len();
    let threads = threads_for(std::mem::size_of_val(s));
    if threads == 1 {
        // SAFETY: the caller's contract: `dst` has room for `n` elements, apart from `s`.
        unsafe { std::ptr::copy_nonoverlapping(s.as_ptr(), dst, n) };
        return;
    }
    // Chunks of 1 MiB or more (whole cache lines), about 4 per thread.
    let chunk = (n.div_ceil(threads * 4)).max((1 << 20) / std::mem::size_of::<T>().max(1));
    let chunk = chunk.div_ceil(16) * 16;
    let dst = SendPtr(dst);
    let d = &dst; // the whole wrapper, not its pointer field, goes into the closure
    for_each_task(n.div_ceil(chunk), threads, &|c| {
        let (lo, hi) = (c * chunk, ((c + 1) * chunk).min(n));
        // SAFETY: the chunks are disjoint ranges of the destination, each written by one task
        // from the same range of `s`.
        unsafe { std::ptr::copy_nonoverlapping(s.as_ptr().add(lo), d.0.add(lo), hi - lo) };
    });
}

/// Copies every element of `shape` from `src` to `dst`, each side read or written through its
/// strides.
///
/// # Safety
/// Every index of `shape` is inside both tensors through their strides; the destination's
/// elements are distinct (no zero stride on an axis longer than 1) and overlap no source
/// element; both stay valid for the call.
unsafe fn copy<T: Copy + Send + Sync>(
    (src, ss): (*const T, &[isize]),
    (dst, ds): (*mut T, &[isize]),
    shape: &[usize],
) {
    // SAFETY: the caller's contract (`# Safety` above) covers every access below.
    unsafe {
        if shape.contains(&0) {
            return;
        }
        // Axes of length 1 do not change the order: without them, every axis moves.
        let keep: Vec<usize> = (0..shape.len()).filter(|&i| shape[i] != 1).collect();
        let pick = |v: &[isize]| keep.iter().map(|&i| v[i]).collect::<Vec<_>>();
        let (shape, ss, ds): (Vec<usize>, _, _) =
            (keep.iter().map(|&i| shape[i]).collect(), pick(ss), pick(ds));
        if shape.is_empty() {
            dst.write(*src); // one element
            return;
        }
        // The axis each side walks fastest: its smallest nonzero stride (a broadcast axis, stride
        // 0, reads one element again and again wherever it is).
        let fastest = |strides: &[isize]| {
            (0..strides.len())
                .filter(|&i| strides[i] != 0)
                .min_by_key(|&i| strides[i].unsigned_abs())
        };
        let line = fastest(&ds).unwrap_or(shape.len() - 1);
        match fastest(&ss) {
            Some(a) if a != line => tiles::copy_planes((src, &ss), (dst, &ds), &shape, (a, line)),
            _ => by_lines((src, &ss), (dst, &ds), &shape, line),
        }
    }
}

/// The copy of [`copy`] where both sides walk axis `line` fastest: line by line along it (one
/// `memcpy` for a line contiguous on both sides, else an element at a time along its strides),
/// in tasks of whole lines of about 1 MiB split over the cores when large. An
/// element-by-element iterator took 15 times a plain copy of the same bytes for a 16 MB
/// sub-block of a larger matrix.
///
/// # Safety
/// As [`copy`].
unsafe fn by_lines<T: Copy + Send + Sync>(
    (src, ss): (*const T, &[isize]),
    (dst, ds): (*mut T, &[isize]),
    shape: &[usize],
    line: usize,
) {
    let outer: Vec<usize> = (0..shape.len()).filter(|&i| i != line).collect();
    let (len, s_step, d_step) = (shape[line], ss[line], ds[line]);
    let lines: usize = outer.iter().map(|&i| shape[i]).product();
    let per_task = ((1usize << 20) / (len * std::mem::size_of::<T>()).max(1)).max(1);
    let (src, dst) = (SendConst(src), SendPtr(dst));
    let (src, dst) = (&src, &dst); // the whole wrappers go into the closure
    for_each_task(
        lines.div_ceil(per_task),
        threads_for(lines * len * std::mem::size_of::<T>()),
        &|t| {
            let (r0, r1) = (t * per_task, ((t + 1) * per_task).min(lines));
            // The position of line r0 along the outer axes, then counted up line by line.
            let mut index = vec![0usize; outer.len()];
            let mut rest = r0;
            for k in (0..outer.len()).rev() {
                index[k] = rest % shape[outer[k]];
                rest /= shape[outer[k]];
            }
            let offset = |strides: &[isize], index: &[usize]| -> isize {
                outer
                    .iter()
                    .zip(index)
                    .map(|(&axis, &i)| i as isize * strides[axis])
                    .sum()
            };
            let (mut s_off, mut d_off) = (offset(ss, &index), offset(ds, &index));
            for _ in r0..r1 {
                // SAFETY: the offsets are those of a valid index (with 0 along `line`) and every
                // element of the line is inside both tensors (the caller's contract); the
                // line's destination elements are written by this task alone.
                unsafe {
                    let (from, to) = (src.0.offset(s_off), dst.0.offset(d_off));
                    match (s_step, d_step) {
                        (1, 1) => std::ptr::copy_nonoverlapping(from, to, len),
                        // Strides known to the compiler, which then moves vectors: reversed
                        // and every other element, the common strided lines (measured on
                        // 16 MB of f32: 2.7-3.3x and 2.2-2.4x a plain copy element by element).
                        (-1, 1) => strided_line::<T, -1, 1>(from, to, len),
                        (2, 1) => strided_line::<T, 2, 1>(from, to, len),
                        (1, -1) => strided_line::<T, 1, -1>(from, to, len),
                        (1, 2) => strided_line::<T, 1, 2>(from, to, len),
                        _ => {
                            for j in 0..len as isize {
                                to.offset(j * d_step).write(*from.offset(j * s_step));
                            }
                        }
                    }
                }
                for k in (0..outer.len()).rev() {
                    let (axis, n) = (outer[k], shape[outer[k]]);
                    index[k] += 1;
                    s_off += ss[axis];
                    d_off += ds[axis];
                    if index[k] < n {
                        break;
                    }
                    s_off -= ss[axis] * n as isize;
                    d_off -= ds[axis] * n as isize;
                    index[k] = 0;
                }
            }
        },
    );
}

/// `len` elements read `S` apart from `from` and written `D` apart to `to`.
///
/// # Safety
/// The elements are inside their tensors and `to`'s overlap none of `from`'s.
#[inline]
unsafe fn strided_line<T: Copy, const S: isize, const D: isize>(
    from: *const T,
    to: *mut T,
    len: usize,
) {
    // SAFETY: the caller's contract: `len` elements at these strides lie inside both sides.
    unsafe {
        for j in 0..len as isize {
            to.offset(j * D).write(*from.offset(j * S));
        }
    }
}

#[cfg(test)]
mod tests;

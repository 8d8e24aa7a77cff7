//! The CPU kernel of a library call: a GEMM (`proto/ovl.proto`, "Library calls") on `f32` or
//! `f64`: on `f32` through this crate's kernels where they apply (`small`, AVX-512F: few rows
//! or a short sum; `large`, AVX-512F: many rows and a long sum), else through the `gemm` crate
//! (docs/matmul.md says why that crate); on `f16` and `bf16` through the same f32 kernels on
//! operands widened to f32 (`gemm/half.rs`). Other dtypes run the call's reference program,
//! compiled like any operator. [`epilogue`] runs a GEMM with the elementwise operator that
//! consumes it, block by block.

pub mod epilogue;
pub(crate) mod half;
#[cfg(target_arch = "x86_64")]
mod large;
#[cfg(target_arch = "x86_64")]
mod small;

use crate::error::{Mismatch, RunFailure};
use ovl_core::ir;
use ovl_core::library::{gemm_dims, GemmDims};
use ovl_core::DType;
use ovl_ir::isa::CpuIsa;
use std::ffi::c_void;

/// A GEMM run by the library on the CPU.
#[derive(Clone, Debug)]
pub struct GemmKernel {
    dtype: DType,
}

impl GemmKernel {
    /// The library kernel of `op`, when the CPU has one for it: a GEMM on `f32`, `f64`, `f16`
    /// or `bf16` (the half types accumulate in f32).
    pub fn for_operator(op: &ir::ExpressionDag) -> Option<GemmKernel> {
        let dims = gemm_dims(op).ok()?;
        matches!(
            dims.dtype,
            DType::F32 | DType::F64 | DType::F16 | DType::BF16
        )
        .then_some(GemmKernel { dtype: dims.dtype })
    }

    /// Runs the call of `op` (a concrete operator: its types give the sizes) on `inputs`
    /// (A, B) into `output` (C), with up to `threads` threads (0: one per core).
    ///
    /// # Safety
    /// The pointers name buffers of `op`'s input and output types; C overlaps neither input.
    pub(crate) unsafe fn run(
        &self,
        op: &ir::ExpressionDag,
        inputs: &[*const c_void],
        outputs: &[*mut c_void],
        threads: usize,
    ) -> Result<(), RunFailure> {
        let mismatch = |problem: String| library_mismatch(op, problem);
        let dims = gemm_dims(op).map_err(|m| mismatch(m.to_string()))?;
        let terms = dims.terms as usize;
        let output = match outputs {
            &[output] if inputs.len() == 2 * terms && dims.dtype == self.dtype => output,
            _ => {
                return Err(mismatch(format!(
                    "the kernel was prepared for {}, {} inputs and 1 output",
                    self.dtype,
                    2 * terms
                )))
            }
        };
        // SAFETY: the caller's contract, with the sizes of `op`'s types.
        unsafe {
            match self.dtype {
                DType::F64 => gemm_sum::<f64>(&dims, inputs, output, threads),
                d @ (DType::F16 | DType::BF16) => {
                    half::gemm_half(d, &dims, inputs, output, threads)
                }
                _ => gemm_sum::<f32>(&dims, inputs, output, threads),
            }
        }
        Ok(())
    }
}

/// A library call `op` that its kernel cannot run, and why (for the runner's error).
pub(super) fn library_mismatch(op: &ir::ExpressionDag, problem: String) -> RunFailure {
    RunFailure::from(Mismatch::LibraryCall {
        name: op.name.clone(),
        problem,
    })
}

/// `C[b] = Σ_t op(A_t[b]) · op(B_t[b])` over the `dims.terms` pairs of `inputs`: one product
/// whose `k` axis concatenates the terms' (one product writes C once where `terms` products and
/// their sum would write it `2 * terms - 1` times). The packed kernel reads the terms in place;
/// for the others each batch's operands are copied side by side first (in the LSTM layer at
/// H = 650 the copies made a weight gradient's 12 ms product take 17 ms).
///
/// # Safety
/// As [`GemmKernel::run`]: `inputs` holds `2 * dims.terms` buffers of the operands' types.
unsafe fn gemm_sum<T: Element>(
    dims: &GemmDims,
    inputs: &[*const c_void],
    c: *mut c_void,
    threads: usize,
) {
    let terms = dims.terms as usize;
    let isa = ovl_ir::isa::process();
    if terms <= 1 {
        // SAFETY: the caller's contract.
        return unsafe { gemm_batched::<T>(dims, inputs[0], inputs[1], c, threads, isa) };
    }
    let (m, n, k) = (dims.m as usize, dims.n as usize, dims.k as usize);
    let (a_strides, b_strides) = strides(dims, k);
    let threads = thread_count(threads);
    if T::packed_applies((m, n, k * terms), threads, isa) {
        for batch in 0..dims.batch as usize {
            let of = |which: usize, size: usize| -> Vec<*const T> {
                inputs[which..]
                    .iter()
                    .step_by(2)
                    .map(|&p| p.cast::<T>().wrapping_add(batch * size))
                    .collect()
            };
            let (a, b) = (of(0, m * k), of(1, k * n));
            // SAFETY: each input holds `batch` matrices of these sizes; C's batch lies inside C.
            unsafe {
                let c = c.cast::<T>().add(batch * m * n);
                T::packed((m, n, k), (&a, a_strides), (&b, b_strides), c, threads);
            }
        }
        return;
    }
    let joined = GemmDims {
        batch: 1,
        k: dims.k * dims.terms,
        terms: 1,
        ..*dims
    };
    for batch in 0..dims.batch as usize {
        // op(A) [m, k]: stored [k, m] (k its rows) when transposed, else [m, k] (k its columns).
        // SAFETY: each input holds `batch` matrices of these sizes.
        let a = unsafe { join_along_k::<T>(inputs, 0, batch, (m, k), dims.transpose_a) };
        // SAFETY: as for A.
        let b = unsafe { join_along_k::<T>(inputs, 1, batch, (n, k), !dims.transpose_b) };
        // SAFETY: the joined operands hold the joined sizes; C's batch lies inside C.
        unsafe {
            let c = c.cast::<T>().add(batch * m * n).cast::<c_void>();
            gemm_batched::<T>(
                &joined,
                a.as_ptr().cast(),
                b.as_ptr().cast(),
                c,
                threads,
                isa,
            );
        }
    }
}

/// Operand `which` (0: A, 1: B) of every term, batch `batch`, joined along `k`: a matrix of
/// `other` rows (or columns) by `k` per term, stored with `k` as its rows (`k_rows`: `[k, other]`
/// each, joined into `[terms * k, other]`) or as its columns (`[other, k]` into
/// `[other, terms * k]`).
///
/// # Safety
/// Every `inputs[2 t + which]` holds at least `batch + 1` matrices of `other * k` elements.
unsafe fn join_along_k<T: Element>(
    inputs: &[*const c_void],
    which: usize,
    batch: usize,
    (other, k): (usize, usize),
    k_rows: bool,
) -> Vec<T> {
    let size = other * k;
    // SAFETY: the caller's contract.
    let parts: Vec<&[T]> = inputs[which..]
        .iter()
        .step_by(2)
        .map(|&p| unsafe { std::slice::from_raw_parts(p.cast::<T>().add(batch * size), size) })
        .collect();
    let mut joined = Vec::with_capacity(parts.len() * size);
    if k_rows {
        parts.iter().for_each(|p| joined.extend_from_slice(p));
    } else {
        for row in 0..other {
            parts
                .iter()
                .for_each(|p| joined.extend_from_slice(&p[row * k..(row + 1) * k]));
        }
    }
    joined
}

/// `C[b] = op(A[b]) · op(B[b])` for every batch `b`, row-major buffers.
///
/// # Safety
/// As [`GemmKernel::run`]: A, B and C hold the elements `dims` describes.
unsafe fn gemm_batched<T: Element>(
    dims: &GemmDims,
    a: *const c_void,
    b: *const c_void,
    c: *mut c_void,
    threads: usize,
    isa: CpuIsa,
) {
    let (m, n, k) = (dims.m as usize, dims.n as usize, dims.k as usize);
    let (a, b, c) = (a.cast::<T>(), b.cast::<T>(), c.cast::<T>());
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        // An empty sum: zeros (the library is not asked, so that nothing depends on its reading
        // of an empty product).
        // SAFETY: C holds batch * m * n elements.
        unsafe { std::slice::from_raw_parts_mut(c, dims.batch as usize * m * n) }.fill(T::ZERO);
        return;
    }
    let (a_strides, b_strides) = strides(dims, k);
    for batch in 0..dims.batch as usize {
        // SAFETY: each batch's matrices lie inside the buffers; C's are disjoint from A's and
        // B's.
        unsafe {
            product::<T>(
                (m, n, k),
                (a.add(batch * m * k), a_strides),
                (b.add(batch * k * n), b_strides),
                c.add(batch * m * n),
                threads,
                isa,
            )
        };
    }
}

/// Strides in elements (row, column) of op(A) `[m, k]` and op(B) `[k, n]` (C is `[m, n]`,
/// row-major), for operands stored row-major with `k` terms per sum.
fn strides(dims: &GemmDims, k: usize) -> (Strides, Strides) {
    let (m, n) = (dims.m as usize, dims.n as usize);
    let a = if dims.transpose_a { (1, m) } else { (k, 1) };
    let b = if dims.transpose_b { (1, k) } else { (n, 1) };
    (a, b)
}

/// One `C[m, n] = op(A) · op(B)` (`k > 0`, C row-major) on up to `threads` threads (0: one per
/// core): this crate's few-row or packed kernels where they apply and `isa` allows them (they
/// need AVX-512), else the `gemm` crate.
///
/// # Safety
/// A, B and C hold the elements the sizes and strides describe; C overlaps neither operand.
unsafe fn product<T: Element>(
    (m, n, k): (usize, usize, usize),
    (a, a_strides): (*const T, Strides),
    (b, b_strides): (*const T, Strides),
    c: *mut T,
    threads: usize,
    isa: CpuIsa,
) {
    let threads = thread_count(threads);
    // SAFETY: the caller's contract.
    if unsafe { T::few_rows((m, n, k), (a, a_strides), (b, b_strides), c, threads, isa) } {
        return;
    }
    if T::packed_applies((m, n, k), threads, isa) {
        // SAFETY: the caller's contract (one term).
        unsafe { T::packed((m, n, k), (&[a], a_strides), (&[b], b_strides), c, threads) };
        return;
    }
    // SAFETY: the caller's contract.
    unsafe { crate_product((m, n, k), (a, a_strides), (b, b_strides), c, threads) }
}

/// [`product`] through the `gemm` crate alone.
///
/// # Safety
/// As [`product`].
unsafe fn crate_product<T: Element>(
    (m, n, k): (usize, usize, usize),
    (a, a_strides): (*const T, Strides),
    (b, b_strides): (*const T, Strides),
    c: *mut T,
    threads: usize,
) {
    // The `gemm` crate's own threads would be a second pool on the same cores (rayon's): its
    // product is cut instead into one block of C per thread, rows or columns, whichever C has
    // more of, each block a single-threaded call of the crate run on ovl's pool.
    let by_rows = m >= n;
    let len = if by_rows { m } else { n };
    // Blocks of at least `MIN_BLOCK` rows or columns: a thinner one would spend more on packing
    // the other operand than it computes.
    const MIN_BLOCK: usize = 32;
    let tasks = if threads > 1 && m * n * k >= 64 * 64 * 64 {
        threads.min(len.div_ceil(MIN_BLOCK))
    } else {
        1
    };
    let chunk = len.div_ceil(tasks);
    let ((a_rs, a_cs), (b_rs, b_cs)) = (a_strides, b_strides);
    // Addresses, so that the tasks may share them (each block is read or written by one task).
    let (a, b, c) = (a as usize, b as usize, c as usize);
    let block = |t: usize| {
        let (start, end) = (t * chunk, ((t + 1) * chunk).min(len));
        if start >= end {
            return;
        }
        let size = end - start;
        let elem = std::mem::size_of::<T>();
        let (rows, cols, a, b, c) = if by_rows {
            (size, n, a + start * a_rs * elem, b, c + start * n * elem)
        } else {
            (m, size, a, b + start * b_cs * elem, c + start * elem)
        };
        // SAFETY: the caller's contract: the block's rows of A (or columns of B) and of C lie
        // inside the operands; blocks of C are disjoint. `read_dst = false`: C is overwritten
        // (`beta`, the product's factor, is 1).
        unsafe {
            gemm::gemm(
                rows,
                cols,
                k,
                c as *mut T,
                1,
                n as isize,
                false,
                a as *const T,
                a_cs as isize,
                a_rs as isize,
                b as *const T,
                b_cs as isize,
                b_rs as isize,
                T::ZERO,
                T::ONE,
                false,
                false,
                false,
                gemm::Parallelism::None,
            )
        };
    };
    if tasks == 1 {
        block(0);
    } else {
        crate::cpu::pool::for_each_parallel(tasks, threads, &block);
    }
}

/// The threads a product runs on: `threads`, 0 meaning one per core, as for every kernel.
fn thread_count(threads: usize) -> usize {
    match threads {
        0 => crate::cpu::pool::cpu_count(),
        n => n,
    }
}

/// One unbatched GEMM call (`C = Σ_t op(A_t) · op(B_t)`) prepared to compute C by blocks of
/// rows ([`RowProduct::rows`]): the terms' operands joined along `k` once (as
/// [`gemm_sum`]), every block reading the same operands.
pub(super) struct RowProduct<T> {
    dims: (usize, usize, usize),
    a: (*const T, Strides),
    b: (*const T, Strides),
    /// The joined operands of a sum of several products (A, B), which `a` and `b` point into.
    _joined: Option<(Vec<T>, Vec<T>)>,
}

// SAFETY: the operands are only read, by `rows`, while the caller's contract keeps them alive
// and unchanged; blocks of rows write disjoint parts of C.
unsafe impl<T: Sync> Sync for RowProduct<T> {}

impl<T: Element> RowProduct<T> {
    /// The product of `dims` (`batch` 1) over `inputs` (`2 * terms` operands).
    ///
    /// # Safety
    /// As [`GemmKernel::run`]; the operands stay alive and unchanged while the result is used.
    pub(super) unsafe fn new(dims: &GemmDims, inputs: &[*const c_void]) -> RowProduct<T> {
        let (m, n, k) = (dims.m as usize, dims.n as usize, dims.k as usize);
        let terms = dims.terms as usize;
        let joined_k = k * terms.max(1);
        let (a_strides, b_strides) = strides(dims, joined_k);
        if terms <= 1 {
            return RowProduct {
                dims: (m, n, k),
                a: (inputs[0].cast(), a_strides),
                b: (inputs[1].cast(), b_strides),
                _joined: None,
            };
        }
        // SAFETY: the caller's contract: each operand holds one matrix of these sizes.
        let (ja, jb) = unsafe {
            (
                join_along_k::<T>(inputs, 0, 0, (m, k), dims.transpose_a),
                join_along_k::<T>(inputs, 1, 0, (n, k), !dims.transpose_b),
            )
        };
        RowProduct {
            dims: (m, n, joined_k),
            a: (ja.as_ptr(), a_strides),
            b: (jb.as_ptr(), b_strides),
            _joined: Some((ja, jb)),
        }
    }

    /// The rows of C.
    pub(super) fn rows(&self) -> usize {
        self.dims.0
    }

    /// The columns of C.
    pub(super) fn columns(&self) -> usize {
        self.dims.1
    }

    /// Computes rows `[first, end)` of C on up to `threads` threads.
    ///
    /// # Safety
    /// C holds the `[m, n]` result, overlaps no operand, and no other thread accesses these
    /// rows of it meanwhile; `first <= end <= m`.
    pub(super) unsafe fn compute_rows(
        &self,
        (first, end): (usize, usize),
        c: *mut T,
        threads: usize,
    ) {
        let ((_, n, k), rows) = (self.dims, end - first);
        if rows == 0 || n == 0 {
            return;
        }
        // SAFETY: the rows lie in C (the caller's contract).
        let c = unsafe { c.add(first * n) };
        if k == 0 {
            // An empty sum: zeros, as for a whole call.
            // SAFETY: as above.
            unsafe { std::slice::from_raw_parts_mut(c, rows * n) }.fill(T::ZERO);
            return;
        }
        let (a, a_strides) = self.a;
        // SAFETY: row `first` of op(A) lies in A; the caller's contract for the rest.
        unsafe {
            product::<T>(
                (rows, n, k),
                (a.add(first * a_strides.0), a_strides),
                self.b,
                c,
                threads,
                ovl_ir::isa::process(),
            )
        };
    }
}

/// Row and column strides of a matrix operand, in elements.
type Strides = (usize, usize);

/// `c = a · b` for row-major `a` `[m, k]`, `b` `[k, n]` and `c` `[m, n]` (`dims` is
/// `(m, k, n)`) on `threads` threads of ovl's pool (0: one per core), by the kernels a GEMM
/// library call of that element type runs: the same choice of this crate's kernels or the
/// `gemm` crate's, under the process's setting of `OVL_CPU_ISA`. For benchmarks and tests of
/// the kernels alone.
///
/// ```
/// let (a, b) = ([1.0f32, 2.0, 3.0, 4.0], [1.0f32, 0.0, 0.0, 1.0]);
/// let mut c = [0.0f32; 4];
/// ovl_runtime::gemm::matmul(&a, &b, &mut c, (2, 2, 2), 1).unwrap();
/// assert_eq!(c, a);
/// ```
pub fn matmul<T: Element>(
    a: &[T],
    b: &[T],
    c: &mut [T],
    (m, k, n): (usize, usize, usize),
    threads: usize,
) -> Result<(), String> {
    matmul_for(ovl_ir::isa::process(), a, b, c, (m, k, n), threads)
}

/// [`matmul`] through the `gemm` crate alone, a block of C per thread, whatever the CPU: for
/// comparing the crate with this crate's kernels (`benches/gemm.rs`).
#[doc(hidden)]
pub fn matmul_crate<T: Element>(
    a: &[T],
    b: &[T],
    c: &mut [T],
    (m, k, n): (usize, usize, usize),
    threads: usize,
) -> Result<(), String> {
    check_sizes(a.len(), b.len(), c.len(), (m, k, n))?;
    if k > 0 {
        // SAFETY: as in `matmul_for`.
        unsafe {
            crate_product::<T>(
                (m, n, k),
                (a.as_ptr(), (k, 1)),
                (b.as_ptr(), (n, 1)),
                c.as_mut_ptr(),
                thread_count(threads),
            )
        };
    } else {
        c.fill(T::ZERO);
    }
    Ok(())
}

/// The sizes of a row-major `[m, k] x [k, n]` product's buffers, or which one is wrong.
fn check_sizes(
    a: usize,
    b: usize,
    c: usize,
    (m, k, n): (usize, usize, usize),
) -> Result<(), String> {
    let want = [("a", a, m * k), ("b", b, k * n), ("c", c, m * n)];
    if let Some((name, got, wanted)) = want.into_iter().find(|&(_, got, wanted)| got != wanted) {
        return Err(format!(
            "`{name}` has {got} elements; an [m, k] x [k, n] product of {m} x {k} x {n} needs {wanted}"
        ));
    }
    Ok(())
}

/// [`matmul`] by the kernels `isa` allows (held to AVX2: never this crate's AVX-512 kernels),
/// whatever `OVL_CPU_ISA` says: for comparing them in one process.
pub fn matmul_for<T: Element>(
    isa: CpuIsa,
    a: &[T],
    b: &[T],
    c: &mut [T],
    (m, k, n): (usize, usize, usize),
    threads: usize,
) -> Result<(), String> {
    check_sizes(a.len(), b.len(), c.len(), (m, k, n))?;
    if k == 0 {
        c.fill(T::ZERO);
        return Ok(());
    }
    // SAFETY: the three slices hold the elements of their row-major matrices (checked above)
    // and `c`, borrowed mutably, overlaps neither operand.
    unsafe {
        product::<T>(
            (m, n, k),
            (a.as_ptr(), (k, 1)),
            (b.as_ptr(), (n, 1)),
            c.as_mut_ptr(),
            threads,
            isa,
        )
    };
    Ok(())
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
}

/// The element types the library multiplies: `f32` and `f64`.
pub trait Element: sealed::Sealed + Copy + Send + Sync + 'static {
    #[doc(hidden)]
    const ZERO: Self;
    #[doc(hidden)]
    const ONE: Self;

    /// Computes one `C[m, n] = op(A) · op(B)` (C row-major) with this crate's kernels for
    /// products with few rows (`gemm_small`) when they apply to the sizes, layout, element
    /// type, CPU and `isa`; `false`: not computed.
    ///
    /// # Safety
    /// As [`GemmKernel::run`], for one batch's matrices; `k > 0`.
    #[doc(hidden)]
    unsafe fn few_rows(
        _dims: (usize, usize, usize),
        _a: (*const Self, Strides),
        _b: (*const Self, Strides),
        _c: *mut Self,
        _threads: usize,
        _isa: CpuIsa,
    ) -> bool {
        false
    }

    /// Whether `epilogue`'s measured rule decides where a GEMM and its consumer pair under
    /// `isa` (else they never pair where it would pay): f32 pairs were measured with the few-row
    /// kernels computing each block, which need AVX-512; held to AVX2 each block's call of the
    /// `gemm` crate packs the whole weight again, the case the rule refuses for many rows. (f64
    /// keeps the rule as it was.)
    #[doc(hidden)]
    fn epilogue_rule_holds(_isa: CpuIsa) -> bool {
        true
    }

    /// Whether [`Element::packed`] computes a product of these sizes (`k` the whole sum's) on
    /// `threads` threads where `isa` allows it.
    #[doc(hidden)]
    fn packed_applies(_dims: (usize, usize, usize), _threads: usize, _isa: CpuIsa) -> bool {
        false
    }

    /// Computes `C[m, n] = Σ_t op(A_t) · op(B_t)` (C row-major) over the terms' operands, each
    /// `k` terms of the sum, read in place through the strides (`gemm_large`); only where
    /// [`Element::packed_applies`] says so for the sizes with `k` times the terms.
    ///
    /// # Safety
    /// As [`GemmKernel::run`], for one batch's matrices of every term; `k > 0`.
    #[doc(hidden)]
    unsafe fn packed(
        _dims: (usize, usize, usize),
        _a: (&[*const Self], Strides),
        _b: (&[*const Self], Strides),
        _c: *mut Self,
        _threads: usize,
    ) {
        unreachable!("packed_applies is false")
    }
}

impl Element for f32 {
    const ZERO: f32 = 0.0;
    const ONE: f32 = 1.0;

    #[cfg(target_arch = "x86_64")]
    unsafe fn few_rows(
        (m, n, k): (usize, usize, usize),
        (a, a_strides): (*const f32, Strides),
        (b, b_strides): (*const f32, Strides),
        c: *mut f32,
        threads: usize,
        isa: CpuIsa,
    ) -> bool {
        use large::{self, Operand};
        use small::{self, nt_broadcast};
        // The fewest rows from which `C = A · Bᵀ` runs faster through the broadcast kernel than
        // through the dot-product kernel (below: each block's rows of A stay in L1); measured
        // in docs/benchmarks.md, section "A whole LSTM layer".
        const NT_BROADCAST_MIN_ROWS: usize = 8;
        // Few rows: the weight B is streamed, not packed. A short sum (few rows of B, as in a
        // weight gradient `x_tᵀ · dz_t` of one step): B's strip stays in L1 while every block
        // of rows passes over it; the crate's packing would dominate.
        let (few_rows, short_sum) = (m <= small::MAX_ROWS, k <= small::MAX_ROWS);
        if !(few_rows || short_sum) || !isa.avx512f() {
            return false;
        }
        // Small products are not worth waking threads for (as for the crate above).
        let threads = if m * n * k >= 64 * 64 * 64 {
            threads
        } else {
            1
        };
        // SAFETY: the caller's contract, with the layouts each kernel requires checked here.
        unsafe {
            if b_strides == (n, 1) {
                small::gemm_nn((m, n, k), a, a_strides, b, c, threads);
                true
            } else if few_rows
                && b_strides == (1, k)
                && (m >= NT_BROADCAST_MIN_ROWS || a_strides != (k, 1))
                && isa.avx512dq()
            {
                nt_broadcast::gemm_nt_broadcast((m, n, k), a, a_strides, b, c, threads);
                true
            } else if few_rows
                // (Only on CPUs without AVX-512DQ, for the broadcast kernel above.)
                && b_strides == (1, k)
                && m >= large::NT_MIN_ROWS
                && large::enough_strips(n, threads)
            {
                let a = Operand {
                    terms: &[a],
                    strides: a_strides,
                    k_term: k,
                };
                // op(B) = Bᵀ, read as B.
                let bt = Operand {
                    terms: &[b],
                    strides: (k, 1),
                    k_term: k,
                };
                large::gemm_packed((m, n, k), a, bt, c, threads);
                true
            } else if few_rows && b_strides == (1, k) && a_strides == (k, 1) {
                small::gemm_nt((m, n, k), a, b, c, threads);
                true
            } else {
                false
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    fn epilogue_rule_holds(isa: CpuIsa) -> bool {
        isa.avx512f()
    }

    #[cfg(target_arch = "x86_64")]
    fn packed_applies((m, n, k): (usize, usize, usize), threads: usize, isa: CpuIsa) -> bool {
        large::applies((m, n, k), threads, isa)
    }

    #[cfg(target_arch = "x86_64")]
    unsafe fn packed(
        (m, n, k): (usize, usize, usize),
        (a, (a_rs, a_cs)): (&[*const f32], Strides),
        (b, (b_rs, b_cs)): (&[*const f32], Strides),
        c: *mut f32,
        threads: usize,
    ) {
        use large::{gemm_packed, Operand};
        let a = Operand {
            terms: a,
            strides: (a_rs, a_cs),
            k_term: k,
        };
        // op(B) read as its transpose `[n, k]`.
        let bt = Operand {
            terms: b,
            strides: (b_cs, b_rs),
            k_term: k,
        };
        // SAFETY: the caller's contract (`packed_applies` checked the CPU for the kernel).
        unsafe { gemm_packed((m, n, k * a.terms.len()), a, bt, c, threads) }
    }
}

impl Element for f64 {
    const ZERO: f64 = 0.0;
    const ONE: f64 = 1.0;
}

//! The GEMM epilogue step: a library GEMM and the compiled kernel that reads its result C by
//! rows (an epilogue pair, `ovl_fuse::gemm_pair`) run as one step. C is computed in blocks
//! of rows small enough to stay in a core's L2 cache, and right after each block the
//! consumer's workers of those rows run on the same thread, reading the block from cache
//! instead of memory. Blocks are spread over the threads, at least one per thread; when that
//! many blocks would not pay (`ovl_fuse::gemm_pair::pays`: each block reads the second operand
//! again), the two kernels run one after the other. Each value is computed as by the two
//! kernels one after the other (the same products per row, the same worker program): the pair
//! is only a schedule.
//!
//! By default a pair runs as one step where it pays (`ovl_fuse::gemm_pair::pays`): the LSTM
//! layer's forward at T = 35, B = 20, H = 650 measured 4-9% faster so (its `h U` products
//! paired with the cell), its forward + backward the same. [`set_gemm_epilogue`] (or
//! `OVL_GEMM_EPILOGUE=off|always` in the environment) says otherwise.

use super::{library_mismatch, Element, RowProduct};
use crate::error::RunFailure;
use crate::CompiledOperator;
use ovl_codegen::RunError;
use ovl_core::ir;
use ovl_core::library::gemm_dims;
use ovl_core::DType;
use ovl_fuse::gemm_pair;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;

/// When a GEMM and the kernel reading its result by rows run as one step (the facade's
/// `Options::gemm_epilogue`, [`crate::plan::Plan::with_epilogue`]). The values are the same in
/// every mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EpilogueMode {
    /// Never: the two kernels one after the other (`OVL_GEMM_EPILOGUE=off`).
    Off,
    /// Where it pays on the run's thread count by the measured rule of
    /// `ovl_fuse::gemm_pair::pays` (`benches/gemm_epilogue.rs`, docs/benchmarks.md "GEMM
    /// epilogue"): the default.
    WherePays,
    /// Every pair the rules allow, paying or not (`OVL_GEMM_EPILOGUE=always`).
    Always,
}

/// The mode: 0 not set (the environment decides), else 1 + its index in [`MODES`].
static STATE: AtomicU8 = AtomicU8::new(0);

const MODES: [EpilogueMode; 3] = [
    EpilogueMode::Off,
    EpilogueMode::WherePays,
    EpilogueMode::Always,
];

fn encode(mode: EpilogueMode) -> u8 {
    MODES.iter().position(|&m| m == mode).unwrap_or(0) as u8 + 1
}

/// Sets when GEMM epilogue pairs run as one step, for every later run in this process whose
/// plan does not say ([`crate::plan::Plan::with_epilogue`]).
#[deprecated(note = "set `Options::gemm_epilogue` (a plan's own mode) instead")]
pub fn set_gemm_epilogue(mode: EpilogueMode) {
    STATE.store(encode(mode), Ordering::Relaxed);
}

/// The process default: `set_gemm_epilogue`'s mode, else `OVL_GEMM_EPILOGUE`, else where it
/// pays.
pub(crate) fn mode() -> EpilogueMode {
    if STATE.load(Ordering::Relaxed) == 0 {
        let mode = match std::env::var("OVL_GEMM_EPILOGUE").as_deref().map(str::trim) {
            Ok("off" | "0") => EpilogueMode::Off,
            Ok("always") => EpilogueMode::Always,
            _ => EpilogueMode::WherePays,
        };
        // A concurrent `set_gemm_epilogue` wins.
        let _ = STATE.compare_exchange(0, encode(mode), Ordering::Relaxed, Ordering::Relaxed);
    }
    let state = STATE.load(Ordering::Relaxed) as usize;
    MODES
        .get(state.wrapping_sub(1))
        .copied()
        .unwrap_or(EpilogueMode::WherePays)
}

/// The pairs of `dag` as `(per operator: the consumer a GEMM is deferred to, per operator:
/// the GEMM a consumer runs with)`: every pair the rules allow; [`run_pair`] decides with the
/// mode in force whether it runs as one step.
pub(crate) fn pairs(dag: &ir::OperatorDag) -> (Vec<Option<usize>>, Vec<Option<usize>>) {
    let n = dag.operators.len();
    let (mut deferred, mut epilogue_of) = (vec![None; n], vec![None; n]);
    for p in gemm_pair::possible_pairs(dag) {
        deferred[p.gemm] = Some(p.consumer);
        epilogue_of[p.consumer] = Some(p.gemm);
    }
    (deferred, epilogue_of)
}

/// The buffers of one kernel: inputs and outputs.
pub(super) type Buffers<'a> = (&'a [*const c_void], &'a [*mut c_void]);

/// Runs GEMM `op` (inputs `gemm.0`, C `gemm.1[0]`) with `consumer` as its epilogue on up to
/// `threads` threads (0: one per core), or the two one after the other where `mode` says so.
///
/// # Safety
/// As for [`super::GemmKernel::run`] and [`CompiledOperator::run_raw`]: every pointer names a
/// buffer of its operator's types; C is one of the consumer's inputs, and no buffer written
/// overlaps another buffer passed.
pub(crate) unsafe fn run_pair(
    op: &ir::ExpressionDag,
    gemm: Buffers<'_>,
    consumer: &CompiledOperator,
    buffers: Buffers<'_>,
    symbols: &[u64],
    threads: usize,
    mode: EpilogueMode,
) -> Result<(), RunFailure> {
    let mismatch = |problem: String| library_mismatch(op, problem);
    let dims = gemm_dims(op).map_err(|m| mismatch(m.to_string()))?;
    let (&[c], true) = (
        gemm.1,
        gemm.0.len() == 2 * dims.terms as usize && dims.batch == 1,
    ) else {
        return Err(mismatch("not an unbatched gemm with one output".into()));
    };
    // SAFETY: the caller's contract.
    unsafe {
        match dims.dtype {
            DType::F32 => run_typed::<f32>(
                &dims,
                gemm.0,
                c.cast(),
                consumer,
                buffers,
                symbols,
                (threads, mode),
            ),
            DType::F64 => run_typed::<f64>(
                &dims,
                gemm.0,
                c.cast(),
                consumer,
                buffers,
                symbols,
                (threads, mode),
            ),
            // A half product is widened into f32 buffers whole (`super::half`): the two kernels
            // one after the other.
            d @ (DType::F16 | DType::BF16) => {
                super::half::gemm_half(d, &dims, gemm.0, c, threads);
                consumer.run_raw(buffers.0, buffers.1, symbols, threads)?;
                Ok(())
            }
            other => Err(mismatch(format!("no library kernel for {other}"))),
        }
    }
}

/// [`run_pair`] for elements `T`.
///
/// # Safety
/// As [`run_pair`].
unsafe fn run_typed<T: Element>(
    dims: &ovl_core::library::GemmDims,
    operands: &[*const c_void],
    c: *mut T,
    consumer: &CompiledOperator,
    (ins, outs): Buffers<'_>,
    symbols: &[u64],
    (threads, mode): (usize, EpilogueMode),
) -> Result<(), RunFailure> {
    // SAFETY: the caller's contract.
    let product = unsafe { RowProduct::<T>::new(dims, operands) };
    let (m, n) = (product.rows(), product.columns());
    let workers = consumer.worker_count(symbols)?;
    if m == 0 {
        return Ok(());
    }
    let per_row = workers / m as u64;
    let threads = match threads {
        0 => crate::cpu::pool::cpu_count(),
        t => t,
    };
    let threads = if m * n * (dims.k as usize * dims.terms as usize) < 64 * 64 * 64 {
        1
    } else {
        threads
    };
    let row_bytes = (n * std::mem::size_of::<T>()) as u64;
    let rows_per_block = gemm_pair::rows_per_block(m as u64, row_bytes, threads as u64) as usize;
    let blocks = m.div_ceil(rows_per_block);
    let weight_bytes = (dims.k * dims.terms).saturating_mul(row_bytes);
    // (Not on f32 held to AVX2: see `Element::epilogue_rule_holds`.)
    let pays = T::epilogue_rule_holds(ovl_ir::isa::process())
        && gemm_pair::pays(m as u64, weight_bytes, blocks as u64, dims.transpose_b);
    let paired = match mode {
        EpilogueMode::Off => false,
        EpilogueMode::WherePays => pays,
        EpilogueMode::Always => true,
    };
    if !paired {
        // The two kernels one after the other.
        // SAFETY: the caller's contract.
        unsafe {
            product.compute_rows((0, m), c, threads);
            consumer.run_raw(ins, outs, symbols, threads)?;
        }
        return Ok(());
    }
    let faults: Mutex<Vec<(usize, RunError)>> = Mutex::new(Vec::new());
    let shared = Shared { c, ins, outs };
    crate::cpu::pool::for_each_parallel(blocks, threads, &|b| {
        let (first, end) = (b * rows_per_block, ((b + 1) * rows_per_block).min(m));
        // SAFETY: blocks are disjoint rows of C, each computed then read by its own workers
        // only (the pair's rule), on this thread; the caller's contract for the buffers.
        let result = unsafe {
            product.compute_rows((first, end), shared.c(), 1);
            consumer.run_workers_raw(
                shared.ins(),
                shared.outs(),
                symbols,
                (first as u64 * per_row, end as u64 * per_row),
            )
        };
        if let Err(e) = result {
            faults
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((b, e));
        }
    });
    // The fault of the first block that faulted: the first faulting worker in order, as when
    // the consumer runs alone.
    let first = faults
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .into_iter()
        .min_by_key(|(b, _)| *b);
    match first {
        None => Ok(()),
        Some((_, e)) => Err(e.into()),
    }
}

/// The buffers shared by the threads of one step (each writes disjoint rows and workers).
struct Shared<'a, T> {
    c: *mut T,
    ins: &'a [*const c_void],
    outs: &'a [*mut c_void],
}

// SAFETY: the pointers are only used during one step, whose contract makes the threads'
// writes disjoint and the inputs unchanged.
unsafe impl<T> Sync for Shared<'_, T> {}

// Closures call these (not the fields), so that they capture the whole `Shared` (`Sync`).
impl<'a, T> Shared<'a, T> {
    fn c(&self) -> *mut T {
        self.c
    }
    fn ins(&self) -> &'a [*const c_void] {
        self.ins
    }
    fn outs(&self) -> &'a [*mut c_void] {
        self.outs
    }
}

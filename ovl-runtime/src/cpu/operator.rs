//! Loading a compiled operator and running it on host tensors, multi-threaded.

use crate::cpu::pool::{cpu_count, Pool};
use ovl_codegen::cpu::abi::{
    AbiVersionFn, CacheKeyFn, RunFn, Status, SymbolCountFn, WorkerCountFn, ABI_VERSION,
};
use ovl_codegen::shared::fault::fault_error;
use ovl_codegen::shared::sizes;
use ovl_codegen::shared::symbols::Geometry;
use ovl_codegen::shared::BLOCKED_WORKERS;
use ovl_codegen::{LoadError, RunError};
use ovl_ir::ir::{self, Op};
use ovl_ir::names::defined_at;
use ovl_ir::HostTensor;
use std::ffi::{c_void, CStr};
use std::path::{Path, PathBuf};

/// Below this estimated amount of work (workers times the per-worker cost, where expressions in
/// loops count more), an operator runs on the calling thread: waking other threads costs more
/// than it saves.
pub const PARALLEL_MIN_WORK: u64 = 1 << 17;

/// How a [`CompiledOperator`] came to be loaded in this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// This process generated the source and ran the C++ compiler.
    Compiled,
    /// The library was found in the on-disk cache.
    DiskCache,
    /// The library came with an exported program (its `libraries`), compiled elsewhere for the
    /// same target (see [`crate::cpu::cache::load_embedded`]).
    Embedded,
}

/// An operator compiled to a native library and loaded, ready to run (any number of times, from
/// any thread: it is `Send + Sync`).
pub struct CompiledOperator {
    name: String,
    defined_at: String,
    key: String,
    source_path: PathBuf,
    library_path: PathBuf,
    origin: Origin,
    /// Tensor types, workgroup and symbols.
    geometry: Geometry,
    worker_cost: ovl_ir::cost::WorkerCost,
    /// Workers per block of its blocked program ([`block_width`]): chunks are multiples of it.
    block: u64,
    /// Per expression: whether it is a WRITE (to name the access of a fault).
    writes: Vec<bool>,
    run_fn: RunFn,
    // Keeps the code of `run_fn` mapped; declared last so it is dropped last.
    _library: libloading::Library,
}

impl std::fmt::Debug for CompiledOperator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledOperator")
            .field("name", &self.name)
            .field("key", &self.key)
            .field("library_path", &self.library_path)
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

/// Raw pointers handed to worker threads.
#[derive(Clone, Copy)]
struct Pointers {
    inputs: *const *const c_void,
    outputs: *const *mut c_void,
    symbols: *const i64,
}
// SAFETY: the pointers are only dereferenced by generated code while `run` holds the borrows of
// the tensors they point into; disjoint worker ranges write through them concurrently, which is
// the contract of `ovl_run`.
unsafe impl Send for Pointers {}
// SAFETY: as for `Send` above.
unsafe impl Sync for Pointers {}

/// Chunks a parallel run takes per thread (at most): enough that a thread slowed down by another
/// process on its core leaves its share to the others, few enough that each chunk is long.
const CHUNKS_PER_THREAD: u64 = 4;

/// How a parallel run of `workers` workers of cost `cost` each on `threads` threads is cut:
/// `(size, count)`, chunks of `size` consecutive workers (the last may be shorter). Up to
/// [`CHUNKS_PER_THREAD`] per thread, each at least a quarter of [`PARALLEL_MIN_WORK`]; a chunk
/// of more than [`BLOCKED_WORKERS`](BLOCKED_WORKERS) workers is a multiple
/// of `block` (the kernel's block width, [`block_width`]; at least that), so that blocked
/// programs run whole blocks.
fn chunking(workers: u64, cost: u64, threads: u64, block: u64) -> (u64, u64) {
    let work = workers.saturating_mul(cost.max(1));
    let by_work = (work / (PARALLEL_MIN_WORK / 4)).max(1);
    let count = (threads * CHUNKS_PER_THREAD)
        .min(by_work)
        .max(threads)
        .min(workers);
    let mut size = workers.div_ceil(count.max(1));
    let block = block.max(BLOCKED_WORKERS);
    if size > BLOCKED_WORKERS {
        size = size.div_ceil(block) * block;
    }
    (size, workers.div_ceil(size))
}

/// The width of `dag`'s blocks of workers in lockstep (`ovl_ir::lockstep::width`, the rule the
/// generated code follows), or [`BLOCKED_WORKERS`](BLOCKED_WORKERS) for a
/// kernel without.
fn block_width(dag: &ir::ExpressionDag) -> u64 {
    ovl_ir::typed::Kernel::decode(&ovl_ir::library::expand(dag))
        .ok()
        .and_then(|k| ovl_ir::lockstep::width(&k))
        .unwrap_or(BLOCKED_WORKERS)
}

impl CompiledOperator {
    /// Loads a library produced for `dag` and checks that it is the one expected (ABI version,
    /// cache key, workgroup size). `Err` carries a reason (the caller decides whether that means
    /// a corrupt cache entry or a failure).
    pub(crate) fn load(
        dag: &ir::ExpressionDag,
        key: &str,
        library_path: &Path,
        source_path: PathBuf,
        origin: Origin,
    ) -> Result<CompiledOperator, LoadError> {
        let geometry = Geometry::of(dag)?;
        // SAFETY: loading a library runs its initializers; the libraries of the operator cache
        // are generated by this crate and have none besides the C++ runtime's.
        let library = unsafe { libloading::Library::new(library_path) }?;
        // SAFETY: the symbols are looked up with the signatures the generated code defines
        // (see `crate::cpu::abi`); the ABI version is checked before any other symbol is called.
        let run_fn = unsafe {
            let version = *library.get::<AbiVersionFn>(b"ovl_abi_version\0")?;
            let found = version();
            if found != ABI_VERSION {
                return Err(LoadError::Abi {
                    found,
                    expected: ABI_VERSION,
                });
            }
            let key_fn = *library.get::<CacheKeyFn>(b"ovl_cache_key\0")?;
            let found = CStr::from_ptr(key_fn()).to_string_lossy();
            if found != key {
                return Err(LoadError::CacheKey {
                    found: found.into_owned(),
                    expected: key.to_string(),
                });
            }
            let symbol_count = *library.get::<SymbolCountFn>(b"ovl_symbol_count\0")?;
            if symbol_count() != geometry.symbol_count {
                return Err(LoadError::SymbolCount {
                    found: symbol_count(),
                    expected: geometry.symbol_count,
                });
            }
            let count = *library.get::<WorkerCountFn>(b"ovl_worker_count\0")?;
            // The worker count for some symbol values, as a check of the sizes.
            let probe = vec![3u64; geometry.symbol_count as usize];
            if let Ok(shape) = ovl_ir::symbolic::resolve_workgroup(dag, &probe) {
                let raw: Vec<i64> = probe.iter().map(|&v| v as i64).collect();
                let (found, workers) = (count(raw.as_ptr()), sizes::product(&shape));
                if found as u64 != workers {
                    return Err(LoadError::Workers {
                        found,
                        expected: workers,
                    });
                }
            }
            *library.get::<RunFn>(b"ovl_run\0")?
        };
        Ok(CompiledOperator {
            name: dag.name.clone(),
            defined_at: defined_at(dag),
            key: key.to_string(),
            source_path,
            library_path: library_path.to_path_buf(),
            origin,
            geometry,
            worker_cost: ovl_ir::cost::WorkerCost::of(dag),
            block: block_width(dag),
            writes: dag
                .expressions
                .iter()
                .map(|e| e.code == Op::Write as i32)
                .collect(),
            run_fn,
            _library: library,
        })
    }

    pub(crate) fn set_library_path(&mut self, path: PathBuf) {
        self.library_path = path;
    }

    /// The operator's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The cache key (32 hex digits): a hash of the operator's canonical hash, the codegen
    /// version, the compiler's identity and flags, and the CPU's features.
    pub fn cache_key(&self) -> &str {
        &self.key
    }

    /// The generated C++ source, kept next to the library in the cache.
    pub fn source_path(&self) -> &Path {
        &self.source_path
    }

    /// The shared library in the cache.
    ///
    /// After a forced recompilation in this process the loaded code came from a temporary file
    /// that was then renamed to this path; the contents are the same.
    pub fn library_path(&self) -> &Path {
        &self.library_path
    }

    /// Whether this process compiled the operator or found it in the on-disk cache.
    pub fn origin(&self) -> Origin {
        self.origin
    }

    /// How many symbol values [`run`](Self::run) takes (0: every size is known; see
    /// `proto/ovl.proto`, "Symbolic sizes").
    pub fn symbol_count(&self) -> usize {
        self.geometry.symbol_count as usize
    }

    /// The workgroup shape for the symbol values `symbols` (`&[]` for an operator without
    /// symbolic sizes). A wrong count of values, or values for which a dimension would be
    /// negative, is an error.
    pub fn workgroup_shape(&self, symbols: &[u64]) -> Result<Vec<u64>, RunError> {
        self.geometry.workgroup(&self.name, symbols)
    }

    /// The number of workers (the product of the workgroup shape) for the symbol values
    /// `symbols`, as [`workgroup_shape`](Self::workgroup_shape).
    pub fn worker_count(&self, symbols: &[u64]) -> Result<u64, RunError> {
        self.workgroup_shape(symbols).map(|w| sizes::product(&w))
    }

    /// The estimated work of a run for the symbol values `symbols`: workers times the cost of
    /// one worker (`ovl_ir::cost::WorkerCost`), what [`run`](Self::run) compares with
    /// [`PARALLEL_MIN_WORK`] to decide whether to split the workgroup over threads.
    pub fn work(&self, symbols: &[u64]) -> Result<u64, RunError> {
        let workers = self.worker_count(symbols)?;
        Ok(workers.saturating_mul(self.worker_cost.at(symbols)))
    }

    /// Runs the operator for the symbol values `symbols` (`&[]` when it has no symbolic sizes):
    /// `inputs` are read, `outputs` (allocated by the caller with the operator's output types
    /// for those values, normally zero-filled: elements no worker writes keep their value) are
    /// written.
    ///
    /// The workgroup `[0, workers)` is split into contiguous chunks over `threads` threads
    /// (0: one per core). Small workgroups run on the calling thread; an empty one runs nothing.
    /// The symbol values, then counts, dtypes and shapes are checked first. A runtime fault
    /// (index out of bounds, non-positive range step) does not stop the evaluation; the first
    /// one (in row-major worker order) is returned.
    pub fn run(
        &self,
        inputs: &[&HostTensor],
        outputs: &mut [HostTensor],
        symbols: &[u64],
        threads: usize,
    ) -> Result<(), RunError> {
        let workgroup = self.geometry.workgroup(&self.name, symbols)?;
        self.geometry
            .check(&self.name, symbols, inputs, &mut outputs.iter())?;
        // Pointer arrays on the stack for the common case of few tensors.
        const INLINE: usize = 8;
        let mut in_inline = [std::ptr::null::<c_void>(); INLINE];
        let mut out_inline = [std::ptr::null_mut::<c_void>(); INLINE];
        let in_heap: Vec<*const c_void>;
        let out_heap: Vec<*mut c_void>;
        let in_ptrs: &[*const c_void] = if inputs.len() <= INLINE {
            for (slot, t) in in_inline.iter_mut().zip(inputs) {
                *slot = t.data.as_ptr() as *const c_void;
            }
            &in_inline
        } else {
            in_heap = inputs
                .iter()
                .map(|t| t.data.as_ptr() as *const c_void)
                .collect();
            &in_heap
        };
        let out_ptrs: &[*mut c_void] = if outputs.len() <= INLINE {
            for (slot, t) in out_inline.iter_mut().zip(outputs.iter_mut()) {
                *slot = t.data.as_mut_ptr() as *mut c_void;
            }
            &out_inline
        } else {
            out_heap = outputs
                .iter_mut()
                .map(|t| t.data.as_mut_ptr() as *mut c_void)
                .collect();
            &out_heap
        };
        // SAFETY: one pointer per input and output, into the tensors checked above, which
        // stay borrowed for the call.
        unsafe { self.launch(in_ptrs, out_ptrs, symbols, &workgroup, threads) }
    }

    /// The workgroup for `symbols`, after checking them and the counts of buffers passed
    /// (`inputs`, `outputs`) against the operator's declaration: what [`run_raw`](Self::run_raw)
    /// and [`run_workers_raw`](Self::run_workers_raw) check.
    fn checked_workgroup(
        &self,
        inputs: usize,
        outputs: usize,
        symbols: &[u64],
    ) -> Result<std::borrow::Cow<'_, [u64]>, RunError> {
        let workgroup = self.geometry.workgroup_ref(&self.name, symbols)?;
        self.geometry.check_tensors(&self.name, symbols)?;
        for (kind, declared, passed) in [
            ("input", self.geometry.inputs.len(), inputs),
            ("output", self.geometry.outputs.len(), outputs),
        ] {
            if declared != passed {
                return Err(RunError::TensorCount {
                    operator: self.name.clone(),
                    kind,
                    expected: declared,
                    got: passed,
                });
            }
        }
        Ok(workgroup)
    }

    /// [`run`](Self::run) on raw buffers, for callers that own the memory (the TensorFlow
    /// bridge runs operators on TensorFlow's tensors without copying). Only the counts and the
    /// symbol values are checked.
    ///
    /// # Safety
    /// `inputs[i]` must point to the contiguous row-major elements of input `i` of the
    /// operator's declared dtype and shape for the symbol values `symbols` (bool: one byte
    /// holding 0 or 1), readable for the whole call; `outputs[i]` likewise for output `i`,
    /// writable and not aliasing any other buffer passed.
    pub unsafe fn run_raw(
        &self,
        inputs: &[*const c_void],
        outputs: &[*mut c_void],
        symbols: &[u64],
        threads: usize,
    ) -> Result<(), RunError> {
        let workgroup = self.checked_workgroup(inputs.len(), outputs.len(), symbols)?;
        // SAFETY: forwarded to the caller.
        unsafe { self.launch(inputs, outputs, symbols, &workgroup, threads) }
    }

    /// Runs workers `[begin, end)` of the row-major flattened workgroup on the calling thread
    /// (the generated entry `ovl_run` takes a worker range): for a caller that schedules parts
    /// of the workgroup itself, such as the facade's GEMM epilogue, which runs the workers of
    /// each block of rows right after the block is computed. Checks as
    /// [`run_raw`](Self::run_raw), and that the range lies in the workgroup; a fault is
    /// reported as by `run_raw` (the first faulting worker of the range).
    ///
    /// # Safety
    /// As for [`run_raw`](Self::run_raw); ranges run concurrently must be disjoint.
    pub unsafe fn run_workers_raw(
        &self,
        inputs: &[*const c_void],
        outputs: &[*mut c_void],
        symbols: &[u64],
        (begin, end): (u64, u64),
    ) -> Result<(), RunError> {
        let workgroup = self.checked_workgroup(inputs.len(), outputs.len(), symbols)?;
        let workers = sizes::product(&workgroup);
        if begin > end || end > workers {
            return Err(RunError::WorkerRange {
                operator: self.name.clone(),
                workers,
                begin,
                end,
            });
        }
        if begin == end {
            return Ok(());
        }
        let symbols: Vec<i64> = symbols.iter().map(|&v| v as i64).collect();
        let ptrs = Pointers {
            inputs: inputs.as_ptr(),
            outputs: outputs.as_ptr(),
            symbols: symbols.as_ptr(),
        };
        let mut st = Status::default();
        // SAFETY: forwarded to the caller; the range lies in the workgroup.
        unsafe { call(self.run_fn, ptrs, begin, end, &mut st) };
        if st.code == 0 {
            return Ok(());
        }
        Err(fault_error(
            &self.name,
            &self.defined_at,
            &workgroup,
            &self.writes,
            &st,
        ))
    }

    /// Splits the workgroup (`workgroup`: resolved for `symbols`, which were checked) over
    /// `threads` threads and runs it on the given buffers.
    ///
    /// # Safety
    /// As for [`run_raw`](Self::run_raw), with the counts already checked.
    unsafe fn launch(
        &self,
        in_ptrs: &[*const c_void],
        out_ptrs: &[*mut c_void],
        symbols: &[u64],
        workgroup: &[u64],
        threads: usize,
    ) -> Result<(), RunError> {
        let workers = sizes::product(workgroup);
        if workers == 0 {
            return Ok(());
        }
        let cost = self.worker_cost.at(symbols);
        // Checked: every value is at most i64::MAX. On the stack for the common case of few
        // symbols (a run of a small operator allocates nothing here).
        const INLINE: usize = 8;
        let mut inline = [0i64; INLINE];
        let heap: Vec<i64>;
        let symbols: &[i64] = if symbols.len() <= INLINE {
            for (slot, &v) in inline.iter_mut().zip(symbols) {
                *slot = v as i64;
            }
            &inline[..symbols.len()]
        } else {
            heap = symbols.iter().map(|&v| v as i64).collect();
            &heap
        };
        let ptrs = Pointers {
            inputs: in_ptrs.as_ptr(),
            outputs: out_ptrs.as_ptr(),
            symbols: symbols.as_ptr(),
        };
        let parallel =
            threads != 1 && workers > 1 && workers.saturating_mul(cost) >= PARALLEL_MIN_WORK;
        let threads = match threads {
            _ if !parallel => 1,
            0 => cpu_count(),
            t => t,
        };
        // The pool is started only by the first run that splits its workgroup: a process
        // whose runs all stay on the calling thread starts no thread.
        let first = match (threads > 1).then(Pool::get).flatten() {
            Some(pool) => {
                let (size, chunks) = chunking(workers, cost, threads as u64, self.block);
                let next = std::sync::atomic::AtomicU64::new(0);
                let faults = std::sync::Mutex::new(Vec::<(u64, Status)>::new());
                let run_fn = self.run_fn;
                // Each thread takes the next chunk until none is left, so that a thread slowed
                // down (another process on its core) takes fewer chunks instead of holding the
                // whole run up.
                let drain = || loop {
                    let c = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if c >= chunks {
                        break;
                    }
                    let (lo, hi) = (c * size, ((c + 1) * size).min(workers));
                    let mut st = Status::default();
                    // SAFETY: see `call`.
                    unsafe { call(run_fn, ptrs, lo, hi, &mut st) };
                    if st.code != 0 {
                        faults
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push((c, st));
                    }
                };
                pool.run(threads.min(chunks as usize), &drain);
                // The fault of the first chunk that faulted: the first worker in order that
                // faulted, whichever thread ran it (as on one thread).
                faults
                    .into_inner()
                    .unwrap_or_else(|e| e.into_inner())
                    .into_iter()
                    .min_by_key(|(c, _)| *c)
                    .map(|(_, st)| st)
            }
            _ => {
                let mut st = Status::default();
                // SAFETY: see `call`.
                unsafe { call(self.run_fn, ptrs, 0, workers, &mut st) };
                (st.code != 0).then_some(st)
            }
        };
        match first {
            None => Ok(()),
            Some(st) => Err(fault_error(
                &self.name,
                &self.defined_at,
                workgroup,
                &self.writes,
                &st,
            )),
        }
    }
}

/// Runs workers `[lo, hi)`.
///
/// # Safety
/// `p` must hold one valid pointer per input and output of the operator `run_fn` was compiled
/// for, each to a buffer of the declared type (checked by `run`), alive for the call; ranges run
/// concurrently must be disjoint.
unsafe fn call(run_fn: RunFn, p: Pointers, lo: u64, hi: u64, st: &mut Status) {
    // SAFETY: forwarded to the caller.
    unsafe {
        run_fn(p.inputs, p.outputs, p.symbols, lo as i64, hi as i64, st);
    }
}

#[cfg(test)]
mod tests {
    use super::{chunking, CHUNKS_PER_THREAD, PARALLEL_MIN_WORK};
    use crate::cpu::pool::for_each_parallel;

    /// The chunks of a parallel run cover the workers once, at least one per thread, at most
    /// [`CHUNKS_PER_THREAD`] per thread, and whole blocks (of 64, or of the kernel's wider
    /// width) when longer than 64 workers.
    #[test]
    fn chunks_cover_the_workers_in_whole_blocks() {
        for workers in [1u64, 2, 3, 63, 64, 65, 100, 300, 1000, 1024, 4096, 100_003] {
            for cost in [1u64, 40, 10_000, 1 << 20] {
                for threads in [2u64, 3, 16] {
                    for block in [64u64, 128, 256] {
                        let what = format!("{workers} {cost} {threads} {block}");
                        let (size, count) = chunking(workers, cost, threads, block);
                        assert!(size >= 1 && count >= 1, "{what}");
                        assert!((count - 1) * size < workers && count * size >= workers);
                        assert!(count <= (threads * CHUNKS_PER_THREAD).max(1));
                        if size > 64 {
                            assert_eq!(size % block, 0, "{what}");
                        }
                        if workers * cost >= PARALLEL_MIN_WORK * threads {
                            assert!(count >= threads.min(workers.div_ceil(block)), "{what}");
                        }
                    }
                }
            }
        }
        // Softmax rows of [1024, 4096] on 2 threads: 8 chunks of 128 rows.
        assert_eq!(chunking(1024, 40_000, 2, 64), (128, 8));
        // Column statistics of [4096, 1024] in blocks of 256 on 2 threads: 4 chunks of 256.
        assert_eq!(chunking(1024, 40_000, 2, 256), (256, 4));
    }
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Every task runs exactly once, whatever the thread count (0: one per core) and however
    /// many tasks there are (none included).
    #[test]
    fn for_each_parallel_runs_every_task_once() {
        for threads in [0, 1, 2, 7] {
            for tasks in [0, 1, 3, 100] {
                let counts: Vec<AtomicUsize> = (0..tasks).map(|_| AtomicUsize::new(0)).collect();
                for_each_parallel(tasks, threads, &|i| {
                    counts[i].fetch_add(1, Ordering::Relaxed);
                });
                assert!(
                    counts.iter().all(|c| c.load(Ordering::Relaxed) == 1),
                    "{tasks} tasks on {threads} threads"
                );
            }
        }
    }
}

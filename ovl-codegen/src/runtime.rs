//! Loading a compiled operator and running it on host tensors, multi-threaded.

use crate::abi::{self, AbiVersionFn, CacheKeyFn, RunFn, Status, WorkerCountFn, ABI_VERSION};
use crate::error::{defined_at, Access, OutOfBounds, RunError};
use ovl_ir::ir::{self, Op, TensorKind};
use ovl_ir::{DType, HostTensor};
use std::ffi::{c_void, CStr};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

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
}

/// Where a call of [`crate::compile_with_outcome`] found the operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheOutcome {
    /// The C++ compiler ran.
    Compiled,
    /// The library was loaded from the on-disk cache (no compiler run).
    DiskCache,
    /// The operator was already loaded in this process (no file system access at all).
    Memory,
}

/// A tensor type: dtype and shape.
#[derive(Clone, Debug, PartialEq, Eq)]
struct TensorSig {
    dtype: DType,
    dtype_ir: i32,
    shape: Vec<usize>,
}

impl TensorSig {
    fn name(&self) -> String {
        format!("{}{:?}", self.dtype, self.shape)
    }
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
    inputs: Vec<TensorSig>,
    outputs: Vec<TensorSig>,
    workgroup: Vec<u64>,
    workers: u64,
    worker_cost: u64,
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

fn signatures(list: &[ir::TensorType]) -> Option<Vec<TensorSig>> {
    list.iter()
        .map(|t| {
            Some(TensorSig {
                dtype: DType::from_ir(t.dtype)?,
                dtype_ir: t.dtype,
                shape: t
                    .shape
                    .iter()
                    .map(|&d| usize::try_from(d).ok())
                    .collect::<Option<_>>()?,
            })
        })
        .collect()
}

/// Raw pointers handed to worker threads.
#[derive(Clone, Copy)]
struct Pointers {
    inputs: *const *const c_void,
    outputs: *const *mut c_void,
}
// SAFETY: the pointers are only dereferenced by generated code while `run` holds the borrows of
// the tensors they point into; disjoint worker ranges write through them concurrently, which is
// the contract of `ovl_run`.
unsafe impl Send for Pointers {}
unsafe impl Sync for Pointers {}

/// The number of CPUs this process may use (computed once: it costs a system call).
fn cpu_count() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| num_cpus::get().max(1))
}

fn pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(cpu_count().max(2) - 1)
            .thread_name(|i| format!("ovl-cpu-{i}"))
            .stack_size(16 << 20)
            .build()
            .ok()
    })
    .as_ref()
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
    ) -> Result<CompiledOperator, String> {
        let inputs = signatures(&dag.inputs).ok_or("an input type is not supported")?;
        let outputs = signatures(&dag.outputs).ok_or("an output type is not supported")?;
        let workers = dag
            .workgroup_shape
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(d))
            .filter(|&n| n <= i64::MAX as u64)
            .ok_or("the workgroup is too large")?;
        // SAFETY: loading a library runs its initializers; the libraries of the operator cache
        // are generated by this crate and have none besides the C++ runtime's.
        let library =
            unsafe { libloading::Library::new(library_path) }.map_err(|e| e.to_string())?;
        // SAFETY: the symbols are looked up with the signatures the generated code defines
        // (see `crate::abi`); the ABI version is checked before any other symbol is called.
        let run_fn = unsafe {
            let version = *library
                .get::<AbiVersionFn>(b"ovl_abi_version\0")
                .map_err(|e| e.to_string())?;
            let found = version();
            if found != ABI_VERSION {
                return Err(format!("ABI version {found}, expected {ABI_VERSION}"));
            }
            let key_fn = *library
                .get::<CacheKeyFn>(b"ovl_cache_key\0")
                .map_err(|e| e.to_string())?;
            let found = CStr::from_ptr(key_fn()).to_string_lossy();
            if found != key {
                return Err(format!("built for cache key {found}, expected {key}"));
            }
            let count = *library
                .get::<WorkerCountFn>(b"ovl_worker_count\0")
                .map_err(|e| e.to_string())?;
            if count() as u64 != workers {
                return Err(format!("built for {} workers, expected {workers}", count()));
            }
            *library
                .get::<RunFn>(b"ovl_run\0")
                .map_err(|e| e.to_string())?
        };
        Ok(CompiledOperator {
            name: dag.name.clone(),
            defined_at: defined_at(dag),
            key: key.to_string(),
            source_path,
            library_path: library_path.to_path_buf(),
            origin,
            inputs,
            outputs,
            workgroup: dag.workgroup_shape.clone(),
            workers,
            worker_cost: crate::cpp::worker_cost(dag),
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

    /// The workgroup shape.
    pub fn workgroup_shape(&self) -> &[u64] {
        &self.workgroup
    }

    /// The number of workers (the product of the workgroup shape).
    pub fn worker_count(&self) -> u64 {
        self.workers
    }

    fn check(
        &self,
        kind: &'static str,
        declared: &[TensorSig],
        passed: &mut dyn ExactSizeIterator<Item = &HostTensor>,
    ) -> Result<(), RunError> {
        if passed.len() != declared.len() {
            return Err(RunError::TensorCount {
                operator: self.name.clone(),
                kind,
                expected: declared.len(),
                got: passed.len(),
            });
        }
        for (k, (t, h)) in declared.iter().zip(passed).enumerate() {
            let consistent =
                h.shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)) == Some(h.len());
            if h.dtype().to_ir() as i32 != t.dtype_ir || h.shape != t.shape || !consistent {
                let mut got = format!("{}{:?}", h.dtype(), h.shape);
                if !consistent {
                    got += &format!(" holding {} elements", h.len());
                }
                return Err(RunError::TensorType {
                    operator: self.name.clone(),
                    tensor: format!("{kind} {k}"),
                    expected: t.name(),
                    got,
                });
            }
        }
        Ok(())
    }

    /// Runs the operator: `inputs` are read, `outputs` (allocated by the caller with the
    /// operator's output types, normally zero-filled: elements no worker writes keep their
    /// value) are written.
    ///
    /// The workgroup `[0, workers)` is split into contiguous chunks over `threads` threads
    /// (0: one per core). Small workgroups run on the calling thread. Counts, dtypes and shapes
    /// are checked first. A runtime fault (index out of bounds, non-positive range step) does
    /// not stop the evaluation; the first one (in row-major worker order) is returned.
    pub fn run(
        &self,
        inputs: &[&HostTensor],
        outputs: &mut [HostTensor],
        threads: usize,
    ) -> Result<(), RunError> {
        self.check("input", &self.inputs, &mut inputs.iter().copied())?;
        self.check("output", &self.outputs, &mut outputs.iter())?;
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
        unsafe { self.launch(in_ptrs, out_ptrs, threads) }
    }

    /// [`run`](Self::run) on raw buffers, for callers that own the memory (the TensorFlow
    /// bridge runs operators on TensorFlow's tensors without copying). Only the counts are
    /// checked.
    ///
    /// # Safety
    /// `inputs[i]` must point to the contiguous row-major elements of input `i` of the
    /// operator's declared dtype and shape (bool: one byte holding 0 or 1), readable for the
    /// whole call; `outputs[i]` likewise for output `i`, writable and not aliasing any other
    /// buffer passed.
    pub unsafe fn run_raw(
        &self,
        inputs: &[*const c_void],
        outputs: &[*mut c_void],
        threads: usize,
    ) -> Result<(), RunError> {
        for (kind, declared, passed) in [
            ("input", self.inputs.len(), inputs.len()),
            ("output", self.outputs.len(), outputs.len()),
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
        // SAFETY: forwarded to the caller.
        unsafe { self.launch(inputs, outputs, threads) }
    }

    /// Splits the workgroup over `threads` threads and runs it on the given buffers.
    ///
    /// # Safety
    /// As for [`run_raw`](Self::run_raw), with the counts already checked.
    unsafe fn launch(
        &self,
        in_ptrs: &[*const c_void],
        out_ptrs: &[*mut c_void],
        threads: usize,
    ) -> Result<(), RunError> {
        let ptrs = Pointers {
            inputs: in_ptrs.as_ptr(),
            outputs: out_ptrs.as_ptr(),
        };
        let workers = self.workers;
        let parallel = threads != 1
            && workers > 1
            && workers.saturating_mul(self.worker_cost) >= PARALLEL_MIN_WORK;
        let threads = match threads {
            _ if !parallel => 1,
            0 => cpu_count(),
            t => t,
        };
        let first = match pool() {
            Some(pool) if threads > 1 => {
                let chunks = (threads as u64).min(workers);
                let size = workers.div_ceil(chunks);
                let chunks = workers.div_ceil(size);
                let mut statuses = vec![Status::default(); chunks as usize];
                let run_fn = self.run_fn;
                pool.in_place_scope(|s| {
                    let mut rest = statuses.iter_mut().enumerate();
                    let first = rest.next();
                    for (c, st) in rest {
                        s.spawn(move |_| {
                            let p = ptrs;
                            let (lo, hi) = (c as u64 * size, ((c as u64 + 1) * size).min(workers));
                            // SAFETY: see `call`.
                            unsafe { call(run_fn, p, lo, hi, st) };
                        });
                    }
                    if let Some((_, st)) = first {
                        // SAFETY: see `call`.
                        unsafe { call(run_fn, ptrs, 0, size.min(workers), st) };
                    }
                });
                statuses.into_iter().find(|s| s.code != 0)
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
            Some(st) => Err(self.fault(&st)),
        }
    }

    fn fault(&self, st: &Status) -> RunError {
        fault_error(
            &self.name,
            &self.defined_at,
            &self.workgroup,
            &self.writes,
            st,
        )
    }
}

/// The position of a flattened worker index in a workgroup.
fn position(workgroup: &[u64], worker: i64) -> Vec<u64> {
    let mut rest = worker.max(0) as u64;
    let mut p = vec![0; workgroup.len()];
    for a in (0..p.len()).rev() {
        let d = workgroup[a].max(1);
        p[a] = rest % d;
        rest /= d;
    }
    p
}

/// The error for a fault status of the generated code (shared by the C++ and CUDA runtimes).
/// `writes[k]` says whether expression `k` is a WRITE.
pub(crate) fn fault_error(
    name: &str,
    defined_at: &str,
    workgroup: &[u64],
    writes: &[bool],
    st: &Status,
) -> RunError {
    let position = position(workgroup, st.worker);
    let expression = st.expression.max(0) as usize;
    match st.code {
        abi::STATUS_OUT_OF_BOUNDS => {
            let kind = match TensorKind::try_from(st.tensor_kind) {
                Ok(TensorKind::Input) => "input",
                Ok(TensorKind::Output) => "output",
                Ok(TensorKind::Local) => "local",
                _ => "tensor",
            };
            let index = if st.index_signed != 0 {
                st.index_bits as i64 as i128
            } else {
                st.index_bits as i128
            };
            RunError::IndexOutOfBounds(Box::new(OutOfBounds {
                operator: name.to_string(),
                defined_at: defined_at.to_string(),
                expression,
                access: if writes.get(expression).copied().unwrap_or(false) {
                    Access::Write
                } else {
                    Access::Read
                },
                tensor: format!("{kind} {}", st.tensor_index),
                axis: st.axis.max(0) as usize,
                index,
                size: st.size,
                position,
            }))
        }
        abi::STATUS_NON_POSITIVE_STEP => RunError::NonPositiveStep {
            operator: name.to_string(),
            defined_at: defined_at.to_string(),
            expression,
            step: st.step,
            position,
        },
        code => RunError::Internal {
            operator: name.to_string(),
            message: format!("unknown status code {code} from the generated code"),
        },
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
        run_fn(p.inputs, p.outputs, lo as i64, hi as i64, st);
    }
}

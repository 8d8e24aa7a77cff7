//! The CUDA backend: generates CUDA C++ from an operator, compiles it with NVRTC (CUDA 12 or
//! 13, loaded at run time) into PTX or CUBIN kept in the operator cache, validates PTX with
//! `ptxas` where no GPU is present. Loading and running the kernels is `ovl-runtime`'s `cuda`
//! module (which re-exports this one's names).
//!
//! ```no_run
//! # fn demo(dag: &ovl_ir::ir::ExpressionDag) -> anyhow::Result<()> {
//! use ovl_codegen::cuda::{self, CudaCompileOptions};
//! // Without a GPU: compile to PTX for sm_90 and assemble it with ptxas.
//! let artifact = cuda::validate(dag, 90, &CudaCompileOptions::default())?;
//! println!("{}", artifact.binary_path().display());
//! # Ok(()) }
//! ```
//!
//! - [`generate_cuda`]: the emitter (the worker program is shared with the C++ backend).
//! - [`compile`], [`compile_with_outcome`]: NVRTC and the operator cache (layout below).
//! - [`validate`]: NVRTC to PTX, then `ptxas` for an architecture: needs no GPU.
//! - [`nvrtc_status`], [`ptxas_path`]: what this machine has.
//!
//! Cache layout: `<root>/v1/cuda/<key>/` holds `op.cu` (the source), `op.ptx` or `op.cubin` and
//! `meta`, plus a `lock` file; the key hashes the operator's canonical hash, the CUDA codegen
//! version, the NVRTC version, the architecture, the output kind and the NVRTC options. Writes
//! are atomic and compilations of one key are serialized between processes, as for C++.
//!
//! Finding the tools (each the first that exists):
//! - libnvrtc, CUDA 12 or 13: `$OVL_NVRTC_LIB` (a file or a directory; when set, nothing else
//!   is tried), the `nvidia-cuda-nvrtc-cu12` then the `nvidia-cuda-nvrtc` (13) wheel in a Python
//!   environment (`$OVL_PYTHON`'s, `$VIRTUAL_ENV`, this project's `.venv`),
//!   `$CUDA_HOME`/`$CUDA_PATH`/`/usr/local/cuda` (`lib64`, `targets/x86_64-linux/lib`), then
//!   the dynamic loader's own search for `libnvrtc.so.13`, `.12`, `libnvrtc.so`. It is called
//!   through ovl's own binding ([`Nvrtc`]), not `cudarc`'s, which knows only the library names
//!   of the CUDA version it was built for.
//! - ptxas: `$OVL_PTXAS`, the `nvidia-cuda-nvcc-cu12` and `nvidia-cuda-nvcc` (13) wheels in
//!   those Python environments (CUDA 13's first when NVRTC is 13: an older ptxas rejects newer
//!   PTX), the CUDA toolkit, then `PATH`.
//! - the driver (libcuda.so.1): the dynamic loader's search (it comes with the NVIDIA driver).
//!
//! `cudarc` (the driver API) panics when a library is missing; this module checks for each library first and
//! also contains any panic, so that a missing library is always a [`crate::CodegenError`].
//!
//! Environment: `OVL_FORCE_RECOMPILE=1` and `OVL_DUMP_SOURCE=1` work as for the C++ backend;
//! `OVL_NVRTC_LIB`, `OVL_PTXAS`, `OVL_PYTHON`, `VIRTUAL_ENV` and `CUDA_HOME` locate the tools.

mod cache;
mod frame;
pub mod library_search;
mod nvrtc;
mod ptxas;

pub use cache::{compile, compile_with_outcome, forget_root, memory_cache, CudaArtifact};
pub use frame::{generate_cuda, workers_per_thread, KERNEL_NAME};
pub use nvrtc::{get as nvrtc_info, nvrtc_libraries, nvrtc_status, Nvrtc, NvrtcInfo};
pub use ptxas::{ptxas_path, validate};

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;

/// The version of the generated CUDA; part of every CUDA cache key.
pub const CUDA_CODEGEN_VERSION: &str = "ovl-codegen-cuda-10";

/// The default number of threads per block.
pub const DEFAULT_BLOCK_SIZE: u32 = 256;

/// What NVRTC produces.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CudaBinary {
    /// PTX for `compute_XX` (portable; the driver JIT-compiles it; `ptxas` validates it).
    #[default]
    Ptx,
    /// CUBIN for `sm_XX` (machine code for exactly that architecture: no JIT at load).
    Cubin,
}

impl CudaBinary {
    /// The file name in the cache entry.
    pub fn file_name(self) -> &'static str {
        match self {
            CudaBinary::Ptx => "op.ptx",
            CudaBinary::Cubin => "op.cubin",
        }
    }
}

/// How to compile (and launch) an operator for CUDA.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CudaCompileOptions {
    /// The cache root (default: [`crate::cache_dir`]).
    pub cache_dir: Option<PathBuf>,
    /// Compile even if the on-disk cache holds the operator (also `OVL_FORCE_RECOMPILE=1`).
    /// Within one process, code compiled by this process is reused.
    pub force_recompile: bool,
    /// Print the generated source and its path to stderr (also `OVL_DUMP_SOURCE=1`).
    pub dump_source: bool,
    /// The architecture for [`compile`] (like 90 for `sm_90`). `ovl_runtime::cuda::load` uses the device's own
    /// and ignores it; [`validate`] takes its own.
    pub arch: u32,
    /// PTX or CUBIN for [`compile`] (`ovl_runtime::cuda::load` prefers CUBIN for the device's architecture,
    /// [`validate`] needs PTX).
    pub binary: CudaBinary,
    /// Threads per block at launch (a multiple of 32 up to 1024; 0: [`DEFAULT_BLOCK_SIZE`]).
    pub block_size: u32,
    /// Options appended to [`nvrtc_options`] (part of the cache key).
    pub extra_options: Vec<String>,
}

impl Default for CudaCompileOptions {
    fn default() -> Self {
        CudaCompileOptions {
            cache_dir: None,
            force_recompile: false,
            dump_source: false,
            arch: 80,
            binary: CudaBinary::Ptx,
            block_size: 0,
            extra_options: Vec::new(),
        }
    }
}

impl CudaCompileOptions {
    /// The default options.
    pub fn new() -> Self {
        Self::default()
    }

    /// The same options with another cache root.
    pub fn with_cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cache_dir = Some(dir.into());
        self
    }

    /// The same options, forcing recompilation or not.
    pub fn with_force_recompile(mut self, force: bool) -> Self {
        self.force_recompile = force;
        self
    }

    /// The same options, printing the generated source or not.
    pub fn with_dump_source(mut self, dump: bool) -> Self {
        self.dump_source = dump;
        self
    }

    /// The same options for another architecture and output kind.
    pub fn with_target(mut self, arch: u32, binary: CudaBinary) -> Self {
        self.arch = arch;
        self.binary = binary;
        self
    }

    /// The same options with another block size (for kernels of one thread per worker; a row
    /// kernel run by groups of threads, `ovl_ir::cooperative`, launches the block its code was
    /// generated for).
    pub fn with_block_size(mut self, block_size: u32) -> Self {
        self.block_size = block_size;
        self
    }

    /// The block size to launch with (a valid one, whatever was asked).
    pub fn effective_block_size(&self) -> u32 {
        match self.block_size {
            0 => DEFAULT_BLOCK_SIZE,
            b => (b.clamp(32, 1024) / 32) * 32,
        }
    }
}

/// The complete NVRTC option list for an architecture and output kind.
pub(crate) fn full_options(arch: u32, binary: CudaBinary, extra: &[String]) -> Vec<String> {
    let mut o = nvrtc_options();
    o.push(match binary {
        CudaBinary::Ptx => format!("--gpu-architecture=compute_{arch}"),
        CudaBinary::Cubin => format!("--gpu-architecture=sm_{arch}"),
    });
    o.extend(extra.iter().cloned());
    o
}

/// The NVRTC options every operator is compiled with (before the architecture and
/// [`CudaCompileOptions::extra_options`]): C++17, no FMA contraction (the IR's semantics: FMA is
/// explicit), IEEE division and square root, no flush of denormals to zero.
pub fn nvrtc_options() -> Vec<String> {
    [
        "--std=c++17",
        "--fmad=false",
        "--prec-div=true",
        "--prec-sqrt=true",
        "--ftz=false",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// How many NVRTC compilations and ptxas validations ran (see [`stats`], [`thread_stats`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CudaStats {
    /// NVRTC compilations of operators.
    pub nvrtc_compiles: u64,
    /// ptxas validations per architecture (like 90 for `sm_90`).
    pub ptxas_validations: BTreeMap<u32, u64>,
}

static STATS: Mutex<CudaStats> = Mutex::new(CudaStats {
    nvrtc_compiles: 0,
    ptxas_validations: BTreeMap::new(),
});

thread_local! {
    static THREAD_STATS: RefCell<CudaStats> = RefCell::new(CudaStats::default());
}

/// The NVRTC compilations and ptxas validations of this process (a warm cache adds none).
pub fn stats() -> CudaStats {
    STATS.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Like [`stats`], counting only the work done on the calling thread (tests running in parallel
/// can each report their own).
pub fn thread_stats() -> CudaStats {
    THREAD_STATS.with(|s| s.borrow().clone())
}

fn count(update: impl Fn(&mut CudaStats)) {
    update(&mut STATS.lock().unwrap_or_else(|p| p.into_inner()));
    THREAD_STATS.with(|s| update(&mut s.borrow_mut()));
}

/// Runs `f`, turning a panic (cudarc panics when a library or a symbol is missing) into `Err`.
pub fn no_panic<T>(what: &str, f: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|p| {
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "unknown panic".into());
        format!("{what}: {msg}")
    })
}

/// Python environments that may hold the NVIDIA wheels: `$OVL_PYTHON`'s, `$VIRTUAL_ENV`, and
/// this project's `.venv` (next to the workspace this crate was built in).
pub fn python_environments() -> Vec<PathBuf> {
    let mut envs = Vec::new();
    if let Some(py) = std::env::var_os("OVL_PYTHON").filter(|v| !v.is_empty()) {
        // <env>/bin/python: the path as given (a venv's python is a symlink out of the env).
        if let Some(env) = PathBuf::from(py).parent().and_then(|b| b.parent()) {
            envs.push(env.to_path_buf());
        }
    }
    if let Some(v) = std::env::var_os("VIRTUAL_ENV").filter(|v| !v.is_empty()) {
        envs.push(PathBuf::from(v));
    }
    let project = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.venv");
    envs.push(project.canonicalize().unwrap_or(project));
    envs.dedup();
    envs
}

/// `<env>/lib/python3.*/site-packages/<relative>` for each Python environment that has it.
pub fn in_python_environments(relative: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for env in python_environments() {
        let Ok(entries) = std::fs::read_dir(env.join("lib")) else {
            continue;
        };
        let mut dirs: Vec<PathBuf> = entries
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
            .map(|e| e.path().join("site-packages").join(relative))
            .collect();
        dirs.sort();
        found.extend(dirs);
    }
    found
}

/// CUDA toolkit roots: `$CUDA_HOME`, `$CUDA_PATH`, `/usr/local/cuda`.
pub(crate) fn toolkit_roots() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(|v| std::env::var_os(v).filter(|v| !v.is_empty()))
        .map(PathBuf::from)
        .collect();
    roots.push(PathBuf::from("/usr/local/cuda"));
    roots
}

/// `sm_XX` of an architecture number.
pub(crate) fn sm(arch: u32) -> String {
    format!("sm_{arch}")
}

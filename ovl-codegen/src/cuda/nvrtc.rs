//! Finding and loading libnvrtc (CUDA 12 or 13, whichever the machine has), and compiling CUDA
//! source with it.
//!
//! NVRTC is called through this module's own small binding, opened from an absolute path with
//! `libloading`: the handful of entry points ovl uses (create, compile, log, PTX, CUBIN,
//! destroy, version, supported architectures) have had the same C signatures from CUDA 11 to
//! CUDA 13, so one binding serves every major version. (`cudarc`'s NVRTC bindings look the
//! library up by the names of the CUDA version they were built for, so a machine with only
//! `libnvrtc.so.13` could not use them.)

use super::library_search::{entry_point, Search};
use super::{count, in_python_environments, no_panic, toolkit_roots, CudaBinary};
use crate::error::{CodegenError, CudaCompileFailure};
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The NVRTC this process uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NvrtcInfo {
    /// The library loaded by absolute path, or `None` when the dynamic loader found it by name.
    pub path: Option<PathBuf>,
    /// `(major, minor)` from `nvrtcVersion`.
    pub version: (i32, i32),
    /// The architectures NVRTC can target (like 90 for `sm_90`).
    pub archs: Vec<u32>,
}

/// `nvrtcResult` (0 is success).
type NvResult = c_int;
/// `nvrtcProgram`.
type Program = *mut c_void;
const NVRTC_SUCCESS: NvResult = 0;

type CreateProgram = unsafe extern "C" fn(
    *mut Program,
    *const c_char,
    *const c_char,
    c_int,
    *const *const c_char,
    *const *const c_char,
) -> NvResult;
type CompileProgram = unsafe extern "C" fn(Program, c_int, *const *const c_char) -> NvResult;
type DestroyProgram = unsafe extern "C" fn(*mut Program) -> NvResult;
type GetSize = unsafe extern "C" fn(Program, *mut usize) -> NvResult;
type GetBytes = unsafe extern "C" fn(Program, *mut c_char) -> NvResult;
type Version = unsafe extern "C" fn(*mut c_int, *mut c_int) -> NvResult;
type NumArchs = unsafe extern "C" fn(*mut c_int) -> NvResult;
type Archs = unsafe extern "C" fn(*mut c_int) -> NvResult;
type ErrorString = unsafe extern "C" fn(NvResult) -> *const c_char;

/// The entry points of one loaded libnvrtc.
struct Api {
    create: CreateProgram,
    compile: CompileProgram,
    destroy: DestroyProgram,
    log_size: GetSize,
    log: GetBytes,
    ptx_size: GetSize,
    ptx: GetBytes,
    cubin_size: GetSize,
    cubin: GetBytes,
    error_string: ErrorString,
}

/// One loaded libnvrtc: its entry points, version and architectures. Several can be loaded in
/// one process (a test compiles with NVRTC 12 and 13 side by side); [`crate::cuda::compile`]
/// uses the one [`nvrtc_status`] reports.
pub struct Nvrtc {
    api: Api,
    info: NvrtcInfo,
    /// Keeps the entry points valid; last, so it is dropped after them.
    _library: libloading::Library,
}

impl std::fmt::Debug for Nvrtc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nvrtc").field("info", &self.info).finish()
    }
}

impl Nvrtc {
    /// Loads libnvrtc from `path` (a file, or a bare name like `libnvrtc.so.13` for the dynamic
    /// loader's search). The error says what was wrong: no such library, not NVRTC (a missing
    /// entry point), or `nvrtcVersion` failing.
    pub fn open(path: &Path) -> Result<Nvrtc, CodegenError> {
        Self::load(path).map_err(|message| CodegenError::NvrtcNotFound {
            message: format!("{}: {message}", path.display()),
            searched: vec![path.to_path_buf()],
        })
    }

    fn load(path: &Path) -> Result<Nvrtc, String> {
        let by_name = path.components().count() == 1;
        // SAFETY: loading libnvrtc runs its initializers, which have no preconditions.
        let library = unsafe { libloading::Library::new(path.as_os_str()) }
            .map_err(|e| format!("cannot load it: {e}"))?;
        // Every `T` below is the C signature NVRTC documents for the name.
        fn sym<T: Copy>(library: &libloading::Library, name: &str) -> Result<T, String> {
            entry_point(library, name, "an NVRTC library")
        }
        let api = Api {
            create: sym(&library, "nvrtcCreateProgram")?,
            compile: sym(&library, "nvrtcCompileProgram")?,
            destroy: sym(&library, "nvrtcDestroyProgram")?,
            log_size: sym(&library, "nvrtcGetProgramLogSize")?,
            log: sym(&library, "nvrtcGetProgramLog")?,
            ptx_size: sym(&library, "nvrtcGetPTXSize")?,
            ptx: sym(&library, "nvrtcGetPTX")?,
            cubin_size: sym(&library, "nvrtcGetCUBINSize")?,
            cubin: sym(&library, "nvrtcGetCUBIN")?,
            error_string: sym(&library, "nvrtcGetErrorString")?,
        };
        let version: Version = sym(&library, "nvrtcVersion")?;
        let (mut major, mut minor) = (0 as c_int, 0 as c_int);
        // SAFETY: two valid out-pointers.
        let r = unsafe { version(&mut major, &mut minor) };
        if r != NVRTC_SUCCESS {
            return Err(format!("nvrtcVersion failed with status {r}"));
        }
        // Older NVRTCs lack these two; then every architecture is assumed.
        let num: Result<NumArchs, _> = sym(&library, "nvrtcGetNumSupportedArchs");
        let get: Result<Archs, _> = sym(&library, "nvrtcGetSupportedArchs");
        let archs = match (num, get) {
            (Ok(num), Ok(get)) => {
                let mut n: c_int = 0;
                // SAFETY: a valid out-pointer; then a buffer of the size NVRTC reported.
                unsafe {
                    if num(&mut n) != NVRTC_SUCCESS || n <= 0 {
                        Vec::new()
                    } else {
                        let mut v = vec![0 as c_int; n as usize];
                        if get(v.as_mut_ptr()) != NVRTC_SUCCESS {
                            Vec::new()
                        } else {
                            v.into_iter().map(|a| a.max(0) as u32).collect()
                        }
                    }
                }
            }
            _ => Vec::new(),
        };
        Ok(Nvrtc {
            api,
            info: NvrtcInfo {
                path: (!by_name).then(|| path.to_path_buf()),
                version: (major, minor),
                archs,
            },
            _library: library,
        })
    }

    /// The library's path, version and architectures.
    pub fn info(&self) -> &NvrtcInfo {
        &self.info
    }

    /// Compiles CUDA source (like [`crate::cuda::generate_cuda`]'s) with this NVRTC for `arch`
    /// with ovl's options ([`crate::cuda::nvrtc_options`]): PTX for `compute_<arch>` or CUBIN
    /// for `sm_<arch>`. Bypasses the operator cache; a rejection carries NVRTC's log.
    pub fn compile(
        &self,
        source: &str,
        arch: u32,
        binary: CudaBinary,
    ) -> Result<Vec<u8>, CodegenError> {
        let options = super::full_options(arch, binary, &[]);
        self.compile_source(source, "source.cu", binary, &options)
            .map(|(bytes, _)| bytes)
            .map_err(|f| {
                CodegenError::CudaCompileFailed(Box::new(CudaCompileFailure {
                    operator: "(source given to Nvrtc::compile)".into(),
                    defined_at: String::new(),
                    tool: "NVRTC".into(),
                    arch: super::sm(arch),
                    command: options.join(" "),
                    source_path: PathBuf::from("source.cu"),
                    log: format!("{}\n{}", f.message, f.log),
                }))
            })
    }

    /// Compiles `source` with `options` (which name the architecture: `compute_XX` for PTX,
    /// `sm_XX` for CUBIN); returns the bytes (PTX without its trailing NUL) and NVRTC's log.
    pub(crate) fn compile_source(
        &self,
        source: &str,
        file_name: &str,
        binary: CudaBinary,
        options: &[String],
    ) -> Result<(Vec<u8>, String), NvrtcFailure> {
        let fail = |message: String| NvrtcFailure {
            message,
            log: String::new(),
        };
        let src = CString::new(source).map_err(|_| fail("the source holds a NUL byte".into()))?;
        let name = CString::new(file_name).map_err(|_| fail("bad file name".into()))?;
        let opts: Vec<CString> = options
            .iter()
            .map(|o| CString::new(o.as_str()))
            .collect::<Result<_, _>>()
            .map_err(|_| fail("an option holds a NUL byte".into()))?;
        let opt_ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
        count(|s| s.nvrtc_compiles += 1);
        let api = &self.api;
        let outcome = no_panic("NVRTC", || {
            let mut prog: Program = std::ptr::null_mut();
            // SAFETY: valid NUL-terminated strings, no headers; the program is destroyed below.
            let r = unsafe {
                (api.create)(
                    &mut prog,
                    src.as_ptr(),
                    name.as_ptr(),
                    0,
                    std::ptr::null(),
                    std::ptr::null(),
                )
            };
            if r != NVRTC_SUCCESS {
                return Err(fail(format!(
                    "nvrtcCreateProgram failed: {}",
                    self.error_string(r)
                )));
            }
            // SAFETY: `prog` is a live program; option pointers outlive the call.
            let compiled =
                unsafe { (api.compile)(prog, opt_ptrs.len() as c_int, opt_ptrs.as_ptr()) };
            // SAFETY: `prog` is live; buffers are sized as NVRTC reports.
            let log = unsafe { self.read(prog, api.log_size, api.log) }
                .map(|b| String::from_utf8_lossy(trim_nul(&b)).into_owned())
                .unwrap_or_default();
            let result = if compiled != NVRTC_SUCCESS {
                Err(NvrtcFailure {
                    message: format!("compilation failed: {}", self.error_string(compiled)),
                    log,
                })
            } else {
                let (size, get) = match binary {
                    CudaBinary::Ptx => (api.ptx_size, api.ptx),
                    CudaBinary::Cubin => (api.cubin_size, api.cubin),
                };
                // SAFETY: as above; the program compiled.
                match unsafe { self.read(prog, size, get) } {
                    Err(message) => Err(NvrtcFailure { message, log }),
                    Ok(mut buf) => {
                        if binary == CudaBinary::Ptx {
                            let len = trim_nul(&buf).len();
                            buf.truncate(len);
                        }
                        if buf.is_empty() {
                            Err(NvrtcFailure {
                                message: "NVRTC produced no output".into(),
                                log,
                            })
                        } else {
                            Ok((buf, log))
                        }
                    }
                }
            };
            // SAFETY: destroys the program created above, once.
            unsafe {
                (api.destroy)(&mut prog);
            }
            result
        });
        match outcome {
            Ok(r) => r,
            Err(message) => Err(fail(message)),
        }
    }

    /// Reads one of a program's outputs (log, PTX, CUBIN) through its size and copy functions.
    ///
    /// # Safety
    /// `prog` must be a live NVRTC program of this library.
    unsafe fn read(&self, prog: Program, size: GetSize, get: GetBytes) -> Result<Vec<u8>, String> {
        let mut n = 0usize;
        // SAFETY: forwarded; the buffer has the size NVRTC reported.
        unsafe {
            let r = size(prog, &mut n);
            if r != NVRTC_SUCCESS {
                return Err(format!(
                    "cannot get the output size: {}",
                    self.error_string(r)
                ));
            }
            let mut buf = vec![0u8; n];
            if n > 0 {
                let r = get(prog, buf.as_mut_ptr() as *mut c_char);
                if r != NVRTC_SUCCESS {
                    return Err(format!("cannot get the output: {}", self.error_string(r)));
                }
            }
            Ok(buf)
        }
    }

    fn error_string(&self, r: NvResult) -> String {
        // SAFETY: nvrtcGetErrorString returns a static string (or null).
        let p = unsafe { (self.api.error_string)(r) };
        if p.is_null() {
            format!("NVRTC status {r}")
        } else {
            // SAFETY: non-null static NUL-terminated string.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    }
}

/// The library names tried, newest major version first where no place is preferred.
const NAMES: [&str; 3] = ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"];

/// Where NVRTC is looked for: `OVL_NVRTC_LIB`, the CUDA 12 then the CUDA 13 wheel, the toolkit,
/// the loader's path.
pub(crate) const SEARCH: Search = Search {
    env: "OVL_NVRTC_LIB",
    names: &NAMES,
    wheels: &[
        "nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
        "nvidia/cu13/lib/libnvrtc.so.13",
    ],
    what: "libnvrtc",
};

/// Every NVRTC library in the Python environments and CUDA toolkits this process looks in (see
/// [`crate::cuda`]), whether or not it is the one in use, ignoring `OVL_NVRTC_LIB`: what a test
/// that compiles with each NVRTC version present iterates over.
pub fn nvrtc_libraries() -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = Vec::new();
    let mut c = in_python_environments("nvidia/cuda_nvrtc/lib/libnvrtc.so.12");
    c.extend(in_python_environments("nvidia/cu13/lib/libnvrtc.so.13"));
    for root in toolkit_roots() {
        for dir in ["lib64", "targets/x86_64-linux/lib"] {
            for n in NAMES {
                c.push(root.join(dir).join(n));
            }
        }
    }
    for p in c {
        let real = p.canonicalize().unwrap_or_else(|_| p.clone());
        if p.is_file()
            && !found
                .iter()
                .any(|f| f.canonicalize().ok() == Some(real.clone()))
        {
            found.push(p);
        }
    }
    found
}

fn load() -> Result<Nvrtc, CodegenError> {
    SEARCH
        .load(Nvrtc::load)
        .map_err(|(message, searched)| CodegenError::NvrtcNotFound { message, searched })
}

fn cached() -> &'static Result<Nvrtc, String> {
    static NVRTC: OnceLock<Result<Nvrtc, String>> = OnceLock::new();
    NVRTC.get_or_init(|| load().map_err(|e| e.to_string()))
}

/// The NVRTC of this process, found and loaded once (see the module documentation of
/// [`crate::cuda`] for where it is looked for).
pub(crate) fn library() -> Result<&'static Nvrtc, CodegenError> {
    match cached() {
        Ok(nvrtc) => Ok(nvrtc),
        Err(_) => Err(load().err().unwrap_or_else(|| CodegenError::NvrtcNotFound {
            message: "NVRTC failed to load earlier in this process".into(),
            searched: Vec::new(),
        })),
    }
}

/// The version and architectures of this process's NVRTC (found once per process).
pub fn get() -> Result<&'static NvrtcInfo, CodegenError> {
    library().map(|n| &n.info)
}

/// Whether NVRTC can be loaded, and which: `Err` says what is missing and how to install it.
pub fn nvrtc_status() -> Result<NvrtcInfo, CodegenError> {
    get().cloned()
}

/// Why an NVRTC compilation failed: the message and NVRTC's log.
pub(crate) struct NvrtcFailure {
    pub message: String,
    pub log: String,
}

/// Compiles with this process's NVRTC (see [`Nvrtc::compile_source`]).
pub(crate) fn compile_source(
    source: &str,
    file_name: &str,
    binary: CudaBinary,
    options: &[String],
) -> Result<(Vec<u8>, String), NvrtcFailure> {
    library()
        .map_err(|e| NvrtcFailure {
            message: e.to_string(),
            log: String::new(),
        })?
        .compile_source(source, file_name, binary, options)
}

fn trim_nul(b: &[u8]) -> &[u8] {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    &b[..end]
}

/// The file name NVRTC reports in diagnostics: the cache path of the source.
pub(crate) fn source_name(path: &Path) -> String {
    path.display().to_string()
}

//! Finding and loading libnvrtc, and compiling CUDA source with it (through `cudarc`'s
//! dynamically loaded NVRTC bindings).

use super::{count, in_python_environments, no_panic, toolkit_roots, CudaBinary};
use crate::error::CodegenError;
use cudarc::nvrtc::sys;
use std::ffi::{c_char, c_int, CStr, CString};
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

/// The candidate paths of libnvrtc, in order, and whether they came from `OVL_NVRTC_LIB` (then
/// nothing else is tried).
fn candidates() -> (Vec<PathBuf>, bool) {
    let names = ["libnvrtc.so.12", "libnvrtc.so.13", "libnvrtc.so"];
    if let Some(v) = std::env::var_os("OVL_NVRTC_LIB").filter(|v| !v.is_empty()) {
        let p = PathBuf::from(v);
        if p.is_dir() {
            return (names.iter().map(|n| p.join(n)).collect(), true);
        }
        return (vec![p], true);
    }
    let mut c = Vec::new();
    c.extend(in_python_environments(
        "nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
    ));
    c.extend(in_python_environments("nvidia/cu13/lib/libnvrtc.so.13"));
    for root in toolkit_roots() {
        for n in names {
            c.push(root.join("lib64").join(n));
        }
    }
    (c, false)
}

fn load() -> Result<NvrtcInfo, CodegenError> {
    let (candidates, explicit) = candidates();
    let mut loaded = None;
    let mut errors = Vec::new();
    for c in &candidates {
        if !c.is_file() {
            continue;
        }
        // SAFETY: loading libnvrtc runs its initializers, which have no preconditions. The
        // handle is leaked on purpose: NVRTC stays loaded for the life of the process so that
        // cudarc's by-name lookup finds this copy.
        let flags = libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_GLOBAL;
        match unsafe { libloading::os::unix::Library::open(Some(c), flags) } {
            Ok(lib) => {
                std::mem::forget(lib);
                loaded = Some(c.clone());
                break;
            }
            Err(e) => errors.push(format!("{}: {e}", c.display())),
        }
    }
    if loaded.is_none() && explicit {
        return Err(CodegenError::NvrtcNotFound {
            message: if errors.is_empty() {
                "OVL_NVRTC_LIB names no existing library".into()
            } else {
                format!("OVL_NVRTC_LIB: {}", errors.join("; "))
            },
            searched: candidates,
        });
    }
    // SAFETY: only tries to open libraries by name.
    let present = no_panic("looking for libnvrtc", || unsafe {
        sys::is_culib_present()
    })
    .unwrap_or(false);
    if !present {
        return Err(CodegenError::NvrtcNotFound {
            message: if errors.is_empty() {
                "no libnvrtc in the places below nor on the dynamic loader's path".into()
            } else {
                errors.join("; ")
            },
            searched: candidates,
        });
    }
    let not_found = |message: String| CodegenError::NvrtcNotFound {
        message,
        searched: candidates.clone(),
    };
    let (mut major, mut minor) = (0 as c_int, 0 as c_int);
    // SAFETY: two valid out-pointers.
    let r = no_panic("nvrtcVersion", || unsafe {
        sys::nvrtcVersion(&mut major, &mut minor)
    })
    .map_err(not_found)?;
    if r != sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(not_found(format!("nvrtcVersion failed: {r:?}")));
    }
    let mut n: c_int = 0;
    // SAFETY: a valid out-pointer; then a buffer of the size NVRTC reported.
    let archs = no_panic("nvrtcGetSupportedArchs", || unsafe {
        if sys::nvrtcGetNumSupportedArchs(&mut n) != sys::nvrtcResult::NVRTC_SUCCESS || n <= 0 {
            return Vec::new();
        }
        let mut v = vec![0 as c_int; n as usize];
        if sys::nvrtcGetSupportedArchs(v.as_mut_ptr()) != sys::nvrtcResult::NVRTC_SUCCESS {
            return Vec::new();
        }
        v.into_iter().map(|a| a.max(0) as u32).collect()
    })
    .map_err(not_found)?;
    Ok(NvrtcInfo {
        path: loaded,
        version: (major, minor),
        archs,
    })
}

fn cached() -> &'static Result<NvrtcInfo, String> {
    static NVRTC: OnceLock<Result<NvrtcInfo, String>> = OnceLock::new();
    NVRTC.get_or_init(|| load().map_err(|e| e.to_string()))
}

/// NVRTC, found and loaded once per process (see the module documentation for where it is
/// looked for).
pub(crate) fn get() -> Result<&'static NvrtcInfo, CodegenError> {
    match cached() {
        Ok(info) => Ok(info),
        Err(_) => Err(load().err().unwrap_or_else(|| CodegenError::NvrtcNotFound {
            message: "NVRTC failed to load earlier in this process".into(),
            searched: Vec::new(),
        })),
    }
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

/// Compiles `source` with `options` (which name the architecture: `compute_XX` for PTX,
/// `sm_XX` for CUBIN); returns the bytes (PTX without its trailing NUL) and NVRTC's log.
pub(crate) fn compile_source(
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
    let outcome = no_panic("NVRTC", || {
        let mut prog: sys::nvrtcProgram = std::ptr::null_mut();
        // SAFETY: valid NUL-terminated strings, no headers; the program is destroyed below.
        let r = unsafe {
            sys::nvrtcCreateProgram(
                &mut prog,
                src.as_ptr(),
                name.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        if r != sys::nvrtcResult::NVRTC_SUCCESS {
            return Err(fail(format!(
                "nvrtcCreateProgram failed: {}",
                error_string(r)
            )));
        }
        // SAFETY: `prog` is a live program; option pointers outlive the call.
        let compiled =
            unsafe { sys::nvrtcCompileProgram(prog, opt_ptrs.len() as c_int, opt_ptrs.as_ptr()) };
        // SAFETY: `prog` is live; buffers are sized as NVRTC reports.
        let log = unsafe { program_log(prog) };
        let result = if compiled != sys::nvrtcResult::NVRTC_SUCCESS {
            Err(NvrtcFailure {
                message: format!("compilation failed: {}", error_string(compiled)),
                log,
            })
        } else {
            // SAFETY: as above.
            unsafe { output(prog, binary) }
                .map(|bytes| (bytes, log.clone()))
                .map_err(|message| NvrtcFailure { message, log })
        };
        // SAFETY: destroys the program created above, once.
        unsafe {
            sys::nvrtcDestroyProgram(&mut prog);
        }
        result
    });
    match outcome {
        Ok(r) => r,
        Err(message) => Err(fail(message)),
    }
}

fn error_string(r: sys::nvrtcResult) -> String {
    // SAFETY: nvrtcGetErrorString returns a static string (or null).
    let p = unsafe { sys::nvrtcGetErrorString(r) };
    if p.is_null() {
        format!("{r:?}")
    } else {
        // SAFETY: non-null static NUL-terminated string.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// # Safety
/// `prog` must be a live NVRTC program.
unsafe fn program_log(prog: sys::nvrtcProgram) -> String {
    let mut n = 0usize;
    // SAFETY: forwarded.
    unsafe {
        if sys::nvrtcGetProgramLogSize(prog, &mut n) != sys::nvrtcResult::NVRTC_SUCCESS || n == 0 {
            return String::new();
        }
        let mut buf = vec![0u8; n];
        if sys::nvrtcGetProgramLog(prog, buf.as_mut_ptr() as *mut c_char)
            != sys::nvrtcResult::NVRTC_SUCCESS
        {
            return String::new();
        }
        String::from_utf8_lossy(trim_nul(&buf)).into_owned()
    }
}

/// # Safety
/// `prog` must be a live, successfully compiled NVRTC program.
unsafe fn output(prog: sys::nvrtcProgram, binary: CudaBinary) -> Result<Vec<u8>, String> {
    let mut n = 0usize;
    // SAFETY: forwarded; the buffer has the size NVRTC reported.
    unsafe {
        let r = match binary {
            CudaBinary::Ptx => sys::nvrtcGetPTXSize(prog, &mut n),
            CudaBinary::Cubin => sys::nvrtcGetCUBINSize(prog, &mut n),
        };
        if r != sys::nvrtcResult::NVRTC_SUCCESS {
            return Err(format!("cannot get the output size: {}", error_string(r)));
        }
        let mut buf = vec![0u8; n];
        let r = match binary {
            CudaBinary::Ptx => sys::nvrtcGetPTX(prog, buf.as_mut_ptr() as *mut c_char),
            CudaBinary::Cubin => sys::nvrtcGetCUBIN(prog, buf.as_mut_ptr() as *mut c_char),
        };
        if r != sys::nvrtcResult::NVRTC_SUCCESS {
            return Err(format!("cannot get the output: {}", error_string(r)));
        }
        if binary == CudaBinary::Ptx {
            let len = trim_nul(&buf).len();
            buf.truncate(len);
        }
        if buf.is_empty() {
            return Err("NVRTC produced no output".into());
        }
        Ok(buf)
    }
}

fn trim_nul(b: &[u8]) -> &[u8] {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    &b[..end]
}

/// The file name NVRTC reports in diagnostics: the cache path of the source.
pub(crate) fn source_name(path: &Path) -> String {
    path.display().to_string()
}

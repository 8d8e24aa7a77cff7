//! Finding a CUDA library ovl loads at run time through its own binding (NVRTC, cuBLAS): the
//! candidate paths in order and the first that loads. One rule for both: an environment
//! variable (a file or a directory) replaces the search; otherwise the wheels in the Python
//! environments, the CUDA toolkits, then the dynamic loader's own search by name.

use super::{in_python_environments, no_panic, toolkit_roots};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Copies the entry point `name` out of `library` (valid while it stays loaded); the error
/// says the library is not `what` (like "an NVRTC library"). `T` must be the C signature the
/// library documents for `name`.
pub fn entry_point<T: Copy>(
    library: &libloading::Library,
    name: &str,
    what: &str,
) -> Result<T, String> {
    // SAFETY: the callers name each entry point with the signature its library documents.
    unsafe { library.get::<T>(name.as_bytes()) }
        .map(|s| *s)
        .map_err(|e| format!("not {what} (no `{name}`: {e})"))
}

/// Where one library is looked for.
pub struct Search {
    /// The environment variable naming the library (or a directory holding it).
    pub env: &'static str,
    /// Its file names, in the order tried (like `libnvrtc.so.13`, `.12`, `libnvrtc.so`).
    pub names: &'static [&'static str],
    /// Its paths inside a Python environment's `site-packages`, in the order tried.
    pub wheels: &'static [&'static str],
    /// The library's short name in messages (`libnvrtc`).
    pub what: &'static str,
}

impl Search {
    /// The candidate paths, in order, and whether they came from the environment variable
    /// (then nothing else is tried). Bare names at the end are for the dynamic loader.
    pub fn candidates(&self) -> (Vec<PathBuf>, bool) {
        self.candidates_for(std::env::var_os(self.env))
    }

    /// [`Search::candidates`] for a value of the environment variable.
    pub fn candidates_for(&self, explicit: Option<OsString>) -> (Vec<PathBuf>, bool) {
        if let Some(v) = explicit.filter(|v| !v.is_empty()) {
            let p = PathBuf::from(v);
            if p.is_dir() {
                return (self.names.iter().map(|n| p.join(n)).collect(), true);
            }
            return (vec![p], true);
        }
        let mut c = Vec::new();
        for wheel in self.wheels {
            c.extend(in_python_environments(wheel));
        }
        for root in toolkit_roots() {
            for dir in ["lib64", "targets/x86_64-linux/lib", "lib"] {
                for n in self.names {
                    c.push(root.join(dir).join(n));
                }
            }
        }
        c.extend(self.names.iter().map(PathBuf::from));
        (c, false)
    }

    /// The first candidate `open` loads; otherwise why none did (each failure, or that none
    /// was found) and the candidates tried. `open`'s error for a library the dynamic loader
    /// cannot load starts with "cannot load": for a bare name that is no news (the loader's
    /// search found nothing) and is left out of the message.
    pub fn load<T>(
        &self,
        open: impl Fn(&Path) -> Result<T, String>,
    ) -> Result<T, (String, Vec<PathBuf>)> {
        let (candidates, explicit) = self.candidates();
        let mut errors = Vec::new();
        for c in &candidates {
            let by_name = c.components().count() == 1;
            if !by_name && !c.is_file() {
                continue;
            }
            match no_panic(&format!("loading {}", self.what), || open(c)) {
                Ok(Ok(library)) => return Ok(library),
                Ok(Err(e)) if by_name && e.starts_with("cannot load") => {}
                Ok(Err(e)) | Err(e) => errors.push(format!("{}: {e}", c.display())),
            }
        }
        let message = match (errors.is_empty(), explicit) {
            (true, true) => format!("{} names no existing library", self.env),
            (true, false) => format!(
                "no {} in the places below nor on the dynamic loader's path",
                self.what
            ),
            (false, true) => format!("{}: {}", self.env, errors.join("; ")),
            (false, false) => errors.join("; "),
        };
        Err((message, candidates))
    }
}

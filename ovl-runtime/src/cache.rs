//! The operator cache as a whole: where it is ([`cache_dir`]), its in-memory parts and how to
//! empty it. Its C++ entries are
//! [`crate::cpu::cache`], its CUDA entries `ovl_codegen::cuda`'s, both written by one entry
//! protocol (`ovl_codegen::shared::cache_entry`).

use ovl_codegen::CodegenError;
use ovl_ir::lru::CacheControl;
use std::fs;
use std::path::Path;

pub use ovl_codegen::shared::cache_entry::{cache_dir, CACHE_LAYOUT, MODULES_CAPACITY};

/// The in-memory caches of this crate, in the order C++ libraries, CUDA artifacts, CUDA
/// functions loaded onto the GPU (see [`ovl_ir::lru`]).
pub fn memory_caches() -> [&'static dyn CacheControl; 3] {
    [
        crate::cpu::cache::memory_cache(),
        ovl_codegen::cuda::memory_cache(),
        crate::cuda::loaded_cache(),
    ]
}

/// Removes every compiled operator from the default cache ([`cache_dir`]) and forgets the ones
/// loaded in this process (libraries already loaded stay usable).
pub fn clear_cache() -> Result<(), CodegenError> {
    clear_cache_at(&cache_dir())
}

/// Like [`clear_cache`] for the cache rooted at `root`: removes its layout directories (`v1`,
/// and those of other layout versions).
pub fn clear_cache_at(root: &Path) -> Result<(), CodegenError> {
    crate::cpu::cache::forget_root(root);
    ovl_codegen::cuda::forget_root(root);
    let entries = match fs::read_dir(root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(CodegenError::Cache {
                action: "read",
                path: root.to_path_buf(),
                source,
            })
        }
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let ours = name.len() > 1
            && name.starts_with('v')
            && name[1..].chars().all(|c| c.is_ascii_digit());
        if ours {
            let path = entry.path();
            fs::remove_dir_all(&path).or_else(|e| match e.kind() {
                std::io::ErrorKind::NotFound => Ok(()),
                _ => Err(CodegenError::Cache {
                    action: "remove",
                    path,
                    source: e,
                }),
            })?;
        }
    }
    Ok(())
}

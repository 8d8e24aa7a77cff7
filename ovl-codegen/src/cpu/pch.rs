//! The prelude compiled once as a precompiled header (GCC's `.gch`).
//!
//! Every generated source starts with the same prelude (about 12 KB of templates and
//! includes), which each compiler run would otherwise parse again: a quarter of the time of
//! compiling a small kernel, and a layer's forward + backward compiles 18 of them. So per cache
//! root and toolchain, `<root>/v1/cpu-prelude/<key>/ovl_prelude.h` holds the prelude and
//! `ovl_prelude.h.gch` its precompiled form, and a kernel is compiled from a *stub*: its source
//! with the prelude replaced by an `#include` of that header. The cache entry keeps the full
//! source (`op.cpp`, self-contained); the stub is a temporary file.
//!
//! Never at the cost of correctness: GCC checks a `.gch` against the compilation's flags and
//! parses the header itself when it cannot use it, and a stub that fails to compile is compiled
//! again from the full source (whose errors are the ones reported). Other compilers (Clang
//! finds precompiled headers only through `-include-pch`) compile the full source.

use super::compiler::Toolchain;
use crate::shared::prelude::CPP as PRELUDE;
use sha2::{Digest as _, Sha256};
use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

/// The header's file name; GCC looks for `<name>.gch` beside it.
const HEADER: &str = "ovl_prelude.h";

/// The precompiled prelude's header for `toolchain` under the cache root `root`, made when it
/// is not there (the header and its `.gch` are written under temporary names and renamed into
/// place, so concurrent processes never see a partial file; one thread of this process makes
/// them while the others wait), or `None` when the compiler is not GCC or the header could not
/// be made in this process before (the caller compiles full sources).
pub fn header(toolchain: &Toolchain, root: &Path) -> Option<PathBuf> {
    if !is_gcc(&toolchain.version) {
        return None;
    }
    static FAILED: OnceLock<Mutex<HashSet<PathBuf>>> = OnceLock::new();
    let dir = root
        .join(crate::CACHE_LAYOUT)
        .join("cpu-prelude")
        .join(key(toolchain));
    let mut failed = FAILED
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if failed.contains(&dir) {
        return None;
    }
    let header = make(toolchain, &dir);
    if header.is_none() {
        failed.insert(dir);
    }
    header
}

/// Whether the compiler's `--version` line names GCC's C++ compiler.
fn is_gcc(version: &str) -> bool {
    let v = version.to_ascii_lowercase();
    !v.contains("clang") && (v.starts_with("g++") || v.contains("gcc") || v.contains("c++ ("))
}

/// 32 hex digits of SHA-256 over the toolchain's fingerprint and the prelude.
fn key(toolchain: &Toolchain) -> String {
    let mut h = Sha256::new();
    h.update(toolchain.fingerprint);
    h.update(PRELUDE.as_bytes());
    ovl_ir::hash::hex(&h.finalize()[..16])
}

/// Writes the header and compiles its `.gch` in `dir` unless both are there.
fn make(toolchain: &Toolchain, dir: &Path) -> Option<PathBuf> {
    // Absolute: a quoted `#include` is looked up beside the including file, not in the
    // compiler's working directory (a relative cache root, `target/...`, would not be found).
    let dir = &std::path::absolute(dir).ok()?;
    let header = dir.join(HEADER);
    let gch = dir.join(format!("{HEADER}.gch"));
    if header.is_file() && gch.is_file() {
        return Some(header);
    }
    fs::create_dir_all(dir).ok()?;
    let unique = format!("{}.{}", std::process::id(), unique_suffix());
    if !header.is_file() {
        let tmp = dir.join(format!("{HEADER}.{unique}.tmp"));
        fs::write(&tmp, PRELUDE).ok()?;
        fs::rename(&tmp, &header).ok()?;
    }
    // Compiled from the header's final path (GCC records it), into a temporary name.
    let tmp = dir.join(format!("{HEADER}.gch.{unique}.tmp"));
    let mut c = Command::new(&toolchain.path);
    c.args(toolchain.flags.iter().filter(|f| *f != "-shared"))
        .args(["-x", "c++-header"])
        .arg(&header)
        .arg("-o")
        .arg(&tmp);
    for (k, v) in &toolchain.env {
        c.env(k, v);
    }
    let ok = c.output().is_ok_and(|out| out.status.success());
    if !ok || fs::rename(&tmp, &gch).is_err() {
        let _ = fs::remove_file(&tmp);
        return None;
    }
    Some(header)
}

/// A number no other temporary file of this process has.
fn unique_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stub_includes_the_header_in_place_of_the_prelude() {
        let source = format!("// head\n{PRELUDE}\nnamespace {{}}\n");
        let s =
            super::super::compiler::stub(&source, Path::new("/c/ovl_prelude.h")).expect("a stub");
        assert_eq!(
            s,
            "// head\n#include \"/c/ovl_prelude.h\"\n\nnamespace {}\n"
        );
        assert!(super::super::compiler::stub("int x;", Path::new("/c/h")).is_none());
        let twice = format!("{PRELUDE}{PRELUDE}");
        assert!(super::super::compiler::stub(&twice, Path::new("/c/h")).is_none());
    }

    #[test]
    fn gcc_is_told_from_clang() {
        assert!(is_gcc("g++ (Debian 12.2.0-14+deb12u1) 12.2.0"));
        assert!(is_gcc("c++ (GCC) 13.2.1 20231011"));
        assert!(!is_gcc("clang version 17.0.6"));
        assert!(!is_gcc("Apple clang version 15.0.0 (clang-1500.3.9.4)"));
        assert!(!is_gcc("Intel(R) oneAPI DPC++/C++ Compiler 2024.0.0"));
    }
}

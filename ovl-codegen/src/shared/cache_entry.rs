//! One entry of the on-disk operator cache, for both backends: `<root>/v1/cpu/<key>/` (C++:
//! `op.cpp`, `op.so`) and `<root>/v1/cuda/<key>/` (CUDA: `op.cu`, `op.ptx` or `op.cubin`), each
//! with `meta` and `lock`.
//!
//! The protocol ([`get_or_build`]):
//! 1. Without the lock, read the artifact and check it against `meta`, which records its length
//!    and SHA-256 digest when it is written. A valid artifact that the backend accepts is a disk
//!    hit; the backend never sees an artifact that fails the check.
//! 2. Otherwise create the entry directory, take an exclusive lock on `lock` (builds of one key
//!    are serialized between processes) and check again: another process may have built it in
//!    the meantime.
//! 3. Still missing or damaged (or forced): build. Every file is written to a unique temporary
//!    name in the entry and renamed into place, so readers never see a partial file; `meta`
//!    (with the artifact's length and digest) is renamed into place before the artifact.
//!
//! A damaged artifact (truncated, empty, extended, altered, or with a `meta` that is missing or
//! records no length and digest, as older versions of ovl wrote it) is a miss and is rebuilt: a
//! truncated shared library would otherwise crash the process with SIGBUS when it is loaded. When
//! the rebuild cannot write (a read-only cache), the error names the damaged file and says what
//! to do ([`CodegenError::DamagedEntry`]). An unlocked reader that races with a writer may see a
//! new `meta` with an old artifact: that is a mismatch, so it takes the lock and checks again.

use crate::error::CodegenError;
use sha2::{Digest as _, Sha256};
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// How many loaded operators each in-memory cache of this crate keeps (C++ libraries, CUDA
/// artifacts, CUDA functions loaded onto the GPU) unless `ovl::set_cache_capacity` says
/// otherwise. An evicted operator stays usable by whoever holds it (a plan); the next lookup
/// loads it again from the operator cache on disk.
pub const MODULES_CAPACITY: usize = 1024;

/// Where a call of `ovl_runtime::compile_with_outcome` found the operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheOutcome {
    /// The C++ compiler ran.
    Compiled,
    /// The library was loaded from the on-disk cache (no compiler run).
    DiskCache,
    /// The operator was already loaded in this process (no file system access at all).
    Memory,
}

/// The default cache root: `$OVL_CACHE_DIR` if set and not empty, else `ovl` in the user cache
/// directory (`~/.cache/ovl` on Linux), else `ovl-cache` in the temporary directory.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("OVL_CACHE_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    static DEFAULT: OnceLock<PathBuf> = OnceLock::new();
    DEFAULT
        .get_or_init(|| match directories::BaseDirs::new() {
            Some(b) => b.cache_dir().join("ovl"),
            None => std::env::temp_dir().join("ovl-cache"),
        })
        .clone()
}

pub fn env_flag(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// Prints a generated source file (`language`: `C++`, `CUDA`) to stderr for `OVL_DUMP_SOURCE`.
pub fn dump_source_file(language: &str, operator: &str, path: &Path) {
    match fs::read_to_string(path) {
        Ok(src) => eprintln!(
            "ovl: {language} source of operator `{operator}` ({}):\n{src}\novl: end of {}",
            path.display(),
            path.display()
        ),
        Err(e) => eprintln!(
            "ovl: cannot read the {language} source of operator `{operator}` at {}: {e}",
            path.display()
        ),
    }
}

/// The version of the on-disk layout: the name of the subdirectory of the cache root.
pub const CACHE_LAYOUT: &str = "v1";

/// The backend an entry belongs to: the directory under `<root>/v1/`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// C++ entries: `cpu/`.
    Cpu,
    /// CUDA entries: `cuda/`.
    Cuda,
}

impl Backend {
    fn dir_name(self) -> &'static str {
        match self {
            Backend::Cpu => "cpu",
            Backend::Cuda => "cuda",
        }
    }
}

/// The `meta` lines that the integrity check reads; they come first in `meta`, before the lines
/// that describe the key for people.
const ARTIFACT_FIELD: &str = "artifact: ";
const LENGTH_FIELD: &str = "artifact length: ";
const DIGEST_FIELD: &str = "artifact sha256: ";

/// One cache entry: its directory and the name of its artifact (`op.so`, `op.ptx`, `op.cubin`).
#[derive(Clone, Debug)]
pub struct Entry {
    dir: PathBuf,
    artifact: &'static str,
}

/// What a check of an entry's artifact against its `meta` found.
#[derive(Debug, PartialEq, Eq)]
pub enum Check {
    /// The artifact's bytes, with the length and digest that `meta` records.
    Valid(Vec<u8>),
    /// There is no artifact.
    Missing,
    /// The artifact is there but cannot be trusted: why.
    Damaged(String),
}

impl Entry {
    /// The entry of `key` for `backend` in the cache rooted at `root`, whose artifact is the file
    /// `artifact`.
    pub fn new(root: &Path, backend: Backend, key: &str, artifact: &'static str) -> Entry {
        Entry {
            dir: root.join(CACHE_LAYOUT).join(backend.dir_name()).join(key),
            artifact,
        }
    }

    /// A file of the entry.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The artifact's path.
    pub fn artifact_path(&self) -> PathBuf {
        self.file(self.artifact)
    }

    /// Reads the artifact and checks its length and digest against `meta`.
    pub fn check(&self) -> Check {
        let bytes = match fs::read(self.artifact_path()) {
            Ok(b) => b,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                ) =>
            {
                return Check::Missing
            }
            Err(e) => return Check::Damaged(format!("it cannot be read: {e}")),
        };
        let meta = match fs::read(self.file("meta")) {
            Ok(m) => String::from_utf8_lossy(&m).into_owned(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Check::Damaged("its `meta` file is missing".into())
            }
            Err(e) => return Check::Damaged(format!("its `meta` file cannot be read: {e}")),
        };
        let Some((length, digest)) = recorded(&meta) else {
            return Check::Damaged(
                "its `meta` file records no length and digest for it (written by an older \
                 version of ovl, or edited)"
                    .into(),
            );
        };
        if bytes.len() as u64 != length {
            return Check::Damaged(format!(
                "it has {} bytes, its `meta` file records {length}",
                bytes.len()
            ));
        }
        if sha256_hex(&bytes) != digest {
            return Check::Damaged(
                "its SHA-256 digest differs from the one its `meta` file records".into(),
            );
        }
        Check::Valid(bytes)
    }
}

/// The artifact length and digest that `meta` records, if it records both.
fn recorded(meta: &str) -> Option<(u64, String)> {
    let field = |name: &str| meta.lines().find_map(|l| l.strip_prefix(name));
    let length = field(LENGTH_FIELD)?.trim().parse().ok()?;
    let digest = field(DIGEST_FIELD)?.trim();
    let hex = digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit());
    hex.then(|| (length, digest.to_ascii_lowercase()))
}

fn sha256_hex(bytes: &[u8]) -> String {
    ovl_ir::hash::hex(&Sha256::digest(bytes))
}

/// Finds the entry's artifact or builds it, by the protocol of the module documentation.
///
/// `accept` turns a valid artifact (its path and bytes) into the backend's value, or says why the
/// backend rejects it (then it is rebuilt like a damaged one). `build` runs with the lock held
/// and writes the entry through the [`Writer`]; it is skipped on a hit. With `force`, the disk is
/// not read and `build` always runs (still under the lock).
pub fn get_or_build<T>(
    entry: &Entry,
    force: bool,
    accept: impl Fn(&Path, Vec<u8>) -> Result<T, String>,
    build: impl FnOnce(&Writer<'_>) -> Result<T, CodegenError>,
) -> Result<(T, CacheOutcome), CodegenError> {
    // Ok: a hit; Err(None): missing; Err(Some(why)): damaged.
    let look = || -> Result<T, Option<String>> {
        match entry.check() {
            Check::Valid(bytes) => accept(&entry.artifact_path(), bytes).map_err(Some),
            Check::Missing => Err(None),
            Check::Damaged(why) => Err(Some(why)),
        }
    };
    let mut damage = None;
    if !force {
        match look() {
            Ok(t) => return Ok((t, CacheOutcome::DiskCache)),
            Err(why) => damage = why,
        }
    }
    let result = (|| {
        let writer = Writer::lock(entry)?;
        if !force {
            // Another process may have built it while this one waited.
            match look() {
                Ok(t) => return Ok((t, CacheOutcome::DiskCache)),
                Err(why) => damage = why,
            }
        }
        build(&writer).map(|t| (t, CacheOutcome::Compiled))
    })();
    result.map_err(|e| match (damage, e) {
        (_, CodegenError::Cache { .. }) if not_a_directory(&entry.dir).is_some() => {
            CodegenError::CacheNotADirectory {
                path: not_a_directory(&entry.dir).unwrap_or_default(),
            }
        }
        (Some(reason), e @ CodegenError::Cache { .. }) => CodegenError::DamagedEntry {
            path: entry.artifact_path(),
            reason,
            source: Box::new(e),
        },
        (_, e) => e,
    })
}

/// The first path at or above `dir` that exists but is not a directory (a cache root that is a
/// regular file), if any.
fn not_a_directory(dir: &Path) -> Option<PathBuf> {
    dir.ancestors()
        .find(|p| p.symlink_metadata().is_ok())
        .filter(|p| !p.is_dir())
        .map(Path::to_path_buf)
}

/// Writes one entry while holding its lock (released when dropped).
#[derive(Debug)]
pub struct Writer<'a> {
    entry: &'a Entry,
    _lock: fs::File,
}

impl<'a> Writer<'a> {
    /// Creates the entry directory and takes the exclusive lock on its `lock` file.
    fn lock(entry: &'a Entry) -> Result<Writer<'a>, CodegenError> {
        fs::create_dir_all(&entry.dir).map_err(io_err("create", &entry.dir))?;
        let lock_path = entry.file("lock");
        let lock = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io_err("open", &lock_path))?;
        // A failure to lock (file systems without locks) only costs duplicate work.
        let _ = fs4::fs_std::FileExt::lock_exclusive(&lock);
        Ok(Writer { entry, _lock: lock })
    }

    /// Writes a file of the entry (a generated source) atomically.
    pub fn write(&self, name: &str, bytes: &[u8]) -> Result<(), CodegenError> {
        write_atomic(&self.entry.dir, name, bytes)
    }

    /// A new, uniquely named temporary file in the entry for a tool to write the artifact to
    /// (`.op.XXXXXX.so` for `op.so`); removed when dropped unless published.
    pub fn temp_artifact(&self) -> Result<tempfile::TempPath, CodegenError> {
        let (stem, ext) = self
            .entry
            .artifact
            .split_once('.')
            .unwrap_or((self.entry.artifact, "tmp"));
        Ok(tempfile::Builder::new()
            .prefix(&format!(".{stem}."))
            .suffix(&format!(".{ext}"))
            .tempfile_in(&self.entry.dir)
            .map_err(io_err("create a temporary file in", &self.entry.dir))?
            .into_temp_path())
    }

    /// Publishes an artifact a tool wrote to [`Writer::temp_artifact`]: syncs it, writes `meta`
    /// (`description`, after its length and digest) and renames it into place.
    pub fn publish_file(
        &self,
        tmp: tempfile::TempPath,
        description: &str,
    ) -> Result<PathBuf, CodegenError> {
        let bytes = fs::read(&tmp).map_err(io_err("read", &tmp))?;
        fs::File::open(&tmp)
            .and_then(|f| f.sync_data())
            .map_err(io_err("sync", &tmp))?;
        self.write_meta(&bytes, description)?;
        let target = self.entry.artifact_path();
        tmp.persist(&target)
            .map_err(|e| io_err("rename a temporary file to", &target)(e.error))?;
        Ok(target)
    }

    /// Publishes an artifact held in memory: writes `meta` (`description`, after the artifact's
    /// length and digest), then the artifact, atomically.
    pub fn publish_bytes(&self, bytes: &[u8], description: &str) -> Result<PathBuf, CodegenError> {
        self.write_meta(bytes, description)?;
        write_atomic(&self.entry.dir, self.entry.artifact, bytes)?;
        Ok(self.entry.artifact_path())
    }

    fn write_meta(&self, artifact: &[u8], description: &str) -> Result<(), CodegenError> {
        let meta = format!(
            "{ARTIFACT_FIELD}{}\n{LENGTH_FIELD}{}\n{DIGEST_FIELD}{}\n{description}",
            self.entry.artifact,
            artifact.len(),
            sha256_hex(artifact),
        );
        write_atomic(&self.entry.dir, "meta", meta.as_bytes())
    }
}

/// A function that wraps an I/O error on `path` into [`CodegenError::Cache`].
pub fn io_err(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> CodegenError {
    let path = path.to_path_buf();
    move |source| CodegenError::Cache {
        action,
        path,
        source,
    }
}

/// Writes `bytes` to `dir/name` atomically (a unique temporary file, synced, then a rename).
pub fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), CodegenError> {
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".tmp")
        .tempfile_in(dir)
        .map_err(io_err("create a temporary file in", dir))?;
    tmp.write_all(bytes)
        .and_then(|_| tmp.as_file().sync_data())
        .map_err(io_err("write", tmp.path()))?;
    let target = dir.join(name);
    tmp.persist(&target)
        .map_err(|e| io_err("rename a temporary file to", &target)(e.error))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    //! The protocol with fake artifacts (no compiler, no NVRTC): the CUDA entries `op.ptx` and
    //! `op.cubin` and the C++ entry `op.so`, each damaged in every way, each rebuilt.

    use super::*;
    use std::cell::Cell;

    /// The artifact a fake build writes (long enough to truncate to a few bytes).
    fn artifact_bytes(name: &str) -> Vec<u8> {
        let mut v = format!("fake {name} for ovl tests\n").into_bytes();
        v.extend((0..5000u32).map(|i| (i * 7 % 251) as u8));
        v
    }

    /// Looks up (or builds) the entry; returns the outcome and the bytes found or built, and
    /// counts builds.
    fn get(entry: &Entry, builds: &Cell<u32>) -> Result<(Vec<u8>, CacheOutcome), CodegenError> {
        let expected = artifact_bytes(entry.artifact);
        get_or_build(
            entry,
            false,
            |path, bytes| {
                assert_eq!(path, entry.artifact_path());
                Ok(bytes)
            },
            |w| {
                builds.set(builds.get() + 1);
                w.write("op.src", b"source")?;
                w.publish_bytes(&expected, "operator: fake\n")?;
                Ok(expected.clone())
            },
        )
    }

    /// Every kind of damage, as (name, what it does to the entry).
    type Damage = (&'static str, fn(&Entry));
    fn damages() -> Vec<Damage> {
        fn set_len(e: &Entry, n: u64) {
            let f = fs::OpenOptions::new()
                .write(true)
                .open(e.artifact_path())
                .unwrap();
            f.set_len(n).unwrap();
        }
        vec![
            ("truncated", |e| set_len(e, 4000)),
            ("empty", |e| set_len(e, 0)),
            ("extended", |e| {
                let mut f = fs::OpenOptions::new()
                    .append(true)
                    .open(e.artifact_path())
                    .unwrap();
                f.write_all(b"appended bytes").unwrap();
            }),
            ("bit-flipped", |e| {
                let mut b = fs::read(e.artifact_path()).unwrap();
                b[100] ^= 0x10;
                fs::write(e.artifact_path(), b).unwrap();
            }),
            ("meta of an older version", |e| {
                fs::write(e.file("meta"), "operator: fake\n").unwrap();
            }),
            ("meta missing", |e| fs::remove_file(e.file("meta")).unwrap()),
            ("meta with a bad digest", |e| {
                let meta = fs::read_to_string(e.file("meta")).unwrap();
                let meta: String = meta
                    .lines()
                    .map(|l| match l.strip_prefix(DIGEST_FIELD) {
                        Some(_) => format!("{DIGEST_FIELD}{}\n", "0".repeat(64)),
                        None => format!("{l}\n"),
                    })
                    .collect();
                fs::write(e.file("meta"), meta).unwrap();
            }),
        ]
    }

    #[test]
    fn damaged_artifacts_are_misses_and_are_rebuilt() {
        let root = tempfile::tempdir().unwrap();
        for (backend, artifact) in [
            (Backend::Cuda, "op.ptx"),
            (Backend::Cuda, "op.cubin"),
            (Backend::Cpu, "op.so"),
        ] {
            let entry = Entry::new(root.path(), backend, "0123456789abcdef", artifact);
            let expected = artifact_bytes(artifact);
            let builds = Cell::new(0);
            assert_eq!(entry.check(), Check::Missing);
            assert_eq!(
                get(&entry, &builds).unwrap(),
                (expected.clone(), CacheOutcome::Compiled)
            );
            assert_eq!(entry.check(), Check::Valid(expected.clone()));
            assert_eq!(
                get(&entry, &builds).unwrap(),
                (expected.clone(), CacheOutcome::DiskCache)
            );
            let meta = fs::read_to_string(entry.file("meta")).unwrap();
            assert!(
                meta.starts_with(&format!(
                    "artifact: {artifact}\nartifact length: {}\nartifact sha256: ",
                    expected.len()
                )) && meta.ends_with("operator: fake\n"),
                "{meta}"
            );
            for (name, damage) in damages() {
                damage(&entry);
                let Check::Damaged(why) = entry.check() else {
                    panic!("{artifact} {name}: not detected")
                };
                println!("{artifact} {name}: {why}");
                let before = builds.get();
                let (bytes, outcome) = get(&entry, &builds).unwrap();
                assert_eq!(outcome, CacheOutcome::Compiled, "{artifact} {name}");
                assert_eq!(bytes, expected, "{artifact} {name}");
                assert_eq!(builds.get(), before + 1, "{artifact} {name}");
                assert_eq!(entry.check(), Check::Valid(expected.clone()));
            }
            // No temporary file is left behind.
            let stray: Vec<_> = fs::read_dir(&entry.dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with('.'))
                .collect();
            assert!(stray.is_empty(), "{stray:?}");
        }
    }

    #[test]
    fn a_rejected_artifact_is_rebuilt() {
        let root = tempfile::tempdir().unwrap();
        let entry = Entry::new(root.path(), Backend::Cpu, "k", "op.so");
        let builds = Cell::new(0);
        get(&entry, &builds).unwrap();
        let accepted = Cell::new(0);
        let (_, outcome) = get_or_build(
            &entry,
            false,
            |_, _| {
                accepted.set(accepted.get() + 1);
                Err::<(), _>("the loader says no".to_string())
            },
            |_| Ok(()),
        )
        .unwrap();
        // Checked without the lock and again with it, then rebuilt.
        assert_eq!((outcome, accepted.get()), (CacheOutcome::Compiled, 2));
    }

    #[test]
    fn forcing_builds_without_reading() {
        let root = tempfile::tempdir().unwrap();
        let entry = Entry::new(root.path(), Backend::Cuda, "k", "op.ptx");
        let builds = Cell::new(0);
        get(&entry, &builds).unwrap();
        let (_, outcome) = get_or_build(
            &entry,
            true,
            |_, _| -> Result<(), String> { panic!("a forced build reads nothing") },
            |_| Ok(()),
        )
        .unwrap();
        assert_eq!(outcome, CacheOutcome::Compiled);
    }

    #[test]
    fn a_damaged_entry_that_cannot_be_rewritten_is_a_clear_error() {
        // The entry cannot be written: its `lock` is a directory, which no process can open for
        // writing, root included (a read-only cache as the integration tests make it needs
        // permissions that root ignores).
        let root = tempfile::tempdir().unwrap();
        let entry = Entry::new(root.path(), Backend::Cuda, "k", "op.cubin");
        let builds = Cell::new(0);
        get(&entry, &builds).unwrap();
        fs::remove_file(entry.file("lock")).unwrap();
        fs::create_dir(entry.file("lock")).unwrap();
        fs::OpenOptions::new()
            .write(true)
            .open(entry.artifact_path())
            .unwrap()
            .set_len(4000)
            .unwrap();
        let err = get(&entry, &builds).unwrap_err();
        let msg = err.to_string();
        println!("{msg}");
        let CodegenError::DamagedEntry { path, reason, .. } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(path, &entry.artifact_path());
        assert!(reason.contains("4000 bytes"), "{reason}");
        assert!(
            msg.contains(&entry.artifact_path().display().to_string())
                && msg.contains("delete")
                && msg.contains("OVL_CACHE_DIR"),
            "{msg}"
        );
        assert_eq!(builds.get(), 1, "no build without the lock");
        // A missing entry that cannot be written is the plain I/O error.
        let other = Entry::new(root.path(), Backend::Cuda, "k", "op.ptx");
        let err = get(&other, &builds).unwrap_err();
        assert!(matches!(err, CodegenError::Cache { .. }), "{err:?}");
    }
}

//! The operator cache: on disk (shared between processes) and in memory (per process).
//!
//! Layout (CUDA: see [`crate::cuda`], `<root>/v1/cuda/<key>/`): `<root>/v1/cpu/<key>/` holds
//! `op.cpp` (the generated source), `op.so` (the library) and `meta` (the library's length and
//! SHA-256 digest, then what the key was computed from, for people), plus a `lock` file.
//! `<root>` is `$OVL_CACHE_DIR`, else the user cache directory (`~/.cache/ovl` on Linux), or
//! [`CompileOptions::cache_dir`]. `<key>` is [`crate::CompiledOperator::cache_key`]: 32 hex
//! digits of SHA-256 over the operator's canonical hash, the codegen and ABI versions, the
//! compiler path and `--version`, the flags and the CPU features. With GCC,
//! `<root>/v1/cpu-prelude/<key>/` holds the prelude as a header and its precompiled form, from
//! which every operator is compiled (`cpu/pch.rs`); `op.cpp` stays the full source.
//!
//! Every file is written to a unique temporary name in the same directory and renamed into
//! place, so readers never see a partial file; an exclusive lock on `lock` serializes
//! compilations of one key between processes (the second process finds the library the first
//! one made). Two processes forcing recompilation of one operator both compile and both
//! succeed (the renames are atomic).
//!
//! Before a cached library is loaded (once per process: later requests are answered from
//! memory), its length and digest are checked against `meta`: a damaged library (truncated,
//! extended, altered, or recorded by an older version without a digest) is never loaded, it is
//! recompiled; in a cache that cannot be written that is [`CodegenError::DamagedEntry`], which
//! names the file. The protocol is shared with the CUDA entries (`shared::cache_entry`).
//!
//! Exported programs may carry the libraries of their operators ([`embed_library`]): a receiver
//! whose [`target_key`] (everything in the cache key but the compiler's identity, which it
//! may lack) is the same installs the library as the entry of the exporter's cache key, through
//! the same protocol, and loads it without a compiler ([`load_embedded`]).

use crate::cpu::operator::{CompiledOperator, Origin};
use ovl_codegen::cpu::abi::ABI_VERSION;
use ovl_codegen::cpu::compiler::{
    compiler_flags_for, cpu_target_for, Toolchain, LINK_FLAGS, TARGET_TRIPLE,
};
use ovl_codegen::cpu::{generate_cpp, pch};
use ovl_codegen::shared::cache_entry::{
    cache_dir, dump_source_file, env_flag, get_or_build, Backend, Check, Entry, Writer,
    MODULES_CAPACITY,
};
use ovl_codegen::shared::prelude;
use ovl_codegen::shared::sizes::code_hash;
use ovl_codegen::{
    CacheOutcome, CodegenError, CompileOptions, NotEmbedded, CODEGEN_SOURCE_DIGEST, CODEGEN_VERSION,
};
use ovl_ir::ir;
use ovl_ir::lru::{CacheControl, SharedLru};
use ovl_ir::names::defined_at;
use sha2::{Digest as _, Sha256};
use std::path::{Path, PathBuf};
use std::sync::Arc;

type MemoryKey = (PathBuf, String);

/// Forgets the libraries loaded in this process from the cache rooted at `root` (they stay
/// usable by whoever holds them).
pub(crate) fn forget_root(root: &Path) {
    memory().lock().retain(|(r, _)| r != root);
}

fn memory() -> &'static SharedLru<MemoryKey, Arc<CompiledOperator>> {
    static M: SharedLru<MemoryKey, Arc<CompiledOperator>> =
        SharedLru::new("cpu_modules", MODULES_CAPACITY);
    &M
}

/// The C++ libraries loaded in this process, for `ovl::cache_stats` and its siblings.
pub(crate) fn memory_cache() -> &'static dyn CacheControl {
    memory()
}

/// SHA-256 of the C++ prelude, computed once: the key is looked up on every evaluation.
fn prelude_digest() -> &'static [u8] {
    static DIGEST: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    DIGEST.get_or_init(|| Sha256::digest(prelude::CPP.as_bytes()).to_vec())
}

/// The cache key of an operator for a toolchain: 32 hex digits of SHA-256 over the operator's
/// canonical hash ([`ovl_ir::hash::canonical_hash`]), the codegen and ABI versions, the code
/// generator's source digest ([`CODEGEN_SOURCE_DIGEST`]: the emitter and the preludes, so that a
/// change to either can never reuse a stale library), the text of the C++ prelude, and the toolchain
/// fingerprint (compiler path and `--version`, flags, CPU features).
pub(crate) fn cache_key(dag: &ir::ExpressionDag, toolchain: &Toolchain) -> String {
    let digest = code_hash(dag);
    let mut h = Sha256::new();
    h.update(b"ovl-codegen cpu cache key\0");
    h.update(CODEGEN_VERSION.as_bytes());
    h.update([0]);
    h.update(CODEGEN_SOURCE_DIGEST.as_bytes());
    h.update([0]);
    h.update(ABI_VERSION.to_le_bytes());
    h.update(prelude_digest());
    h.update(digest.0);
    h.update(toolchain.fingerprint);
    let out = h.finalize();
    ovl_ir::hash::hex(&out[..16])
}

fn dump(operator: &str, path: &Path) {
    dump_source_file("C++", operator, path)
}

/// Compiles an operator into a loaded native library, or finds it in the operator cache.
///
/// A warm call (the operator was loaded before in this process with the same cache root and
/// toolchain) hashes the operator and looks it up in memory: no compiler, no file system, no
/// `dlopen`. Otherwise the on-disk cache is tried, and only then is the C++ generated (after
/// [`ovl_ir::validate::validate`]) and compiled.
pub fn compile(
    dag: &ir::ExpressionDag,
    options: &CompileOptions,
) -> Result<Arc<CompiledOperator>, CodegenError> {
    compile_with_outcome(dag, options).map(|(op, _)| op)
}

/// [`compile`] for each of `dags`, in order, the distinct operators that miss the cache compiled
/// concurrently (one C++ compiler at a time per core): a program's kernels are mostly small,
/// and each compiler run spends most of its time starting and reading the prelude, so on 2
/// cores the 18 kernels of a layer's forward + backward compiled in 0.6 of the time. Operators
/// with the same cache key are compiled once, the others then found in memory; an operator
/// that fails to compile is compiled again in order, which returns its error.
pub fn compile_all(
    dags: &[&ir::ExpressionDag],
    options: &CompileOptions,
) -> Vec<Result<Arc<CompiledOperator>, CodegenError>> {
    // One of each distinct operator (by the key that names its library).
    crate::cpu::pool::warm_concurrently(
        dags,
        |dag| target_key(dag, options),
        |dag| {
            // The result is kept by the memory cache (an error is met again below).
            let _ = compile(dag, options);
        },
    );
    dags.iter().map(|dag| compile(dag, options)).collect()
}

/// Compiles an operator (or finds it in the cache) and loads it; also says where it was found.
///
/// See [`compile`].
pub fn compile_with_outcome(
    dag: &ir::ExpressionDag,
    options: &CompileOptions,
) -> Result<(Arc<CompiledOperator>, CacheOutcome), CodegenError> {
    let force = options.force_recompile || env_flag("OVL_FORCE_RECOMPILE");
    let dump_source = options.dump_source || env_flag("OVL_DUMP_SOURCE");
    let toolchain = Toolchain::get(options)?;
    let root = options.cache_dir.clone().unwrap_or_else(cache_dir);
    let key = cache_key(dag, &toolchain);
    let memory_key = (root, key);

    // In memory: no file system access. A forced recompilation accepts only a library this
    // process compiled itself.
    if let Some(op) = memory().get(&memory_key) {
        if !force || op.origin() == Origin::Compiled {
            return Ok((op, CacheOutcome::Memory));
        }
    }
    let (root, key) = &memory_key;
    let entry = Entry::new(root, Backend::Cpu, key, "op.so");
    let source_path = entry.file("op.cpp");
    let remember = |op: CompiledOperator, outcome: CacheOutcome| {
        let op = Arc::new(op);
        memory().insert(memory_key.clone(), op.clone());
        if dump_source && outcome == CacheOutcome::DiskCache {
            dump(op.name(), op.source_path());
        }
        Ok((op, outcome))
    };
    // A library that passed the integrity check; the loader or the ABI check may still reject
    // it (then it is rebuilt).
    let accept = |library: &Path, _bytes: Vec<u8>| {
        CompiledOperator::load(dag, key, library, source_path.clone(), Origin::DiskCache)
            .map_err(|why| format!("it cannot be loaded: {why}"))
    };
    let build = |writer: &Writer<'_>| {
        let source = generate_cpp(dag, key)?;
        writer.write("op.cpp", source.as_bytes())?;
        if dump_source {
            dump(&dag.name, &source_path);
        }
        let tmp_lib = writer.temp_artifact()?;
        let prelude = pch::header(&toolchain, root);
        toolchain.compile(
            &source_path,
            &tmp_lib,
            &dag.name,
            &defined_at(dag),
            prelude.as_deref(),
        )?;
        // Load from the unique temporary name (the dynamic loader identifies libraries by path,
        // so a recompiled library must not be opened under a path loaded before), then publish
        // it with its `meta`.
        let mut op =
            CompiledOperator::load(dag, key, &tmp_lib, source_path.clone(), Origin::Compiled)
                .map_err(|why| CodegenError::Load {
                    operator: dag.name.clone(),
                    path: tmp_lib.to_path_buf(),
                    why,
                })?;
        let description = format!(
            "operator: {}\ndefined at: {}\ncanonical hash: {}\ncodegen version: {} (sources {})\n\
             abi version: {}\ncompiler: {}\ncompiler version: {}\nflags: {}\ncpu: {}\n",
            dag.name,
            defined_at(dag),
            code_hash(dag),
            CODEGEN_VERSION,
            CODEGEN_SOURCE_DIGEST,
            ABI_VERSION,
            toolchain.path.display(),
            toolchain.version,
            toolchain.flags.join(" "),
            toolchain.cpu,
        );
        op.set_library_path(writer.publish_file(tmp_lib, &description)?);
        Ok(op)
    };
    let (op, outcome) = get_or_build(&entry, force, accept, build)?;
    remember(op, outcome)
}

/// The target this crate compiles operators for with `options`, as people read it: the target
/// triple (or architecture and OS) and the CPU features.
fn target_name(options: &CompileOptions) -> String {
    let target = TARGET_TRIPLE;
    let cpu = cpu_target_for(options.resolved_isa().unwrap_or_default());
    if target.is_empty() {
        cpu
    } else {
        format!("{target} {cpu}")
    }
}

/// What a compiled library of `dag` depends on besides the compiler's identity: 32 hex digits of
/// SHA-256 over the operator's canonical hash, the codegen and ABI versions, the prelude, the
/// target, the compiler flags (with [`CompileOptions::extra_flags`]) and the CPU features, both
/// for the instruction sets of [`CompileOptions::isa`] (`OVL_CPU_ISA`). Two machines with the
/// same target key can run each other's libraries of `dag`. Computed without a compiler (an
/// unknown `OVL_CPU_ISA` counts as `native` here; compiling reports it).
pub fn target_key(dag: &ir::ExpressionDag, options: &CompileOptions) -> String {
    let isa = options.resolved_isa().unwrap_or_default();
    let digest = code_hash(dag);
    let mut h = Sha256::new();
    let mut field = |s: &[u8]| {
        h.update((s.len() as u64).to_le_bytes());
        h.update(s);
    };
    field(b"ovl-codegen cpu target key");
    field(CODEGEN_VERSION.as_bytes());
    field(&ABI_VERSION.to_le_bytes());
    field(prelude_digest());
    field(&digest.0);
    field(TARGET_TRIPLE.as_bytes());
    for f in compiler_flags_for(isa)
        .iter()
        .chain(&options.extra_flags)
        .map(String::as_str)
        .chain(LINK_FLAGS.iter().copied())
    {
        field(f.as_bytes());
    }
    field(cpu_target_for(isa).as_bytes());
    let out = h.finalize();
    ovl_ir::hash::hex(&out[..16])
}

/// Compiles `dag` (or finds it in the cache) and returns its library to carry in an exported
/// program as operator `index` (see `proto/ovl.proto`, `CompiledLibrary`). The bytes are the
/// cache entry's, checked against its `meta` (length and SHA-256).
pub fn embed_library(
    dag: &ir::ExpressionDag,
    index: u32,
    options: &CompileOptions,
) -> Result<ir::CompiledLibrary, CodegenError> {
    let (op, _) = compile_with_outcome(dag, options)?;
    let toolchain = Toolchain::get(options)?;
    let root = options.cache_dir.clone().unwrap_or_else(cache_dir);
    let entry = Entry::new(&root, Backend::Cpu, op.cache_key(), "op.so");
    let bytes = match entry.check() {
        Check::Valid(bytes) => bytes,
        Check::Missing => return Err(missing_library(&entry, "it is missing".into())),
        Check::Damaged(why) => return Err(missing_library(&entry, why)),
    };
    Ok(ir::CompiledLibrary {
        operator: index,
        target_key: target_key(dag, options),
        cache_key: op.cache_key().to_string(),
        target: format!(
            "{}, compiled by {}",
            target_name(options),
            toolchain.version
        ),
        library: bytes,
    })
}

fn missing_library(entry: &Entry, why: String) -> CodegenError {
    CodegenError::Cache {
        action: "read back the library just compiled",
        path: entry.artifact_path(),
        source: std::io::Error::other(why),
    }
}

/// Loads operator `dag` from a library an exported program carries (see [`embed_library`]),
/// without a compiler: when `embedded`'s target key is this machine's ([`target_key`]), the
/// library becomes the cache entry of the exporter's cache key (the same protocol as a
/// compiled library: a temporary file, loaded, then published with its length and SHA-256 in
/// `meta`; an entry already there and intact is used as it is) and is loaded. `Err` says why
/// it was not used; the caller then compiles instead ([`compile_embedded`] does both).
pub fn load_embedded(
    dag: &ir::ExpressionDag,
    embedded: &ir::CompiledLibrary,
    options: &CompileOptions,
) -> Result<Arc<CompiledOperator>, NotEmbedded> {
    let here = target_key(dag, options);
    if embedded.target_key != here {
        return Err(NotEmbedded::OtherTarget {
            target: embedded.target.clone(),
            target_key: embedded.target_key.clone(),
            here: target_name(options),
            here_key: here,
        });
    }
    let key = embedded.cache_key.as_str();
    if key.len() != 32 || !key.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return Err(NotEmbedded::BadCacheKey {
            key: key.to_string(),
        });
    }
    let root = options.cache_dir.clone().unwrap_or_else(cache_dir);
    let memory_key = (root, key.to_string());
    if let Some(op) = memory().get(&memory_key) {
        return Ok(op);
    }
    let (root, _) = &memory_key;
    let entry = Entry::new(root, Backend::Cpu, key, "op.so");
    let source_path = entry.file("op.cpp");
    let accept = |library: &Path, _bytes: Vec<u8>| {
        CompiledOperator::load(dag, key, library, source_path.clone(), Origin::DiskCache)
            .map_err(|why| format!("it cannot be loaded: {why}"))
    };
    let build = |writer: &Writer<'_>| {
        // The source, for people (the library was compiled from the same text elsewhere).
        writer.write("op.cpp", generate_cpp(dag, key)?.as_bytes())?;
        let tmp = writer.temp_artifact()?;
        std::fs::write(&tmp, &embedded.library).map_err(|source| CodegenError::Cache {
            action: "write",
            path: tmp.to_path_buf(),
            source,
        })?;
        let mut op = CompiledOperator::load(dag, key, &tmp, source_path.clone(), Origin::Embedded)
            .map_err(|why| CodegenError::Load {
                operator: dag.name.clone(),
                path: tmp.to_path_buf(),
                why,
            })?;
        let description = format!(
            "operator: {}\ndefined at: {}\ncanonical hash: {}\ncodegen version: {} (sources {})\n\
             abi version: {}\nembedded in an exported program, compiled for: {}\n\
             target key: {}\n",
            dag.name,
            defined_at(dag),
            code_hash(dag),
            CODEGEN_VERSION,
            CODEGEN_SOURCE_DIGEST,
            ABI_VERSION,
            embedded.target,
            embedded.target_key,
        );
        op.set_library_path(writer.publish_file(tmp, &description)?);
        Ok(op)
    };
    let (op, _) =
        get_or_build(&entry, false, accept, build).map_err(|e| NotEmbedded::Cache(Box::new(e)))?;
    let op = Arc::new(op);
    memory().insert(memory_key, op.clone());
    Ok(op)
}

/// Operator `dag` from the library an exported program carries when it fits this machine
/// ([`load_embedded`]), else compiled here ([`crate::compile`]). With
/// [`CompileOptions::force_recompile`] (or `OVL_FORCE_RECOMPILE=1`) it is always compiled. When
/// neither works, [`CodegenError::EmbeddedLibraryUnusable`] says why the library was not used
/// and why compiling failed.
pub fn compile_embedded(
    dag: &ir::ExpressionDag,
    embedded: &ir::CompiledLibrary,
    options: &CompileOptions,
) -> Result<Arc<CompiledOperator>, CodegenError> {
    let reason = if options.force_recompile || env_flag("OVL_FORCE_RECOMPILE") {
        NotEmbedded::Forced
    } else {
        match load_embedded(dag, embedded, options) {
            Ok(op) => return Ok(op),
            Err(reason) => reason,
        }
    };
    compile_with_outcome(dag, options)
        .map(|(op, _)| op)
        .map_err(|source| CodegenError::EmbeddedLibraryUnusable {
            operator: dag.name.clone(),
            reason: Box::new(reason),
            source: Box::new(source),
        })
}

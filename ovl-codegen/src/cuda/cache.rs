//! The CUDA side of the operator cache: `<root>/v1/cuda/<key>/{op.cu, op.ptx | op.cubin, meta,
//! lock}`, with the same rules as the C++ cache (the protocol of `shared::cache_entry`: atomic
//! writes, one compilation per key at a time between processes, the length and digest of the
//! PTX or CUBIN recorded in `meta` and checked before it is used; plus force and dump switches
//! and an in-memory map per process).

use super::nvrtc::{self, NvrtcInfo};
use super::{full_options, generate_cuda, sm, CudaBinary, CudaCompileOptions};
use crate::error::{defined_at, CodegenError, CudaCompileFailure};
use crate::shared::cache_entry::{cache_dir, dump_source_file, env_flag, CacheOutcome};
use crate::shared::cache_entry::{get_or_build, Backend, Entry, Writer};
use ovl_ir::ir;
use ovl_ir::lru::{CacheControl, SharedLru};
use sha2::{Digest as _, Sha256};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// An operator compiled by NVRTC: the PTX or CUBIN bytes and where they are in the cache. Needs
/// no GPU; `ovl_runtime::cuda::load` turns it into a runnable `CudaOperator`.
#[derive(Debug)]
pub struct CudaArtifact {
    name: String,
    key: String,
    arch: u32,
    binary: CudaBinary,
    bytes: Vec<u8>,
    source_path: PathBuf,
    binary_path: PathBuf,
    log: String,
}

impl CudaArtifact {
    /// The operator's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The cache key (32 hex digits).
    pub fn cache_key(&self) -> &str {
        &self.key
    }

    /// The architecture it was compiled for (like 90 for `sm_90`).
    pub fn arch(&self) -> u32 {
        self.arch
    }

    /// PTX or CUBIN.
    pub fn binary(&self) -> CudaBinary {
        self.binary
    }

    /// The PTX text or CUBIN image.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The generated CUDA source in the cache (`op.cu`).
    pub fn source_path(&self) -> &Path {
        &self.source_path
    }

    /// The PTX or CUBIN in the cache (`op.ptx`, `op.cubin`).
    pub fn binary_path(&self) -> &Path {
        &self.binary_path
    }

    /// NVRTC's log (warnings) when this process compiled it; empty otherwise.
    pub fn log(&self) -> &str {
        &self.log
    }
}

type MemoryKey = (PathBuf, String);
/// The artifacts of this process, and whether this process compiled each.
type Memory = SharedLru<MemoryKey, (Arc<CudaArtifact>, bool)>;

fn memory() -> &'static Memory {
    static M: Memory = SharedLru::new(
        "cuda_artifacts",
        crate::shared::cache_entry::MODULES_CAPACITY,
    );
    &M
}

/// The CUDA artifacts of this process, for `ovl::cache_stats` and its siblings.
pub fn memory_cache() -> &'static dyn CacheControl {
    memory()
}

/// Forgets the artifacts of the cache rooted at `root` (used by `ovl_runtime::clear_cache_at`).
pub fn forget_root(root: &Path) {
    memory().lock().retain(|(r, _)| r != root);
}

/// The cache key: 32 hex digits of SHA-256 over the operator's canonical hash, the CUDA codegen
/// version and the code generator's source digest ([`crate::CODEGEN_SOURCE_DIGEST`]), the NVRTC
/// version, and the options (which hold the architecture and output kind).
fn cache_key(dag: &ir::ExpressionDag, nvrtc: &NvrtcInfo, options: &[String]) -> String {
    let digest = crate::shared::sizes::code_hash(dag);
    let mut h = Sha256::new();
    let mut field = |s: &[u8]| {
        h.update((s.len() as u64).to_le_bytes());
        h.update(s);
    };
    field(b"ovl-codegen cuda cache key");
    field(super::CUDA_CODEGEN_VERSION.as_bytes());
    field(crate::CODEGEN_SOURCE_DIGEST.as_bytes());
    field(&digest.0);
    field(format!("nvrtc {}.{}", nvrtc.version.0, nvrtc.version.1).as_bytes());
    for o in options {
        field(o.as_bytes());
    }
    let out = h.finalize();
    ovl_ir::hash::hex(&out[..16])
}

/// Compiles an operator with NVRTC for [`CudaCompileOptions::arch`] and
/// [`CudaCompileOptions::binary`], or finds it in the operator cache. Needs no GPU.
pub fn compile(
    dag: &ir::ExpressionDag,
    options: &CudaCompileOptions,
) -> Result<Arc<CudaArtifact>, CodegenError> {
    compile_with_outcome(dag, options).map(|(a, _)| a)
}

/// Like [`compile`]; also says where the artifact was found.
pub fn compile_with_outcome(
    dag: &ir::ExpressionDag,
    options: &CudaCompileOptions,
) -> Result<(Arc<CudaArtifact>, CacheOutcome), CodegenError> {
    let force = options.force_recompile || env_flag("OVL_FORCE_RECOMPILE");
    let dump_source = options.dump_source || env_flag("OVL_DUMP_SOURCE");
    let nvrtc = nvrtc::get()?;
    let (arch, binary) = (options.arch, options.binary);
    let nvrtc_opts = full_options(arch, binary, &options.extra_options);
    let root = options.cache_dir.clone().unwrap_or_else(cache_dir);
    let key = cache_key(dag, nvrtc, &nvrtc_opts);
    let memory_key = (root, key);
    if let Some((a, compiled_here)) = memory().get(&memory_key) {
        if !force || compiled_here {
            return Ok((a, CacheOutcome::Memory));
        }
    }
    let (root, key) = &memory_key;
    let entry = Entry::new(root, Backend::Cuda, key, binary.file_name());
    let source_path = entry.file("op.cu");
    let binary_path = entry.artifact_path();
    let artifact = |bytes: Vec<u8>, log: String| CudaArtifact {
        name: dag.name.clone(),
        key: key.clone(),
        arch,
        binary,
        bytes,
        source_path: source_path.clone(),
        binary_path: binary_path.clone(),
        log,
    };
    let remember = |a: CudaArtifact, outcome: CacheOutcome| {
        let a = Arc::new(a);
        memory().insert(
            memory_key.clone(),
            (a.clone(), outcome == CacheOutcome::Compiled),
        );
        if dump_source && outcome == CacheOutcome::DiskCache {
            dump_source_file("CUDA", &a.name, &a.source_path);
        }
        Ok((a, outcome))
    };
    // Bytes that passed the integrity check; a cheap look at their kind besides.
    let accept = |_: &Path, bytes: Vec<u8>| {
        let plausible = match binary {
            CudaBinary::Ptx => bytes
                .windows(super::KERNEL_NAME.len())
                .any(|w| w == super::KERNEL_NAME.as_bytes()),
            CudaBinary::Cubin => bytes.starts_with(b"\x7fELF"),
        };
        match plausible {
            true => Ok(artifact(bytes, String::new())),
            false => Err(format!("it is not {}", binary.file_name())),
        }
    };
    let build = |writer: &Writer<'_>| {
        let source = generate_cuda(dag, key)?;
        writer.write("op.cu", source.as_bytes())?;
        if dump_source {
            dump_source_file("CUDA", &dag.name, &source_path);
        }
        let (bytes, log) = nvrtc::compile_source(
            &source,
            &nvrtc::source_name(&source_path),
            binary,
            &nvrtc_opts,
        )
        .map_err(|f| {
            CodegenError::CudaCompileFailed(Box::new(CudaCompileFailure {
                operator: dag.name.clone(),
                defined_at: defined_at(dag),
                tool: "NVRTC".into(),
                arch: sm(arch),
                command: nvrtc_opts.join(" "),
                source_path: source_path.clone(),
                log: if f.log.is_empty() {
                    f.message
                } else {
                    format!("{}\n{}", f.message, f.log)
                },
            }))
        })?;
        let description = format!(
            "operator: {}\ndefined at: {}\ncanonical hash: {}\ncodegen version: {}\nnvrtc: {}.{} \
             ({})\narch: {}\noutput: {}\noptions: {}\n",
            dag.name,
            defined_at(dag),
            crate::shared::sizes::code_hash(dag),
            super::CUDA_CODEGEN_VERSION,
            nvrtc.version.0,
            nvrtc.version.1,
            nvrtc
                .path
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| "found by the dynamic loader".into()),
            sm(arch),
            binary.file_name(),
            nvrtc_opts.join(" "),
        );
        writer.publish_bytes(&bytes, &description)?;
        Ok(artifact(bytes, log))
    };
    let (a, outcome) = get_or_build(&entry, force, accept, build)?;
    remember(a, outcome)
}

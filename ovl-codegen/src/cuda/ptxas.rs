//! Validating generated PTX with `ptxas` (the PTX assembler of the CUDA toolkit, also shipped by
//! the `nvidia-cuda-nvcc-cu12` wheel): it assembles PTX for any `sm_XX` without a GPU.

use super::{
    compile, count, in_python_environments, sm, toolkit_roots, CudaArtifact, CudaBinary,
    CudaCompileOptions,
};
use crate::error::{defined_at, CodegenError, CudaCompileFailure};
use ovl_ir::ir;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, OnceLock};

fn candidates() -> (Vec<PathBuf>, bool) {
    if let Some(v) = std::env::var_os("OVL_PTXAS").filter(|v| !v.is_empty()) {
        return (vec![PathBuf::from(v)], true);
    }
    // ptxas rejects PTX of a newer ISA than its own: with NVRTC 13, CUDA 13's ptxas comes first.
    let (cu12, cu13) = (
        in_python_environments("nvidia/cuda_nvcc/bin/ptxas"),
        in_python_environments("nvidia/cu13/bin/ptxas"),
    );
    let mut c = Vec::new();
    match super::nvrtc::get() {
        Ok(n) if n.version.0 >= 13 => c.extend(cu13.into_iter().chain(cu12)),
        _ => c.extend(cu12.into_iter().chain(cu13)),
    }
    for root in toolkit_roots() {
        c.push(root.join("bin/ptxas"));
    }
    if let Some(path) = std::env::var_os("PATH") {
        c.extend(std::env::split_paths(&path).map(|d| d.join("ptxas")));
    }
    (c, false)
}

/// The `ptxas` this process uses (see the module documentation of [`crate::cuda`] for where it
/// is looked for), or an error that says how to install it.
pub fn ptxas_path() -> Result<PathBuf, CodegenError> {
    static FOUND: OnceLock<Result<PathBuf, (String, Vec<PathBuf>)>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            let (candidates, explicit) = candidates();
            match candidates.iter().find(|c| c.is_file()) {
                Some(p) => Ok(p.clone()),
                None => Err((
                    if explicit {
                        "OVL_PTXAS names no existing file".into()
                    } else {
                        "not in the places below".into()
                    },
                    candidates,
                )),
            }
        })
        .clone()
        .map_err(|(message, searched)| CodegenError::PtxasNotFound { message, searched })
}

/// Compiles an operator to PTX for `compute_<arch>` with NVRTC (through the operator cache) and
/// assembles that PTX with `ptxas -arch=sm_<arch>`; `Ok` means the operator's code is valid for
/// that architecture. Needs no GPU. ptxas runs on every call (its result is not cached), so the
/// validation is never stale; NVRTC runs when the cache does not hold the PTX (use
/// [`CudaCompileOptions::force_recompile`] to always run it).
pub fn validate(
    dag: &ir::ExpressionDag,
    arch: u32,
    options: &CudaCompileOptions,
) -> Result<Arc<CudaArtifact>, CodegenError> {
    let options = options.clone().with_target(arch, CudaBinary::Ptx);
    let artifact = compile(dag, &options)?;
    let ptxas = ptxas_path()?;
    let dir = artifact
        .binary_path()
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default();
    let out = tempfile::Builder::new()
        .prefix(&format!(".ptxas-{}.", sm(arch)))
        .suffix(".cubin")
        .tempfile_in(&dir)
        .map_err(crate::shared::cache_entry::io_err(
            "create a temporary file in",
            &dir,
        ))?
        .into_temp_path();
    let mut cmd = Command::new(&ptxas);
    cmd.arg(format!("-arch={}", sm(arch)))
        .arg("-O3")
        .arg("-o")
        .arg(&*out)
        .arg(artifact.binary_path());
    let command = format!(
        "{} -arch={} -O3 -o {} {}",
        ptxas.display(),
        sm(arch),
        out.display(),
        artifact.binary_path().display()
    );
    let failure = |status: String, log: String| {
        CodegenError::CudaCompileFailed(Box::new(CudaCompileFailure {
            operator: dag.name.clone(),
            defined_at: defined_at(dag),
            tool: "ptxas".into(),
            arch: sm(arch),
            command: command.clone(),
            source_path: artifact.binary_path().to_path_buf(),
            log: format!("({status}) {log}"),
        }))
    };
    let result = cmd.output().map_err(|e| {
        failure(
            "could not start".into(),
            format!("cannot run {}: {e}", ptxas.display()),
        )
    })?;
    if !result.status.success() {
        let mut log = String::from_utf8_lossy(&result.stderr).into_owned();
        log.push_str(&String::from_utf8_lossy(&result.stdout));
        return Err(failure(result.status.to_string(), log));
    }
    count(|s| *s.ptxas_validations.entry(arch).or_default() += 1);
    Ok(artifact)
}

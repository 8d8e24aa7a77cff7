//! The conformance suite on the CUDA backend.
//!
//! With a GPU (the NVIDIA driver reports one), every test runs on it with `Options::cuda()` and
//! checks real values. Without one, every test runs with `Options::cuda_validate()`: each
//! operator the test traces is generated as CUDA, compiled by NVRTC and its PTX assembled by
//! ptxas for sm_80 and sm_90 (any failure fails the test), and values come from the reference
//! interpreter. Either way each test prints (past the test harness's capture) what it did, so a
//! run without a GPU says plainly that GPU execution did not run.

use ovl::Options;
use std::io::Write as _;
use std::sync::OnceLock;

/// How this process runs the suite, decided once.
fn mode() -> &'static (Options, String) {
    static MODE: OnceLock<(Options, String)> = OnceLock::new();
    MODE.get_or_init(|| match ovl::cuda::gpu_status() {
        Ok(gpu) => {
            let line = format!(
                "conformance_cuda: running on the GPU: {} (sm_{})",
                gpu.name, gpu.arch
            );
            say(&line);
            (Options::cuda(), line)
        }
        Err(e) => {
            let first = e.to_string();
            let first = first.lines().next().unwrap_or_default();
            let line = "conformance_cuda: GPU EXECUTION DID NOT RUN (no GPU)";
            say(&format!(
                "{line}: {first}\nconformance_cuda: instead every kernel is compiled by NVRTC \
                 and validated by ptxas for sm_80 and sm_90; values are checked on the \
                 reference interpreter"
            ));
            (Options::cuda_validate(), line.to_string())
        }
    })
}

/// Writes to stderr directly (the test harness captures only `print!`/`eprint!`).
fn say(text: &str) {
    let _ = writeln!(std::io::stderr(), "{text}");
}

/// The options of one test; when the test ends, reports what it did on this thread.
pub(crate) struct Run {
    options: &'static Options,
    before: ovl::cuda::CudaStats,
}

pub(crate) fn cuda_run() -> Run {
    Run {
        options: &mode().0,
        before: ovl::cuda::thread_stats(),
    }
}

impl std::ops::Deref for Run {
    type Target = Options;
    fn deref(&self) -> &Options {
        self.options
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let test = std::thread::current()
            .name()
            .unwrap_or("a test")
            .to_string();
        let now = ovl::cuda::thread_stats();
        let nvrtc = now.nvrtc_compiles - self.before.nvrtc_compiles;
        let per_arch: Vec<String> = now
            .ptxas_validations
            .iter()
            .map(|(arch, n)| {
                (
                    arch,
                    n - self.before.ptxas_validations.get(arch).unwrap_or(&0),
                )
            })
            .map(|(arch, n)| format!("{n} for sm_{arch}"))
            .collect();
        let status = if std::thread::panicking() {
            "FAILED"
        } else {
            "ok"
        };
        match self.options.target {
            ovl::Target::CudaValidate => {
                say(&format!(
                    "conformance_cuda::{test}: {status}: {} NVRTC compilation(s), ptxas-validated \
                     {} (GPU execution did not run)",
                    nvrtc,
                    if per_arch.is_empty() {
                        "none".to_string()
                    } else {
                        per_arch.join(", ")
                    }
                ));
            }
            _ => say(&format!(
                "conformance_cuda::{test}: {status}: ran on the GPU ({nvrtc} NVRTC compilation(s))"
            )),
        }
    }
}

conformance_suite!(cuda_run());

/// The suite's mode, as a test of its own: on a machine without a GPU its name and output say
/// that GPU execution did not run.
#[test]
fn gpu_execution_or_validation_only() {
    let (options, line) = mode();
    say(line);
    if options.target == ovl::Target::CudaValidate {
        // Validation needs NVRTC and ptxas: their absence is a failure, not a skip.
        let nvrtc = ovl::cuda::nvrtc_status().unwrap_or_else(|e| panic!("{e}"));
        let ptxas = ovl::cuda::ptxas_path().unwrap_or_else(|e| panic!("{e}"));
        say(&format!(
            "conformance_cuda: NVRTC {}.{} ({}), ptxas {}",
            nvrtc.version.0,
            nvrtc.version.1,
            nvrtc
                .path
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| "found by the dynamic loader".into()),
            ptxas.display()
        ));
    }
}

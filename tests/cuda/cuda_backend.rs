//! `Target::Cuda` through the facade: on a machine without a GPU, evaluation fails with an error
//! that names what is missing and how to get it; with a GPU, values and per-kernel GPU timings
//! come back. `Target::CudaValidate` compiles and validates without a GPU.

use ndarray::Array1;
use ovl::prelude::*;
use std::io::Write as _;

#[operator]
fn scale_shift(x: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = x[[i]] * 2.0f32 + 1.0f32;
    out
}

fn say(text: &str) {
    let _ = writeln!(std::io::stderr(), "{text}");
}

#[test]
fn cuda_target_runs_on_a_gpu_or_says_what_is_missing() {
    let x = Array1::from(vec![1.0f32, -2.0, 0.5, 4.0]);
    let expected = x.mapv(|v| v * 2.0 + 1.0).into_dyn();
    match ovl::cuda::gpu_status() {
        Err(_) => {
            let err = ovl::evaluate_with(&scale_shift(&x), &Options::cuda())
                .expect_err("no GPU on this machine");
            let msg = err.to_string();
            assert!(msg.contains("no usable GPU"), "{msg}");
            assert!(
                msg.contains("NVIDIA driver") && msg.contains("libcuda.so.1"),
                "{msg}"
            );
            assert!(msg.contains("cuda_validate"), "{msg}");
            say(&format!(
                "cuda_backend: GPU EXECUTION DID NOT RUN (no GPU); the error was: {msg}"
            ));
        }
        Ok(gpu) => {
            let (y, profile) = ovl::profile(&scale_shift(&x), &Options::cuda(), 3)
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(y, expected);
            assert_eq!(profile.operators.len(), 1);
            assert_eq!(profile.operators[0].times.len(), 3);
            say(&format!(
                "cuda_backend: ran on {} (sm_{}):\n{profile}",
                gpu.name, gpu.arch
            ));
        }
    }
}

#[test]
fn copy_bandwidth_is_measured_on_a_gpu_or_says_what_is_missing() {
    let measured = ovl::cuda::device_copy_bandwidth(16 << 20, 3);
    match ovl::cuda::gpu_status() {
        Err(_) => {
            let msg = measured.expect_err("no GPU on this machine").to_string();
            assert!(msg.contains("no usable GPU"), "{msg}");
            say("cuda_backend: COPY BANDWIDTH DID NOT RUN (no GPU)");
        }
        Ok(gpu) => {
            let bytes_per_s = measured.unwrap_or_else(|e| panic!("{e}"));
            // Any GPU ovl supports copies faster than 10 GB/s and slower than 100 TB/s.
            assert!(
                (1e10..1e14).contains(&bytes_per_s),
                "{bytes_per_s} B/s on {}",
                gpu.name
            );
            say(&format!(
                "cuda_backend: device-to-device copy on {}: {:.0} GB/s",
                gpu.name,
                bytes_per_s / 1e9
            ));
        }
    }
}

#[test]
fn cuda_validate_compiles_checks_and_evaluates_without_a_gpu() {
    let x = Array1::from(vec![3.0f32, 0.25]);
    // A cache of its own: another test of this binary may compile the same kernel (the cache
    // key ignores names and lines) at the same moment, and this thread would then find it.
    let cache = tempfile::tempdir().expect("a temporary directory");
    let options = Options {
        cache_dir: Some(cache.path().to_path_buf()),
        ..Options::cuda_validate()
    };
    let before = ovl::cuda::thread_stats();
    let y = ovl::evaluate_with(&scale_shift(&x), &options).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(y, x.mapv(|v| v * 2.0 + 1.0).into_dyn());
    let after = ovl::cuda::thread_stats();
    assert_eq!(
        after.nvrtc_compiles - before.nvrtc_compiles,
        2,
        "sm_80 and sm_90"
    );
    for arch in [80, 90] {
        let n = after.ptxas_validations.get(&arch).copied().unwrap_or(0)
            - before.ptxas_validations.get(&arch).copied().unwrap_or(0);
        assert_eq!(n, 1, "sm_{arch}");
    }
}

/// docs/cuda.md's direct call: `ovl::cuda::compile(op, &options.cuda_options())` with `op` from
/// `ovl::graph` and `options` an `ovl::Options`.
#[test]
fn cuda_compile_takes_the_facade_options() {
    let x = Array1::from(vec![3.0f32, 0.25]);
    let graph = ovl::graph(scale_shift(&x)).unwrap_or_else(|e| panic!("{e}"));
    let options = Options::default();
    match ovl::cuda::nvrtc_status() {
        Ok(_) => {
            let artifact = ovl::cuda::compile(&graph.dag.operators[0], &options.cuda_options())
                .unwrap_or_else(|e| panic!("{e}"));
            let source = std::fs::read_to_string(artifact.source_path()).unwrap();
            assert!(source.contains("scale_shift"), "{source}");
            assert!(artifact.binary_path().exists());
        }
        Err(e) => say(&format!(
            "cuda_backend: ovl::cuda::compile DID NOT RUN (no NVRTC): {e}"
        )),
    }
}

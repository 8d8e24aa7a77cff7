//! With NVRTC and ptxas pointed at paths that do not exist, the CUDA backend fails with errors
//! that say what is missing and how to install it, and never panics. (A test binary of its own:
//! the tools are located once per process.)

use ovl_codegen::CodegenError;
use ovl_runtime::cuda::{self, CudaCompileOptions};

#[test]
fn missing_nvrtc_and_ptxas_are_clear_errors() {
    // Set before anything in this process looks for the tools.
    std::env::set_var("OVL_NVRTC_LIB", "/nonexistent/ovl-test/libnvrtc.so.12");
    std::env::set_var("OVL_PTXAS", "/nonexistent/ovl-test/ptxas");

    let err = cuda::nvrtc_status().expect_err("no NVRTC at that path");
    let msg = err.to_string();
    assert!(matches!(err, CodegenError::NvrtcNotFound { .. }), "{msg}");
    assert!(msg.contains("pip install nvidia-cuda-nvrtc-cu12"), "{msg}");
    assert!(
        msg.contains("/nonexistent/ovl-test/libnvrtc.so.12"),
        "{msg}"
    );
    assert!(msg.contains("OVL_NVRTC_LIB"), "{msg}");

    let dag = ovl_ir::ir::ExpressionDag {
        name: "anything".into(),
        workgroup_shape: vec![1],
        ..Default::default()
    };
    let cache = tempfile::tempdir().expect("a temporary directory");
    let options = CudaCompileOptions::default().with_cache_dir(cache.path());
    let err = cuda::compile(&dag, &options).expect_err("no NVRTC");
    assert!(matches!(err, CodegenError::NvrtcNotFound { .. }), "{err}");
    let err = cuda::validate(&dag, 90, &options).expect_err("no NVRTC");
    assert!(matches!(err, CodegenError::NvrtcNotFound { .. }), "{err}");

    let err = cuda::ptxas_path().expect_err("no ptxas at that path");
    let msg = err.to_string();
    assert!(matches!(err, CodegenError::PtxasNotFound { .. }), "{msg}");
    assert!(msg.contains("pip install nvidia-cuda-nvcc-cu12"), "{msg}");
    assert!(msg.contains("/nonexistent/ovl-test/ptxas"), "{msg}");
}

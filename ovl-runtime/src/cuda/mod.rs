//! Running on a GPU through the CUDA driver API (`cudarc`, loaded at run time): the context
//! ([`gpu_status`]), device tensors and their caching allocator ([`DeviceTensor`]), compiled
//! operators loaded as modules ([`load`], [`CudaOperator::run`]), matrix products through
//! cuBLAS ([`CublasGemm`]) and captured CUDA graphs ([`capture`]). Code generation and NVRTC
//! are `ovl-codegen`'s `cuda` module, whose names this module re-exports, so that one module
//! names the whole CUDA backend.
//!
//! ```no_run
//! # fn demo(dag: &ovl_ir::ir::ExpressionDag, x: &ovl_ir::HostTensor) -> anyhow::Result<()> {
//! use ovl_runtime::cuda::{self, CudaCompileOptions};
//! // Without a GPU: compile to PTX for sm_90 and assemble it with ptxas.
//! let artifact = cuda::validate(dag, 90, &CudaCompileOptions::default())?;
//! println!("{}", artifact.binary_path().display());
//! // With a GPU: compile to CUBIN for the device, load and run.
//! let op = cuda::load(dag, &CudaCompileOptions::default())?;
//! let mut out = vec![ovl_ir::HostTensor::zeros(ovl_ir::DType::F32, &[4])];
//! let gpu_time = op.run(&[x], &mut out, &[])?; // no symbol values
//! # Ok(()) }
//! ```
//!
//! `cudarc` panics when a library is missing; this module checks for each library first and
//! also contains any panic, so that a missing library is always an [`ovl_codegen::CodegenError`].

mod context;
mod cublas;
mod graph;
mod operator;
pub mod stream;
mod stream_error;
mod tensor;

pub use context::{device_copy_bandwidth, gpu_status, GpuInfo};
pub use cublas::{cublas_status, CublasGemm, CublasInfo};
pub use graph::{capture, CapturedGraph};
pub use operator::{load, load_all, CudaOperator, StatusBlock, STATUS_BYTES};
pub use ovl_codegen::cuda::{
    compile, compile_with_outcome, generate_cuda, nvrtc_libraries, nvrtc_options, nvrtc_status,
    ptxas_path, stats, thread_stats, validate, CudaArtifact, CudaBinary, CudaCompileOptions,
    CudaStats, Nvrtc, NvrtcInfo, CUDA_CODEGEN_VERSION, DEFAULT_BLOCK_SIZE, KERNEL_NAME,
};
pub use tensor::{
    allocator_stats, gpu_time, release_cached_memory, synchronize, AllocatorStats, DeviceError,
    DeviceTensor,
};

pub(crate) use operator::loaded_cache;

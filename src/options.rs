//! [`Options`]: where operators run ([`Target`]), how far they are fused, how they are
//! compiled.

use ovl_fuse::OptLevel;
use ovl_runtime::plan::EpilogueMode;
use std::path::PathBuf;

/// Where operators run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Target {
    /// The reference interpreter: slow, the oracle for every backend.
    Interpreter,
    /// Generated C++, compiled at `-O3` into the operator cache, run on all cores.
    #[default]
    Cpu,
    /// Generated CUDA, compiled with NVRTC into the operator cache (CUBIN for the GPU's own
    /// architecture) and run on GPU 0: inputs are copied to the device, kernels launched,
    /// outputs copied back; [`crate::profile`] reports each kernel's GPU time from CUDA events. Without a
    /// GPU, a driver or NVRTC, evaluation fails with an error that says what is missing.
    Cuda,
    /// No GPU needed: every operator is generated as CUDA, compiled by NVRTC to PTX and
    /// assembled by `ptxas` for each architecture of [`Options::cuda_validate_archs`] (a failure
    /// is an error), then evaluated by the reference interpreter, so results are the oracle's,
    /// reduced in the CUDA backend's order (`proto/ovl.proto`, "Accumulators": a row kernel's
    /// top-level reductions over its thread group's lanes). This is how CI checks the CUDA
    /// backend on machines without a GPU.
    CudaValidate,
}

/// How to evaluate.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The backend.
    pub target: Target,
    /// Worker threads on the CPU; 0 means one per core.
    pub threads: usize,
    /// The operator cache directory (default: `$OVL_CACHE_DIR`, else the user cache directory).
    pub cache_dir: Option<PathBuf>,
    /// Ignore compiled operators found on disk and compile them again (also
    /// `OVL_FORCE_RECOMPILE=1`). An operator this process compiled itself is reused.
    pub force_recompile: bool,
    /// Print generated source and its path to stderr (also `OVL_DUMP_SOURCE=1`).
    pub dump_source: bool,
    /// How much the operator merger fuses before kernels are prepared: 0 = nothing (one
    /// kernel per operator), 3 = everything it can (the default). See [`OptLevel`].
    pub opt_level: OptLevel,
    /// Threads per CUDA block ([`Target::Cuda`]); 0 means the default (256).
    pub cuda_block_size: u32,
    /// The architectures [`Target::CudaValidate`] checks (like 90 for `sm_90`); empty means 80
    /// and 90.
    pub cuda_validate_archs: Vec<u32>,
    /// The most iterations one `while` loop may run in one worker, per entry into the loop;
    /// one more ends the worker with an error naming the operator and the loop. `None`: the
    /// `OVL_MAX_WHILE_ITERATIONS` environment variable, else 2^32
    /// ([`ovl_core::limits::WHILE_ITERATIONS`]); `Some(0)`: no bound.
    pub max_while_iterations: Option<u64>,
    /// On the GPU ([`Target::Cuda`]), let f32 matrix products (cuBLAS) use TF32 tensor cores:
    /// inputs rounded to a 10-bit mantissa, products several times faster on GPUs from
    /// Ampere on. Off by default: full-precision f32, as ovl's other backends compute
    /// (PyTorch's matmul default too; its cuDNN LSTM and JAX's default precision use TF32).
    pub cuda_tf32: bool,
    /// On the CPU, when a matrix product and the kernel reading its result by rows run as one
    /// step, block by block ([`EpilogueMode`]; the values are the same in every mode). `None`:
    /// `OVL_GEMM_EPILOGUE` (`off`, `always`), else where the measured rule says it pays.
    pub gemm_epilogue: Option<EpilogueMode>,
}

impl Options {
    /// Evaluate with the reference interpreter.
    pub fn interpreter() -> Options {
        Options {
            target: Target::Interpreter,
            ..Options::default()
        }
    }

    /// Evaluate with generated CUDA on the GPU ([`Target::Cuda`]).
    pub fn cuda() -> Options {
        Options {
            target: Target::Cuda,
            ..Options::default()
        }
    }

    /// Compile every operator for CUDA and validate it with ptxas for sm_80 and sm_90, then
    /// evaluate with the interpreter ([`Target::CudaValidate`]; no GPU needed), reducing in the
    /// CUDA backend's order (a row kernel's rows over its group's lanes, `proto/ovl.proto`), so
    /// the values are those a GPU computes, up to its math functions.
    pub fn cuda_validate() -> Options {
        Options {
            target: Target::CudaValidate,
            ..Options::default()
        }
    }

    /// These options with [`Options::gemm_epilogue`] set to `mode`.
    pub fn with_gemm_epilogue(mut self, mode: EpilogueMode) -> Options {
        self.gemm_epilogue = Some(mode);
        self
    }

    /// These options with [`Options::cuda_tf32`] set to `allow`.
    pub fn with_cuda_tf32(mut self, allow: bool) -> Options {
        self.cuda_tf32 = allow;
        self
    }

    /// The architectures [`Target::CudaValidate`] checks.
    pub fn validate_archs(&self) -> Vec<u32> {
        if self.cuda_validate_archs.is_empty() {
            vec![80, 90]
        } else {
            self.cuda_validate_archs.clone()
        }
    }

    /// The options of the CUDA backend these options imply (cache root, recompilation, source
    /// dumps, block size), for calling [`crate::cuda`] directly:
    /// `ovl::cuda::compile(op, &options.cuda_options())`.
    pub fn cuda_options(&self) -> ovl_runtime::cuda::CudaCompileOptions {
        let mut o =
            ovl_runtime::cuda::CudaCompileOptions::default().with_block_size(self.cuda_block_size);
        if let Some(dir) = &self.cache_dir {
            o = o.with_cache_dir(dir.clone());
        }
        o.extra_options.extend(self.while_limit_define());
        o.with_force_recompile(self.force_recompile)
            .with_dump_source(self.dump_source)
    }

    /// Evaluate with generated C++ (the default).
    pub fn cpu() -> Options {
        Options::default()
    }

    /// The same options with optimization level `level` (0 = no merging, 3 = full; larger
    /// values mean 3).
    ///
    /// ```
    /// let unfused = ovl::Options::cpu().with_opt_level(0);
    /// assert_eq!(unfused.opt_level.get(), 0);
    /// assert_eq!(ovl::Options::default().opt_level.get(), 3);
    /// ```
    pub fn with_opt_level(mut self, level: u8) -> Options {
        self.opt_level = OptLevel::new(level);
        self
    }

    /// The same options with `threads` worker threads.
    pub fn with_threads(mut self, threads: usize) -> Options {
        self.threads = threads;
        self
    }

    /// How much worker-local memory row reuse ([`ovl_fuse::reuse_rows`]) may spend on this
    /// target: [`ovl_fuse::RowBudget::CPU`] for the C++ backend and the interpreter (a program
    /// exported for it runs on the CPU), [`ovl_fuse::RowBudget::PORTABLE`] for kernels that
    /// may run on a GPU.
    pub(crate) fn row_budget(&self) -> ovl_fuse::RowBudget {
        match self.target {
            Target::Interpreter | Target::Cpu => ovl_fuse::RowBudget::CPU,
            Target::Cuda | Target::CudaValidate => ovl_fuse::RowBudget::PORTABLE,
        }
    }

    /// The bound on `while` iterations these options imply (0: none).
    pub fn while_limit(&self) -> u64 {
        self.max_while_iterations
            .unwrap_or_else(ovl_core::limits::while_iterations_from_env)
    }

    /// The define that sets the generated code's bound on `while` iterations
    /// (`OVL_WHILE_LIMIT`, see `ovl_codegen`'s prelude) when it is not the default.
    fn while_limit_define(&self) -> Option<String> {
        let limit = self.while_limit();
        (limit != ovl_core::limits::WHILE_ITERATIONS)
            .then(|| format!("-DOVL_WHILE_LIMIT={limit}ULL"))
    }

    /// The options of the C++ backend these options imply (cache root, recompilation, source
    /// dumps, the bound on `while` iterations).
    pub fn compile_options(&self) -> ovl_codegen::CompileOptions {
        let mut o = ovl_codegen::CompileOptions::default();
        o.extra_flags.extend(self.while_limit_define());
        if let Some(dir) = &self.cache_dir {
            o.cache_dir = Some(dir.clone());
        }
        o.force_recompile |= self.force_recompile;
        o.dump_source |= self.dump_source;
        o
    }
}

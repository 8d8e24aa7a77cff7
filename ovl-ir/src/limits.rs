//! The limits of the targets on worker-local memory, in one place: what the tracer lets an
//! operator declare, what each code generator accepts, and what row reuse (`ovl_fuse::RowBudget`)
//! may add.

/// The largest local tensor an operator written with the DSL may declare, in bytes per worker:
/// every backend accepts it.
pub const PORTABLE_LOCAL_BYTES: u64 = 64 * 1024;

/// The largest total of all local tensors of one worker that the C++ backend accepts, in bytes
/// (they live on the worker thread's stack); also its largest single local tensor.
pub const CPU_LOCALS_BYTES: u64 = 256 * 1024;

/// The largest local tensor the CUDA backend accepts, in bytes per worker: a GPU reserves local
/// memory for every thread that can be resident at once.
pub const CUDA_LOCAL_BYTES: u64 = 64 * 1024;

/// The largest row buffer that row reuse adds to a kernel that may run on a GPU, in bytes per
/// worker: 4096 f32, about 4 GiB reserved on a GPU of 132 multiprocessors of 2048 threads.
pub const GPU_ROW_BUFFER_BYTES: u64 = 16 * 1024;

/// The default bound on the iterations of one `while` loop in one worker, per entry into the
/// loop: 2^32, far beyond any loop that ends on real data (a loop that reaches it is taken to
/// run forever and ends its worker with a fault). `OVL_MAX_WHILE_ITERATIONS` (or
/// `ovl::Options::max_while_iterations`) changes it; 0 means no bound. Counted `range` loops
/// need no bound: their trip count is fixed when they start.
pub const WHILE_ITERATIONS: u64 = 1 << 32;

/// The bound on `while` iterations: `OVL_MAX_WHILE_ITERATIONS` when it is set to a number
/// (0: no bound), else [`WHILE_ITERATIONS`]. Read once per process (evaluations ask at every
/// call).
pub fn while_iterations_from_env() -> u64 {
    static BOUND: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *BOUND.get_or_init(|| {
        std::env::var("OVL_MAX_WHILE_ITERATIONS")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(WHILE_ITERATIONS)
    })
}

/// Neighbouring workers the C++ backend runs in lockstep (its blocked workers: a loop over
/// them innermost, so reads they make at neighbouring elements vectorize); a kernel needs at
/// least this many along its innermost axis for it. Fusion's cost model prices such kernels
/// accordingly.
pub const LOCKSTEP_WORKERS: u64 = 64;

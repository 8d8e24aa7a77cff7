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

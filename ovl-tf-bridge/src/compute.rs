//! One call of the `DynamicLib` kernel (`Compute`): the inputs' shapes checked against the
//! binding the kernel instance made last, TensorFlow's outputs allocated, the program run on
//! TensorFlow's buffers.
//!
//! What a call costs beyond the program's own kernels is kept small, because a recurrent model
//! calls a small cell many times per step:
//! - **Bindings by pointer.** A kernel instance keeps the [`Binding`] of the last shapes it ran
//!   (made when it is constructed for a program with fixed shapes): a call whose shapes equal
//!   them takes it by cloning an `Arc`, without solving symbol values or hashing shapes; other
//!   shapes go through [`LoadedProgram::bind`] (its plans cache) and become the kept binding.
//! - **Few allocations of ours.** The status and the lists of tensors and pointers are
//!   per-thread scratch, reused from call to call (TensorFlow's threads live long): a program
//!   of one kernel with fixed shapes allocates nothing of ours per call (intermediates of a
//!   program of several kernels, and a polymorphic kernel's resolved shapes, still do).
//! - **Inline execution.** The program runs on TensorFlow's calling thread unless one of its
//!   kernels has a large estimated work (workers times the cost of a worker, at least
//!   [`parallel_min_work`]); only then may it hand chunks to ovl's thread pool (which splits
//!   only kernels of at least `ovl_runtime::PARALLEL_MIN_WORK`). TensorFlow already runs
//!   independent ops of a graph on its own threads: a hand-off to another pool for a kernel of
//!   tens of microseconds waits for a thread those ops keep busy, and made a training step
//!   slower, not faster (docs/benchmarks.md, the language model).

use crate::ffi::*;
use crate::tf::{tf_dtype, tf_dtype_name, Status};
use ovl::program::{Binding, LoadedProgram};
use std::cell::RefCell;
use std::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex, OnceLock};

/// The state of one kernel instance (one node of a graph): the loaded program and the binding
/// of the shapes it ran last.
pub(crate) struct Kernel {
    pub(crate) node: String,
    /// Shared with every live kernel running the same program (`crate::programs`).
    pub(crate) program: Arc<LoadedProgram>,
    pub(crate) last: LastBinding,
}

/// A binding of the feeds' shapes, with what allocating the outputs needs.
pub(crate) struct Bound {
    /// The feeds' shapes it was made for.
    shapes: Vec<Vec<usize>>,
    binding: Binding,
    /// The outputs' dimensions as TensorFlow takes them.
    out_dims: Vec<Vec<i64>>,
    /// The `threads` argument of the runs: 1 (TensorFlow's thread) below
    /// [`parallel_min_work`], else 0 (the runtime decides).
    threads: usize,
}

impl Bound {
    /// Binds the program's own feed shapes when they are all known (a program with fixed
    /// shapes).
    pub(crate) fn fixed(program: &LoadedProgram) -> Option<Bound> {
        if !program.symbols().is_empty() {
            return None;
        }
        let shapes: Vec<Vec<usize>> = program.feeds.iter().map(|(_, s)| s.shape.clone()).collect();
        let slices: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
        let binding = program.bind(&slices).ok()?;
        Some(Bound::new(program, shapes, binding))
    }

    fn new(program: &LoadedProgram, shapes: Vec<Vec<usize>>, binding: Binding) -> Bound {
        let threads = if program.largest_work(&binding) < parallel_min_work() {
            1
        } else {
            0
        };
        let out_dims = binding
            .outputs
            .iter()
            .map(|s| s.shape.iter().map(|&d| d as i64).collect())
            .collect();
        Bound {
            shapes,
            binding,
            out_dims,
            threads,
        }
    }
}

/// The default of [`parallel_min_work`].
pub const PARALLEL_MIN_WORK: u64 = 1 << 22;

/// The estimated work (workers times the cost of a worker, in expressions run) from which a
/// kernel of a `DynamicLib` program may use ovl's thread pool: `$OVL_TF_PARALLEL_MIN_WORK`
/// when set to a number (read once per process; 0: always, as outside TensorFlow), else
/// [`PARALLEL_MIN_WORK`].
pub fn parallel_min_work() -> u64 {
    static WORK: OnceLock<u64> = OnceLock::new();
    *WORK.get_or_init(|| {
        std::env::var("OVL_TF_PARALLEL_MIN_WORK")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(PARALLEL_MIN_WORK)
    })
}

/// The binding a kernel instance made last (shared by the calls of one node, which TensorFlow
/// may run concurrently), or its fixed one.
#[derive(Default)]
pub(crate) struct LastBinding {
    /// The binding of a program with fixed shapes, made when the kernel is constructed: read
    /// without a lock.
    fixed: Option<Arc<Bound>>,
    last: Mutex<Option<Arc<Bound>>>,
}

impl LastBinding {
    /// With the binding of the program's fixed shapes ([`Bound::fixed`], shared by the kernels
    /// of the program), so that no call binds.
    pub(crate) fn with_fixed(fixed: Option<Arc<Bound>>) -> LastBinding {
        LastBinding {
            fixed,
            last: Mutex::default(),
        }
    }

    /// The fixed binding, if the program has fixed shapes.
    fn fixed(&self) -> Option<&Bound> {
        self.fixed.as_deref()
    }

    fn get(&self) -> Option<Arc<Bound>> {
        if let Some(fixed) = &self.fixed {
            return Some(fixed.clone());
        }
        self.last.lock().ok().and_then(|b| b.clone())
    }

    fn store(&self, bound: Arc<Bound>) {
        if let Ok(mut b) = self.last.lock() {
            *b = Some(bound);
        }
    }
}

/// Per-thread lists reused by every call on that thread.
#[derive(Default)]
struct Scratch {
    /// Tensors handed to us by TensorFlow in this call (deleted at its end).
    tensors: Vec<*mut TF_Tensor>,
    feeds: Vec<*const c_void>,
    outputs: Vec<*mut c_void>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
    static STATUS: Status = Status::new();
}

/// Deletes the call's tensors when the call ends (also on an error), keeping the lists.
struct CallTensors<'a>(&'a mut Scratch);

impl Drop for CallTensors<'_> {
    fn drop(&mut self) {
        for t in self.0.tensors.drain(..) {
            // SAFETY: each tensor was handed to us by TF_GetInput or TF_AllocateOutput in this
            // call and is deleted once.
            unsafe { TF_DeleteTensor(t) };
        }
        self.0.feeds.clear();
        self.0.outputs.clear();
    }
}

/// A failure: TensorFlow's code and the message.
pub(crate) type Failure = (TF_Code, String);

/// Runs one call of `kernel` in `ctx`.
pub(crate) fn run(kernel: &Kernel, ctx: *mut TF_OpKernelContext) -> Result<(), Failure> {
    STATUS.with(|status| {
        SCRATCH.with(|scratch| match scratch.try_borrow_mut() {
            Ok(mut scratch) => run_with(kernel, ctx, status, &mut scratch),
            // Not reached (a kernel does not call another), but harmless: fresh lists.
            Err(_) => run_with(kernel, ctx, status, &mut Scratch::default()),
        })
    })
}

fn run_with(
    kernel: &Kernel,
    ctx: *mut TF_OpKernelContext,
    status: &Status,
    scratch: &mut Scratch,
) -> Result<(), Failure> {
    let program = &kernel.program;
    let fail = |code, message: String| (code, format!("DynamicLib `{}`: {message}", kernel.node));
    // SAFETY: ctx comes from TensorFlow for this call.
    let (n_in, n_out) = unsafe { (TF_NumInputs(ctx), TF_NumOutputs(ctx)) };
    if n_in as usize != program.feeds.len() || n_out as usize != program.outputs.len() {
        return Err(fail(
            TF_INVALID_ARGUMENT,
            format!("called with {n_in} inputs and {n_out} outputs"),
        ));
    }
    let call = CallTensors(scratch);
    let last = kernel.last.get();
    let mut same_shapes = last.is_some();
    for k in 0..n_in {
        let mut t: *mut TF_Tensor = std::ptr::null_mut();
        status.reset();
        // SAFETY: k < TF_NumInputs; on success the tensor is ours (deleted by `call`).
        unsafe { TF_GetInput(ctx, k, &mut t, status.0) };
        status
            .ok()
            .map_err(|e| fail(TF_INTERNAL, format!("cannot read input {k}: {e}")))?;
        call.0.tensors.push(t);
        // SAFETY: t is a live tensor.
        let dtype = unsafe { TF_TensorType(t) };
        if dtype != tf_dtype(program.feeds[k as usize].1.dtype) {
            return Err(fail(
                TF_INVALID_ARGUMENT,
                format!("input {k} has {}", tf_dtype_name(dtype)),
            ));
        }
        if let Some(bound) = &last {
            // SAFETY: t is a live tensor.
            same_shapes = same_shapes && unsafe { has_shape(t, &bound.shapes[k as usize]) };
        }
        // SAFETY: t is a live tensor of the feed's dtype; its shape is checked below, before
        // anything reads it.
        call.0.feeds.push(unsafe { TF_TensorData(t) }.cast_const());
    }
    let bound = match last {
        Some(bound) if same_shapes => bound,
        _ => {
            let bound = Arc::new(
                bind(program, &call.0.tensors).map_err(|(code, message)| fail(code, message))?,
            );
            kernel.last.store(bound.clone());
            bound
        }
    };
    for (k, (sig, dims)) in bound
        .binding
        .outputs
        .iter()
        .zip(&bound.out_dims)
        .enumerate()
    {
        status.reset();
        // SAFETY: k < TF_NumOutputs; dims holds num_dims entries; on success the tensor is ours.
        let t = unsafe {
            TF_AllocateOutput(
                ctx,
                k as c_int,
                tf_dtype(sig.dtype),
                dims.as_ptr(),
                dims.len() as c_int,
                sig.bytes(),
                status.0,
            )
        };
        status
            .ok()
            .map_err(|e| fail(TF_INTERNAL, format!("cannot allocate output {k}: {e}")))?;
        if t.is_null() {
            return Err(fail(TF_INTERNAL, format!("output {k} was not allocated")));
        }
        call.0.tensors.push(t);
        // SAFETY: t is a live tensor.
        if unsafe { TF_TensorByteSize(t) } != sig.bytes() {
            return Err(fail(TF_INTERNAL, format!("output {k} has the wrong size")));
        }
        // SAFETY: t is a live tensor of sig.bytes() bytes.
        call.0.outputs.push(unsafe { TF_TensorData(t) });
    }
    // SAFETY: the feeds have the program's dtypes and the shapes of the binding; the outputs
    // were allocated by TensorFlow with the binding's output types, distinct from the inputs.
    unsafe {
        program.run_bound(
            &bound.binding,
            &call.0.feeds,
            &call.0.outputs,
            bound.threads,
        )
    }
    .map_err(|e| fail(TF_INVALID_ARGUMENT, e.to_string()))
}

/// One input as the C++ kernel (`python/ovl_tf/kernel/dynamic_lib_kernel.cc`) hands it over:
/// TensorFlow's buffer, its dimensions and its dtype (TensorFlow's enum).
#[repr(C)]
pub struct RawInput {
    pub data: *const c_void,
    pub dims: *const i64,
    pub rank: c_int,
    pub dtype: c_int,
}

/// The C++ kernel's allocator of output `k` with `rank` dimensions `dims`: 0 and the buffer in
/// `data`, or non-zero when TensorFlow refused (its status is then set on the context).
pub type Allocate = unsafe extern "C" fn(
    ctx: *mut c_void,
    k: c_int,
    dims: *const i64,
    rank: c_int,
    data: *mut *mut c_void,
) -> c_int;

impl Kernel {
    /// Whether every call runs on TensorFlow's thread without a large kernel (a program with
    /// fixed shapes below [`parallel_min_work`]): TensorFlow's executor may then run it inline
    /// like its own cheap ops. A program with sizes given at run time does not know yet.
    pub(crate) fn is_small(&self) -> bool {
        self.last.get().is_some_and(|b| b.threads == 1)
    }
}

/// Runs one call of `kernel` on raw buffers (the C++ kernel's path): the same checks, binding
/// and run as [`run`], without TensorFlow's C-API tensor wrappers.
///
/// # Safety
/// Each input's `data` must hold a tensor of `dims` (`rank` entries) of `dtype`, alive during
/// the call; `allocate(ctx, ..)` must return buffers of the requested shape and the output
/// dtypes the kernel was constructed with, distinct from the inputs.
pub(crate) unsafe fn run_raw(
    kernel: &Kernel,
    inputs: &[RawInput],
    n_out: usize,
    allocate: Allocate,
    ctx: *mut c_void,
) -> Result<(), Failure> {
    SCRATCH.with(|scratch| match scratch.try_borrow_mut() {
        // SAFETY: forwarded.
        Ok(mut scratch) => unsafe {
            run_raw_with(kernel, inputs, n_out, allocate, ctx, &mut scratch)
        },
        // SAFETY: forwarded.
        Err(_) => unsafe {
            run_raw_with(
                kernel,
                inputs,
                n_out,
                allocate,
                ctx,
                &mut Scratch::default(),
            )
        },
    })
}

unsafe fn run_raw_with(
    kernel: &Kernel,
    inputs: &[RawInput],
    n_out: usize,
    allocate: Allocate,
    ctx: *mut c_void,
    scratch: &mut Scratch,
) -> Result<(), Failure> {
    let program = &kernel.program;
    let fail = |code, message: String| (code, format!("DynamicLib `{}`: {message}", kernel.node));
    if inputs.len() != program.feeds.len() || n_out != program.outputs.len() {
        return Err(fail(
            TF_INVALID_ARGUMENT,
            format!("called with {} inputs and {n_out} outputs", inputs.len()),
        ));
    }
    let call = CallTensors(scratch);
    // A program with fixed shapes: its binding, by reference (no lock, no reference count).
    let fixed = kernel.last.fixed();
    let mut same_shapes = fixed.is_some();
    for (k, input) in inputs.iter().enumerate() {
        if input.dtype != tf_dtype(program.feeds[k].1.dtype) {
            return Err(fail(
                TF_INVALID_ARGUMENT,
                format!("input {k} has {}", tf_dtype_name(input.dtype)),
            ));
        }
        if let Some(bound) = fixed {
            // SAFETY: dims holds rank entries (the caller's contract).
            same_shapes = same_shapes && same_dims(unsafe { raw_dims(input) }, &bound.shapes[k]);
        }
        call.0.feeds.push(input.data);
    }
    let held: Arc<Bound>;
    let bound: &Bound = match fixed {
        Some(bound) if same_shapes => bound,
        _ => {
            // SAFETY: forwarded.
            held = unsafe { raw_binding(kernel, inputs) }.map_err(|(code, m)| fail(code, m))?;
            &held
        }
    };
    for (k, dims) in bound.out_dims.iter().enumerate() {
        let mut data: *mut c_void = std::ptr::null_mut();
        // SAFETY: the caller's contract; dims holds len() entries.
        if unsafe {
            allocate(
                ctx,
                k as c_int,
                dims.as_ptr(),
                dims.len() as c_int,
                &mut data,
            )
        } != 0
        {
            return Err(fail(TF_INTERNAL, format!("cannot allocate output {k}")));
        }
        call.0.outputs.push(data);
    }
    // SAFETY: the feeds have the program's dtypes and the shapes of the binding; the outputs
    // were allocated by TensorFlow with the binding's shapes and the program's output types.
    unsafe {
        program.run_bound(
            &bound.binding,
            &call.0.feeds,
            &call.0.outputs,
            bound.threads,
        )
    }
    .map_err(|e| fail(TF_INVALID_ARGUMENT, e.to_string()))
}

/// The binding of raw inputs whose shapes are not the fixed ones: the kernel's last one when
/// the shapes are its, else a new one (kept as the last one).
///
/// # Safety
/// Each input's `dims` must hold `rank` entries.
unsafe fn raw_binding(kernel: &Kernel, inputs: &[RawInput]) -> Result<Arc<Bound>, Failure> {
    if let Some(last) = kernel.last.get() {
        // SAFETY: forwarded.
        if (inputs.iter().zip(&last.shapes)).all(|(i, s)| same_dims(unsafe { raw_dims(i) }, s)) {
            return Ok(last);
        }
    }
    let shapes = inputs
        .iter()
        // SAFETY: forwarded.
        .map(|i| {
            // SAFETY: forwarded (the caller's contract).
            unsafe { raw_dims(i) }
                .iter()
                .map(|&d| d.max(0) as usize)
                .collect()
        })
        .collect();
    let bound = Arc::new(bind_shapes(&kernel.program, shapes)?);
    kernel.last.store(bound.clone());
    Ok(bound)
}

/// The dimensions of a raw input, as TensorFlow's signed sizes.
///
/// # Safety
/// `input.dims` must hold `input.rank` entries (or `rank` be 0).
unsafe fn raw_dims(input: &RawInput) -> &[i64] {
    if input.rank <= 0 || input.dims.is_null() {
        &[]
    } else {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts(input.dims, input.rank as usize) }
    }
}

/// Whether TensorFlow's dimensions `dims` are `shape`.
fn same_dims(dims: &[i64], shape: &[usize]) -> bool {
    dims.len() == shape.len() && dims.iter().zip(shape).all(|(&d, &n)| d == n as i64)
}

/// Whether tensor `t` has shape `shape`.
///
/// # Safety
/// `t` must be a live tensor.
unsafe fn has_shape(t: *const TF_Tensor, shape: &[usize]) -> bool {
    // SAFETY: forwarded to the caller; dimension indices are below TF_NumDims.
    unsafe {
        TF_NumDims(t) as usize == shape.len()
            && shape
                .iter()
                .enumerate()
                .all(|(d, &n)| TF_Dim(t, d as c_int) == n as i64)
    }
}

/// Checks the inputs' shapes against the program and binds them (the slow path: new shapes).
fn bind(program: &LoadedProgram, inputs: &[*mut TF_Tensor]) -> Result<Bound, Failure> {
    let shapes = inputs
        .iter()
        .map(|&t| {
            // SAFETY: t is a live tensor.
            unsafe {
                (0..TF_NumDims(t))
                    .map(|d| TF_Dim(t, d).max(0) as usize)
                    .collect()
            }
        })
        .collect();
    bind_shapes(program, shapes)
}

/// Checks the feeds' shapes against the program and binds them.
pub(crate) fn bind_shapes(
    program: &LoadedProgram,
    shapes: Vec<Vec<usize>>,
) -> Result<Bound, Failure> {
    for (k, shape) in shapes.iter().enumerate() {
        program
            .check_feed(k, program.feeds[k].1.dtype, shape)
            .map_err(|e| (TF_INVALID_ARGUMENT, e.to_string()))?;
    }
    let slices: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
    let binding = program
        .bind(&slices)
        .map_err(|e| (TF_INVALID_ARGUMENT, e.to_string()))?;
    Ok(Bound::new(program, shapes, binding))
}

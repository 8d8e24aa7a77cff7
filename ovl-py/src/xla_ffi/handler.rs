//! The XLA typed-FFI handler that runs a registered program on XLA's buffers, and the registry
//! of those programs.
//!
//! A program is registered once per process ([`register`]) and gets a small integer id, which
//! the custom call carries as its `program` attribute (an `int64` scalar). Registered programs
//! are kept for the life of the process: a compiled XLA executable may call one at any time.
//!
//! The call path, on the thread XLA runs the custom call on: find the program (a read lock and
//! an index), check the buffers against the program (counts, dtypes, ranks), take the binding
//! of their shapes (made once for a program with fixed shapes; for a polymorphic one the
//! thread's last binding when the shapes are the same, else bound now), and run. Nothing is
//! allocated per call for up to [`INLINE`] inputs and outputs once a thread has bound the
//! shapes. A program whose largest kernel is small ([`parallel_min_work`]) runs on the calling
//! thread; a larger one on ovl's thread pool.

use super::c_api::{self, CallFrame};
use ovl::program::{tensorflow_dtype_name, tensorflow_type_name, Binding, LoadedProgram};
use ovl_core::DType;
use std::cell::RefCell;
use std::ffi::{c_void, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, OnceLock, RwLock};

/// Inputs and outputs up to this many are passed to the run from the stack.
pub const INLINE: usize = 8;

/// The default of [`parallel_min_work`] (the TF bridge's, `ovl_tf_bridge::compute`).
pub const PARALLEL_MIN_WORK: u64 = 1 << 22;

/// The estimated work (see `LoadedProgram::largest_work`) from which a call runs on ovl's
/// thread pool instead of the calling thread: `$OVL_JAX_PARALLEL_MIN_WORK` when set to a number
/// (read once per process), else [`PARALLEL_MIN_WORK`].
pub fn parallel_min_work() -> u64 {
    static WORK: OnceLock<u64> = OnceLock::new();
    *WORK.get_or_init(|| {
        std::env::var("OVL_JAX_PARALLEL_MIN_WORK")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(PARALLEL_MIN_WORK)
    })
}

/// A binding and the threads a run with it uses.
struct Bound {
    binding: Binding,
    threads: usize,
}

impl Bound {
    fn new(program: &LoadedProgram, binding: Binding) -> Bound {
        // 1 thread: the calling thread; 0: one per core (ovl's pool).
        let threads = if program.largest_work(&binding) < parallel_min_work() {
            1
        } else {
            0
        };
        Bound { binding, threads }
    }
}

/// A registered program.
pub struct Entry {
    pub program: Arc<LoadedProgram>,
    /// Its GPU build, made at the first call on a GPU (the CUDA handler's).
    pub gpu: Arc<crate::cuda::CudaProgram>,
    /// The binding of a program with fixed shapes.
    fixed: Option<Bound>,
}

static REGISTRY: RwLock<Vec<&'static Entry>> = RwLock::new(Vec::new());

thread_local! {
    /// The thread's last binding of a polymorphic program: its id, its inputs' dims (all of
    /// them, in order) and the binding.
    static LAST: RefCell<Option<(u64, Vec<i64>, Bound)>> = const { RefCell::new(None) };
}

/// Registers `program` and returns its id (the same id for the same program).
pub fn register(
    program: &Arc<LoadedProgram>,
    gpu: &Arc<crate::cuda::CudaProgram>,
) -> Result<u64, String> {
    let mut registry = REGISTRY
        .write()
        .map_err(|_| "the ovl.jax registry is poisoned")?;
    if let Some(id) = registry
        .iter()
        .position(|e| Arc::ptr_eq(&e.program, program))
    {
        return Ok(id as u64);
    }
    let fixed = if program.symbols().is_empty() {
        let shapes: Vec<&[usize]> = program.feeds.iter().map(|(_, s)| &s.shape[..]).collect();
        let binding = program.bind(&shapes).map_err(|e| e.to_string())?;
        Some(Bound::new(program, binding))
    } else {
        None
    };
    let entry: &'static Entry = Box::leak(Box::new(Entry {
        program: program.clone(),
        gpu: gpu.clone(),
        fixed,
    }));
    registry.push(entry);
    Ok(registry.len() as u64 - 1)
}

/// The registered program of `id`.
pub fn entry(id: u64) -> Option<&'static Entry> {
    let registry = REGISTRY.read().ok()?;
    usize::try_from(id)
        .ok()
        .and_then(|k| registry.get(k).copied())
}

/// XLA's dtype of an ovl dtype.
pub fn xla_dtype(dtype: DType) -> i32 {
    use c_api::data_type as t;
    match dtype {
        DType::F16 => t::F16,
        DType::BF16 => t::BF16,
        DType::F32 => t::F32,
        DType::F64 => t::F64,
        DType::I8 => t::S8,
        DType::I16 => t::S16,
        DType::I32 => t::S32,
        DType::I64 => t::S64,
        DType::U8 => t::U8,
        DType::U16 => t::U16,
        DType::U32 => t::U32,
        DType::U64 => t::U64,
        DType::Bool => t::PRED,
    }
}

/// A failure: an XLA error code and a message.
pub(super) type Failure = (i32, String);

pub(super) fn invalid(message: String) -> Failure {
    (c_api::INVALID_ARGUMENT, message)
}

/// A buffer of the call frame, checked to be a buffer of the size this handler reads.
///
/// # Safety
/// `list` must be the frame's args or rets, `k < list.size`.
pub(super) unsafe fn buffer(
    list: &c_api::List,
    k: usize,
    what: impl Fn() -> String,
) -> Result<&c_api::Buffer, Failure> {
    // SAFETY: the caller's contract; XLA's lists hold `size` types and items.
    let (kind, item) = unsafe { (*list.types.add(k), *list.items.add(k)) };
    if kind != c_api::BUFFER || item.is_null() {
        return Err(invalid(format!("{} is not a buffer", what())));
    }
    // SAFETY: a buffer item points to an XLA_FFI_Buffer alive for the call.
    let b = unsafe { &*item.cast::<c_api::Buffer>() };
    if b.struct_size < c_api::BUFFER_SIZE {
        return Err(invalid(format!(
            "{}: XLA's buffer struct is older than expected",
            what()
        )));
    }
    Ok(b)
}

/// The dims of a buffer.
///
/// # Safety
/// `b` must be a buffer of the call frame.
pub(super) unsafe fn dims(b: &c_api::Buffer) -> &[i64] {
    if b.rank <= 0 || b.dims.is_null() {
        return &[];
    }
    // SAFETY: XLA's buffer holds `rank` dims.
    unsafe { std::slice::from_raw_parts(b.dims, b.rank as usize) }
}

/// The `program` attribute: the registered program's id.
///
/// # Safety
/// `attrs` must be the frame's attributes.
pub(super) unsafe fn program_id(attrs: &c_api::Attrs) -> Result<u64, Failure> {
    for k in 0..usize::try_from(attrs.size).unwrap_or(0) {
        // SAFETY: XLA's attributes hold `size` types, names and values.
        let (kind, name, value) = unsafe {
            (
                *attrs.types.add(k),
                &**attrs.names.add(k),
                *attrs.attrs.add(k),
            )
        };
        // SAFETY: a byte span of `len` bytes.
        let name = unsafe { std::slice::from_raw_parts(name.ptr.cast::<u8>(), name.len) };
        if name != b"program" {
            continue;
        }
        if kind != c_api::ATTR_SCALAR {
            break;
        }
        // SAFETY: a scalar attribute points to an XLA_FFI_Scalar.
        let scalar = unsafe { &*value.cast::<c_api::Scalar>() };
        let v = scalar.value;
        return match scalar.dtype {
            // SAFETY: the scalar's value is of its dtype.
            c_api::data_type::S64 => Ok(unsafe { *v.cast::<i64>() } as u64),
            // SAFETY: as above.
            c_api::data_type::U64 => Ok(unsafe { *v.cast::<u64>() }),
            // SAFETY: as above.
            c_api::data_type::S32 => Ok(unsafe { *v.cast::<i32>() } as u64),
            _ => break,
        };
    }
    Err(invalid(
        "the custom call has no int64 `program` attribute (call it through ovl.jax.op)".into(),
    ))
}

/// Fills the metadata XLA asks for: the API version (the older of the runtime's and
/// [`c_api::API_MINOR`]) and no traits (not marked safe for command buffers: the CPU handler
/// is not used on a GPU).
///
/// # Safety
/// `ext` must be XLA's metadata extension; `api` XLA's API or null.
pub(super) unsafe fn metadata(
    ext: *mut c_api::ExtensionBase,
    api: *const c_api::Api,
) -> Result<(), Failure> {
    // SAFETY: the caller's contract.
    let ext = unsafe { &mut *ext.cast::<c_api::MetadataExtension>() };
    if ext.extension_base.struct_size < c_api::METADATA_EXTENSION_SIZE || ext.metadata.is_null() {
        return Err(invalid(
            "XLA's metadata extension is older than expected".into(),
        ));
    }
    // SAFETY: checked non-null; XLA's metadata struct, written up to its size.
    let m = unsafe { &mut *ext.metadata };
    if m.struct_size < c_api::METADATA_SIZE {
        return Err(invalid(
            "XLA's metadata struct is older than expected".into(),
        ));
    }
    let mut minor = c_api::API_MINOR;
    if !api.is_null() {
        // SAFETY: XLA's API struct, read through its version.
        let runtime = unsafe { &(*api).api_version };
        if runtime.major_version == c_api::API_MAJOR {
            minor = minor.min(runtime.minor_version);
        }
    }
    m.api_version = c_api::ApiVersion {
        struct_size: c_api::API_VERSION_SIZE,
        extension_start: std::ptr::null_mut(),
        major_version: c_api::API_MAJOR,
        minor_version: minor,
    };
    m.traits = 0;
    Ok(())
}

/// Checks the counts of the frame's operands and results against the program's.
pub(super) fn check_counts(frame: &CallFrame, program: &LoadedProgram) -> Result<(), Failure> {
    let (n_in, n_out) = (program.feeds.len(), program.outputs.len());
    if frame.args.size != n_in as i64 || frame.rets.size != n_out as i64 {
        return Err(invalid(format!(
            "ovl program `{}` has {n_in} input(s) and {n_out} output(s); the custom call has {} \
             operand(s) and {} result(s)",
            program.name, frame.args.size, frame.rets.size
        )));
    }
    Ok(())
}

/// Input `k`'s buffer and dims, checked against the program's dtype and rank for it.
///
/// # Safety
/// `frame`'s operands are checked to be as many as the program's inputs, `k` one of them.
pub(super) unsafe fn input_buffer<'f>(
    frame: &'f CallFrame,
    program: &LoadedProgram,
    k: usize,
) -> Result<(&'f c_api::Buffer, &'f [i64]), Failure> {
    let (name, sig) = &program.feeds[k];
    let what = || format!("ovl program `{}`: input {k} (`{name}`)", program.name);
    // SAFETY: k < args.size (the caller's contract).
    let b = unsafe { buffer(&frame.args, k, what) }?;
    // SAFETY: a buffer of the frame.
    let d = unsafe { dims(b) };
    if b.dtype != xla_dtype(sig.dtype) || d.len() != sig.shape.len() {
        return Err(invalid(format!(
            "{} is an XLA buffer of dtype {} and rank {}, the program takes {}",
            what(),
            b.dtype,
            d.len(),
            tensorflow_type_name(sig)
        )));
    }
    Ok((b, d))
}

/// Output `k`'s buffer, checked to be of `sig`'s dtype and shape.
///
/// # Safety
/// `frame`'s results are checked to be as many as the program's outputs, `k` one of them.
pub(super) unsafe fn output_buffer(
    frame: &CallFrame,
    program: &LoadedProgram,
    k: usize,
    sig: &ovl_runtime::plan::Sig,
) -> Result<*mut c_void, Failure> {
    let what = || format!("ovl program `{}`: output {k}", program.name);
    // SAFETY: k < rets.size (the caller's contract).
    let b = unsafe { buffer(&frame.rets, k, what) }?;
    // SAFETY: a buffer of the frame.
    let d = unsafe { dims(b) };
    if b.dtype != xla_dtype(sig.dtype)
        || !d.iter().map(|&x| x as usize).eq(sig.shape.iter().copied())
    {
        return Err(invalid(format!(
            "{} is an XLA buffer of dtype {} and shape {d:?}, the program gives {}",
            what(),
            b.dtype,
            tensorflow_type_name(sig)
        )));
    }
    Ok(b.data)
}

/// The handler's body.
///
/// # Safety
/// `frame` must be XLA's call frame.
unsafe fn call(frame: &CallFrame) -> Result<(), Failure> {
    if !frame.extension_start.is_null() {
        // SAFETY: XLA's extension chain.
        if unsafe { (*frame.extension_start).kind } == c_api::EXTENSION_METADATA {
            // SAFETY: the metadata extension.
            return unsafe { metadata(frame.extension_start, frame.api) };
        }
    }
    if frame.stage != c_api::STAGE_EXECUTE {
        return Ok(());
    }
    // SAFETY: the frame's attributes.
    let id = unsafe { program_id(&frame.attrs) }?;
    let entry = entry(id).ok_or_else(|| {
        invalid(format!(
            "no ovl program is registered as {id} in this process (an executable from another \
             process?)"
        ))
    })?;
    let program = &*entry.program;
    check_counts(frame, program)?;
    let n_in = program.feeds.len();
    let mut feeds = [std::ptr::null::<c_void>(); INLINE];
    let mut feeds_vec = Vec::new();
    let mut all_dims = [0i64; 4 * INLINE];
    let mut all_dims_vec = Vec::new();
    let mut at = 0;
    for (k, _) in program.feeds.iter().enumerate() {
        // SAFETY: the counts are checked.
        let (b, d) = unsafe { input_buffer(frame, program, k) }?;
        if n_in <= INLINE {
            feeds[k] = b.data.cast_const();
        } else {
            feeds_vec.push(b.data.cast_const());
        }
        if at + d.len() <= all_dims.len() {
            all_dims[at..at + d.len()].copy_from_slice(d);
        } else {
            if all_dims_vec.is_empty() {
                all_dims_vec.extend_from_slice(&all_dims[..at]);
            }
            all_dims_vec.extend_from_slice(d);
        }
        at += d.len();
    }
    let dims_given: &[i64] = if all_dims_vec.is_empty() {
        &all_dims[..at]
    } else {
        &all_dims_vec
    };
    let feeds: &[*const c_void] = if n_in <= INLINE {
        &feeds[..n_in]
    } else {
        &feeds_vec
    };
    match &entry.fixed {
        Some(bound) => {
            let want = program
                .feeds
                .iter()
                .flat_map(|(_, s)| s.shape.iter().copied());
            if !want.eq(dims_given.iter().map(|&d| d as usize)) {
                // SAFETY: the frame's buffers.
                return Err(unsafe { shape_failure(frame, program) });
            }
            // SAFETY: the frame's buffers.
            unsafe { run(frame, program, bound, feeds) }
        }
        None => LAST.with(|last| {
            let mut last = last.borrow_mut();
            let hit = matches!(&*last, Some((i, d, _)) if *i == id && d[..] == *dims_given);
            if !hit {
                let mut shapes = Vec::with_capacity(n_in);
                let mut at = 0;
                for (_, sig) in &program.feeds {
                    let r = sig.shape.len();
                    let s: Vec<usize> = dims_given[at..at + r]
                        .iter()
                        .map(|&d| usize::try_from(d).unwrap_or(usize::MAX))
                        .collect();
                    shapes.push(s);
                    at += r;
                }
                let slices: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
                let binding = program
                    .bind(&slices)
                    .map_err(|e| invalid(format!("ovl {e}")))?;
                *last = Some((id, dims_given.to_vec(), Bound::new(program, binding)));
            }
            let Some((_, _, bound)) = &*last else {
                return Err((c_api::INTERNAL, "ovl: no binding".into()));
            };
            // SAFETY: the frame's buffers.
            unsafe { run(frame, program, bound, feeds) }
        }),
    }
}

/// The error of inputs whose shapes are not the fixed program's.
///
/// # Safety
/// `frame`'s args must hold the program's inputs, checked buffers.
unsafe fn shape_failure(frame: &CallFrame, program: &LoadedProgram) -> Failure {
    for (k, (name, sig)) in program.feeds.iter().enumerate() {
        // SAFETY: checked before.
        let d = unsafe { dims(&*(*frame.args.items.add(k)).cast::<c_api::Buffer>()) };
        if !d.iter().map(|&x| x as usize).eq(sig.shape.iter().copied()) {
            return invalid(format!(
                "ovl program `{}`: input {k} (`{name}`) has shape {d:?}, the program takes {}",
                program.name,
                tensorflow_type_name(sig)
            ));
        }
    }
    invalid(format!(
        "ovl program `{}`: inputs of other shapes",
        program.name
    ))
}

/// Checks the outputs against the binding and runs.
///
/// # Safety
/// `feeds` must point to the frame's input buffers, checked against the binding.
unsafe fn run(
    frame: &CallFrame,
    program: &LoadedProgram,
    bound: &Bound,
    feeds: &[*const c_void],
) -> Result<(), Failure> {
    let n_out = program.outputs.len();
    let mut outs = [std::ptr::null_mut::<c_void>(); INLINE];
    let mut outs_vec = Vec::new();
    for (k, sig) in bound.binding.outputs.iter().enumerate() {
        // SAFETY: the counts are checked by the caller.
        let data = unsafe { output_buffer(frame, program, k, sig) }?;
        if n_out <= INLINE {
            outs[k] = data;
        } else {
            outs_vec.push(data);
        }
    }
    let outs: &[*mut c_void] = if n_out <= INLINE {
        &outs[..n_out]
    } else {
        &outs_vec
    };
    // SAFETY: XLA's buffers have the bound dtypes and shapes (checked above), row-major (the
    // custom call's layouts are the default ones, which ovl.jax asks for), the outputs
    // distinct from the inputs and alive for the call.
    unsafe { program.run_bound(&bound.binding, feeds, outs, bound.threads) }.map_err(|e| {
        (
            c_api::INTERNAL,
            format!(
                "ovl {e} (outputs {})",
                bound
                    .binding
                    .outputs
                    .iter()
                    .map(tensorflow_type_name)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
    })
}

/// An XLA error made by the API's `XLA_FFI_Error_Create` (null when there is no API to make
/// one with: XLA always passes it).
///
/// # Safety
/// `api` must be XLA's API or null.
unsafe fn xla_error(api: *const c_api::Api, (code, message): Failure) -> *mut c_api::Error {
    if api.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: XLA's API struct; its size checked before the function is read.
    let api = unsafe { &*api };
    let create = match api.error_create {
        Some(f) if api.struct_size >= c_api::API_SIZE => f,
        _ => return std::ptr::null_mut(),
    };
    let message = CString::new(message.replace('\0', " ")).unwrap_or_default();
    let mut args = c_api::ErrorCreateArgs {
        struct_size: c_api::ERROR_CREATE_ARGS_SIZE,
        extension_start: std::ptr::null_mut(),
        message: message.as_ptr(),
        errc: code,
    };
    // SAFETY: XLA copies the message into the error it returns.
    unsafe { create(&mut args) }
}

/// Runs `body` on the frame under `catch_unwind` and turns its failure into an XLA error.
///
/// # Safety
/// `frame` must be XLA's call frame (or null).
pub(super) unsafe fn guarded(
    frame: *mut CallFrame,
    body: impl FnOnce(&CallFrame) -> Result<(), Failure>,
) -> *mut c_api::Error {
    if frame.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: XLA's call frame, alive for the call; its size checked before anything past
    // `struct_size` is read.
    let f = unsafe { &*frame };
    if f.struct_size < c_api::CALL_FRAME_SIZE {
        // Too old to read even its API pointer safely.
        return std::ptr::null_mut();
    }
    let api = f.api;
    let result = catch_unwind(AssertUnwindSafe(|| body(f)));
    let failure = match result {
        Ok(Ok(())) => return std::ptr::null_mut(),
        Ok(Err(failure)) => failure,
        Err(_) => (
            c_api::INTERNAL,
            "ovl: internal error (a panic) in the XLA handler".to_string(),
        ),
    };
    // SAFETY: XLA's API.
    unsafe { xla_error(api, failure) }
}

/// The typed-FFI handler of the CPU platform (`XLA_FFI_Handler`).
///
/// # Safety
/// XLA calls it with its call frame.
pub unsafe extern "C" fn handler_cpu(frame: *mut CallFrame) -> *mut c_api::Error {
    let body = |f: &CallFrame| {
        // SAFETY: XLA's call frame.
        unsafe { call(f) }
    };
    // SAFETY: XLA's call frame.
    unsafe { guarded(frame, body) }
}

/// The name of a dtype for messages.
pub fn dtype_name(dtype: DType) -> &'static str {
    tensorflow_dtype_name(dtype)
}

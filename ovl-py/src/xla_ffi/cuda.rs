//! The XLA typed-FFI handler of the CUDA platform: runs a registered program's GPU build
//! (compiled at its first GPU call, `crate::cuda::CudaProgram`) on XLA's buffers, on the
//! call's stream (`XLA_FFI_Stream_Get`) and device (`XLA_FFI_DeviceOrdinal_Get`, else the
//! device the buffers are on), its scratch one block from XLA's allocator
//! (`XLA_FFI_DeviceMemory_Allocate`, given back when the call returns as XLA's own scratch
//! allocator does: XLA orders its memory by its compute stream) used as an arena. It queues
//! the work and returns: nothing waits for the GPU.
//!
//! Not marked compatible with command buffers (its metadata reports no traits): a call
//! allocates from XLA's allocator, and the first call of a program on a device uploads its
//! constants, neither of which a captured command buffer may do. XLA then runs it as a
//! separate thunk on its stream, outside any captured graph.

use super::c_api::{self, CallFrame};
use super::handler::Failure;
use super::handler::{
    check_counts, entry, guarded, input_buffer, invalid, metadata, output_buffer, program_id,
};
use ovl::cuda::stream::{pointer_device, Scratch, StreamCall, SCRATCH_ALIGN};
use std::ffi::{c_void, CStr};

/// The typed-FFI handler of the CUDA platform (`XLA_FFI_Handler`).
///
/// # Safety
/// XLA calls it with its call frame.
pub unsafe extern "C" fn handler_cuda(frame: *mut CallFrame) -> *mut c_api::Error {
    let body = |f: &CallFrame| {
        // SAFETY: XLA's extension chain (null or valid).
        let metadata_query = !f.extension_start.is_null()
            && unsafe { (*f.extension_start).kind } == c_api::EXTENSION_METADATA;
        if metadata_query {
            // SAFETY: the metadata extension.
            return unsafe { metadata(f.extension_start, f.api) };
        }
        if f.stage != c_api::STAGE_EXECUTE {
            return Ok(());
        }
        // SAFETY: XLA's call frame.
        unsafe { call(f) }
    };
    // SAFETY: XLA's call frame.
    unsafe { guarded(frame, body) }
}

/// XLA's API, checked to hold the functions up to `size`.
fn api<'a>(frame: &'a CallFrame, size: usize, what: &str) -> Result<&'a c_api::Api, Failure> {
    if frame.api.is_null() {
        return Err((c_api::INTERNAL, "ovl: XLA gave no API".into()));
    }
    // SAFETY: XLA's API struct, alive for the process.
    let api = unsafe { &*frame.api };
    if api.struct_size < size {
        return Err((
            c_api::UNIMPLEMENTED,
            format!("ovl: this XLA's FFI API has no {what} (a newer jaxlib is needed)"),
        ));
    }
    Ok(api)
}

/// The message of an error an API function returned (destroyed here).
///
/// # Safety
/// `error` is an error XLA's API returned, not used after.
unsafe fn api_failure(api: &c_api::Api, what: &str, error: *mut c_api::Error) -> Failure {
    let mut message = format!("ovl: XLA's {what} failed");
    if api.struct_size >= c_api::API_SIZE_ERRORS {
        if let Some(get) = api.error_get_message {
            let mut args = c_api::ErrorGetMessageArgs {
                struct_size: c_api::ERROR_GET_MESSAGE_ARGS_SIZE,
                extension_start: std::ptr::null_mut(),
                error,
                message: std::ptr::null(),
            };
            // SAFETY: XLA's function on its error; the message lives as long as the error.
            unsafe { get(&mut args) };
            if !args.message.is_null() {
                // SAFETY: a NUL-terminated message.
                let text = unsafe { CStr::from_ptr(args.message) }.to_string_lossy();
                message = format!("{message}: {text}");
            }
        }
        if let Some(destroy) = api.error_destroy {
            let mut args = c_api::ErrorDestroyArgs {
                struct_size: c_api::ERROR_DESTROY_ARGS_SIZE,
                extension_start: std::ptr::null_mut(),
                error,
            };
            // SAFETY: the error is XLA's, destroyed once.
            unsafe { destroy(&mut args) };
        }
    }
    (c_api::INTERNAL, message)
}

/// Calls API function `f` (named `what`) on `args`; its error as a [`Failure`].
fn api_call<A>(
    api: &c_api::Api,
    f: c_api::ApiFn<A>,
    args: &mut A,
    what: &str,
) -> Result<(), Failure> {
    let f = f.ok_or_else(|| {
        (
            c_api::UNIMPLEMENTED,
            format!("ovl: XLA's API has no {what}"),
        )
    })?;
    // SAFETY: XLA's function with its argument struct, filled in as its header says.
    let error = unsafe { f(args) };
    if error.is_null() {
        Ok(())
    } else {
        // SAFETY: the error the function returned.
        Err(unsafe { api_failure(api, what, error) })
    }
}

/// The call's CUDA stream.
fn stream(frame: &CallFrame) -> Result<usize, Failure> {
    let api = api(frame, c_api::API_SIZE_STREAM, "XLA_FFI_Stream_Get")?;
    let mut args = c_api::StreamGetArgs {
        struct_size: c_api::STREAM_GET_ARGS_SIZE,
        extension_start: std::ptr::null_mut(),
        ctx: frame.ctx,
        stream: std::ptr::null_mut(),
    };
    api_call(api, api.stream_get, &mut args, "XLA_FFI_Stream_Get")?;
    Ok(args.stream as usize)
}

/// The call's device: XLA's ordinal where its API has it, else the device of the first buffer
/// with elements (0 when none has).
fn device(frame: &CallFrame, buffers: &[u64]) -> Result<i32, Failure> {
    // The function is the last of API version 0.3 (the header `c_api` mirrors): an older API
    // may lay out its last functions otherwise.
    let ordinal = api(frame, c_api::API_SIZE_ORDINAL, "XLA_FFI_DeviceOrdinal_Get")
        .ok()
        .filter(|api| {
            api.api_version.major_version == c_api::API_MAJOR
                && api.api_version.minor_version >= c_api::API_MINOR
        });
    if let Some(api) = ordinal {
        let mut args = c_api::DeviceOrdinalGetArgs {
            struct_size: c_api::ORDINAL_GET_ARGS_SIZE,
            extension_start: std::ptr::null_mut(),
            ctx: frame.ctx,
            device_ordinal: -1,
        };
        api_call(
            api,
            api.device_ordinal_get,
            &mut args,
            "XLA_FFI_DeviceOrdinal_Get",
        )?;
        return Ok(args.device_ordinal);
    }
    match buffers.iter().find(|&&p| p != 0) {
        Some(&p) => pointer_device(p).map_err(|e| {
            (
                c_api::INTERNAL,
                format!("ovl: the device of XLA's buffer {p:#x} is unknown: {e}"),
            )
        }),
        None => Ok(0),
    }
}

/// A block of XLA's device memory for one call, given back when dropped.
struct XlaBlock<'a> {
    api: &'a c_api::Api,
    ctx: *mut c_void,
    data: *mut c_void,
    size: usize,
}

impl<'a> XlaBlock<'a> {
    fn allocate(frame: &'a CallFrame, size: usize) -> Result<XlaBlock<'a>, Failure> {
        let api = api(
            frame,
            c_api::API_SIZE_MEMORY,
            "XLA_FFI_DeviceMemory_Allocate",
        )?;
        let mut args = c_api::DeviceMemoryAllocateArgs {
            struct_size: c_api::ALLOCATE_ARGS_SIZE,
            extension_start: std::ptr::null_mut(),
            ctx: frame.ctx,
            size,
            // The most XLA accepts; the arena is aligned within the block.
            alignment: 16,
            data: std::ptr::null_mut(),
        };
        api_call(
            api,
            api.device_memory_allocate,
            &mut args,
            "XLA_FFI_DeviceMemory_Allocate",
        )?;
        Ok(XlaBlock {
            api,
            ctx: frame.ctx,
            data: args.data,
            size,
        })
    }
}

impl Drop for XlaBlock<'_> {
    fn drop(&mut self) {
        let mut args = c_api::DeviceMemoryFreeArgs {
            struct_size: c_api::FREE_ARGS_SIZE,
            extension_start: std::ptr::null_mut(),
            ctx: self.ctx,
            size: self.size,
            data: self.data,
        };
        // A failure to give it back cannot be reported from here; XLA logs its own.
        let _ = api_call(
            self.api,
            self.api.device_memory_free,
            &mut args,
            "XLA_FFI_DeviceMemory_Free",
        );
    }
}

/// The CUDA handler's body: checks the buffers, binds their shapes on the GPU build and queues
/// the run on XLA's stream.
///
/// # Safety
/// `frame` must be XLA's call frame of the execute stage.
unsafe fn call(frame: &CallFrame) -> Result<(), Failure> {
    // SAFETY: the frame's attributes.
    let id = unsafe { program_id(&frame.attrs) }?;
    let entry = entry(id).ok_or_else(|| {
        invalid(format!(
            "no ovl program is registered as {id} in this process"
        ))
    })?;
    check_counts(frame, &entry.program)?;
    let (n_in, n_out) = (entry.program.feeds.len(), entry.program.outputs.len());
    let program = entry.gpu.get().map_err(|e| {
        let f = entry.gpu.compile_failure(e);
        (c_api::INTERNAL, f.code().1.to_string())
    })?;
    let mut feeds = Vec::with_capacity(n_in);
    let mut shapes: Vec<Vec<usize>> = Vec::with_capacity(n_in);
    for k in 0..n_in {
        // SAFETY: the counts are checked.
        let (b, d) = unsafe { input_buffer(frame, &program, k) }?;
        feeds.push(b.data as u64);
        shapes.push(
            d.iter()
                .map(|&x| usize::try_from(x).unwrap_or(usize::MAX))
                .collect(),
        );
    }
    let slices: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
    let binding = program
        .bind(&slices)
        .map_err(|e| invalid(format!("ovl {e}")))?;
    let mut outputs = Vec::with_capacity(n_out);
    for (k, sig) in binding.outputs.iter().enumerate() {
        // SAFETY: the counts are checked.
        let data = unsafe { output_buffer(frame, &program, k, sig) }?;
        outputs.push(data as u64);
    }
    let stream = stream(frame)?;
    let all: Vec<u64> = feeds.iter().chain(&outputs).copied().collect();
    let device = device(frame, &all)?;
    let bytes = program.scratch_bytes(&binding);
    let block = if bytes == 0 {
        None
    } else {
        Some(XlaBlock::allocate(frame, bytes + SCRATCH_ALIGN)?)
    };
    let scratch = match &block {
        None => Scratch::StreamOrdered, // nothing is allocated
        Some(b) => Scratch::Arena {
            ptr: (b.data as u64).next_multiple_of(SCRATCH_ALIGN as u64),
            bytes,
        },
    };
    // XLA's buffers are on the call's device: the driver is not asked again per buffer.
    let call = StreamCall::new(device, stream)
        .with_scratch(scratch)
        .without_pointer_checks();
    // SAFETY: XLA's buffers have the bound dtypes and shapes (checked), row-major (ovl.jax asks
    // for the default layouts), on the call's device, alive until the call's work has run in
    // the stream's order; the scratch block is XLA's, stream-ordered the same way. The program
    // is registered for the process.
    let result = unsafe { crate::cuda::run_bound(&program, &binding, &feeds, &outputs, &call) };
    drop(block);
    result.map_err(|f| (c_api::INTERNAL, f.code().1.to_string()))
}

//! The `DynamicLib` op and its CPU kernel, registered with TensorFlow from an ELF constructor.
//!
//! Every callback TensorFlow calls runs under `catch_unwind`: a panic crossing into TensorFlow
//! would abort the user's process, so a panic becomes a failed op with an internal error.

use crate::compute::{Kernel, LastBinding};
use crate::ffi::*;
use crate::nodedef::Attrs;
use crate::tf::{tf_dtype, tf_dtype_name, Status};
use ovl::program::{tensorflow_type_name, ProgramError};
use std::ffi::{c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The op's name in TensorFlow.
const OP_NAME: &CStr = c"DynamicLib";

/// The op's interface (see the crate documentation).
const INPUTS: &CStr = c"inputs: in_types";
const OUTPUTS: &CStr = c"outputs: out_types";
const ATTRS: [&CStr; 5] = [
    c"in_types: list(type) >= 0",
    c"out_types: list(type) >= 1",
    c"out_shapes: list(shape)",
    c"program: string",
    c"gradient: string = ''",
];

/// Runs at load time (`tf.load_op_library`) through `.init_array`.
#[used]
#[link_section = ".init_array"]
static REGISTER_AT_LOAD: extern "C" fn() = register_at_load;

extern "C" fn register_at_load() {
    let result = catch_unwind(|| {
        // SAFETY: called once by the dynamic loader, in a process where TensorFlow's framework
        // library is loaded (it is a dependency of this library).
        unsafe { register() }
    });
    match result {
        Ok(Ok(())) => {}
        Ok(Err(message)) => eprintln!("ovl-tf-bridge: {message}"),
        Err(_) => eprintln!("ovl-tf-bridge: registering DynamicLib panicked"),
    }
}

/// Registers the op and its CPU kernel.
///
/// # Safety
/// TensorFlow's framework library must be loaded.
unsafe fn register() -> Result<(), String> {
    let status = Status::new();
    // SAFETY: the builder is consumed by TF_RegisterOpDefinition; the strings are static.
    unsafe {
        let op = TF_NewOpDefinitionBuilder(OP_NAME.as_ptr());
        TF_OpDefinitionBuilderAddInput(op, INPUTS.as_ptr());
        TF_OpDefinitionBuilderAddOutput(op, OUTPUTS.as_ptr());
        for attr in ATTRS {
            TF_OpDefinitionBuilderAddAttr(op, attr.as_ptr());
        }
        TF_OpDefinitionBuilderSetShapeInferenceFunction(op, infer_shapes);
        TF_RegisterOpDefinition(op, status.0);
    }
    status
        .ok()
        .map_err(|e| format!("registering the op DynamicLib failed: {e}"))?;
    // SAFETY: the builder is consumed by TF_RegisterKernelBuilder; the callbacks have the
    // signatures kernels.h declares.
    unsafe {
        let kernel =
            TF_NewKernelBuilder(OP_NAME.as_ptr(), c"CPU".as_ptr(), create, compute, delete);
        TF_RegisterKernelBuilder(c"DynamicLibCpu".as_ptr(), kernel, status.0);
    }
    status
        .ok()
        .map_err(|e| format!("registering the CPU kernel of DynamicLib failed: {e}"))
}

/// A C shape function can read only type attributes, not `out_shapes`: the outputs get unknown
/// shapes here and the Python wrapper sets the static ones.
unsafe extern "C" fn infer_shapes(ctx: *mut TF_ShapeInferenceContext, status: *mut TF_Status) {
    let _ = catch_unwind(|| {
        // SAFETY: ctx and status come from TensorFlow for this call.
        unsafe { TF_ShapeInferenceContextSetUnknownShape(ctx, status) }
    });
}

/// The kernel of the node TensorFlow constructs (see [`construct_from_node_def`]).
fn construct(ctx: *mut TF_OpKernelConstruction) -> Result<Kernel, (TF_Code, String)> {
    let status = Status::new();
    // SAFETY: ctx comes from TensorFlow for this call; the buffer is deleted below.
    let buffer = unsafe { TF_OpKernelConstruction_GetNodeDef(ctx, status.0) };
    status
        .ok()
        .map_err(|e| (TF_INTERNAL, format!("cannot read the node definition: {e}")))?;
    if buffer.is_null() {
        return Err((TF_INTERNAL, "TensorFlow returned no node definition".into()));
    }
    // SAFETY: a non-null TF_Buffer from TensorFlow holds `length` bytes at `data`; they are
    // copied before the buffer is deleted.
    let bytes = unsafe {
        let b = &*buffer;
        let bytes = if b.data.is_null() {
            Vec::new()
        } else {
            std::slice::from_raw_parts(b.data.cast::<u8>(), b.length).to_vec()
        };
        TF_DeleteBuffer(buffer);
        bytes
    };
    construct_from_node_def(&bytes)
}

/// The kernel of a node, from its serialized `NodeDef` (the C-API kernel reads it from the
/// construction context, the C++ kernel serializes its own): reads the attributes, checks them
/// against the program, and compiles the program into the operator cache (or finds it there).
pub(crate) fn construct_from_node_def(bytes: &[u8]) -> Result<Kernel, (TF_Code, String)> {
    let attrs = Attrs::decode(bytes).map_err(|e| (TF_INVALID_ARGUMENT, e.to_string()))?;
    let node = attrs.node.clone();
    let fail = |code, message: String| (code, format!("DynamicLib `{node}`: {message}"));
    // The gradient program runs in another op (built by the Python gradient function, which
    // checks it too); an edited one is refused here already.
    if !attrs.gradient.is_empty() {
        ovl::program::verify_sealed(&attrs.gradient, "the `gradient` attribute")
            .map_err(|e| fail(TF_INVALID_ARGUMENT, e.to_string()))?;
    }
    let shared = crate::programs::load(&attrs.program).map_err(|e| {
        let code = match e {
            ProgramError::Corrupt(_) | ProgramError::Modified(_) => TF_INVALID_ARGUMENT,
            _ => TF_FAILED_PRECONDITION,
        };
        fail(code, e.to_string())
    })?;
    let program = &*shared.program;
    if attrs.in_types.len() != program.feeds.len() {
        return Err(fail(
            TF_INVALID_ARGUMENT,
            format!(
                "{} inputs given, program `{}` takes {}",
                attrs.in_types.len(),
                program.name,
                program.feeds.len()
            ),
        ));
    }
    for (k, (&t, (name, sig))) in attrs.in_types.iter().zip(&program.feeds).enumerate() {
        if t != tf_dtype(sig.dtype) {
            return Err(fail(
                TF_INVALID_ARGUMENT,
                format!(
                    "input {k} (`{name}`) has dtype {}, but program `{}` was exported for {} \
                     (shape {:?})",
                    tf_dtype_name(t),
                    program.name,
                    ovl::program::tensorflow_dtype_name(sig.dtype),
                    sig.shape
                ),
            ));
        }
    }
    // A declared dimension of -1 is unknown; a program's dimension sized at run time accepts
    // any declared size (TensorFlow may know the batch of this node).
    let out_dims = program.output_dims();
    let outputs_fit = attrs.out_types.len() == program.outputs.len()
        && attrs.out_shapes.len() == program.outputs.len()
        && program.outputs.iter().enumerate().all(|(k, sig)| {
            attrs.out_types[k] == tf_dtype(sig.dtype)
                && attrs.out_shapes[k].as_ref().is_none_or(|dims| {
                    dims.len() == out_dims[k].len()
                        && dims
                            .iter()
                            .zip(&out_dims[k])
                            .all(|(&d, s)| d < 0 || s.is_none_or(|s| d as u64 == s as u64))
                })
        });
    if !outputs_fit {
        let declared: Vec<String> = attrs
            .out_types
            .iter()
            .zip(
                attrs
                    .out_shapes
                    .iter()
                    .map(Some)
                    .chain(std::iter::repeat(None)),
            )
            .map(|(&t, s)| match s.cloned().flatten() {
                Some(dims) => format!("{}{dims:?}", tf_dtype_name(t)),
                None => format!("{} of unknown shape", tf_dtype_name(t)),
            })
            .collect();
        let made: Vec<String> = program.outputs.iter().map(tensorflow_type_name).collect();
        return Err(fail(
            TF_INVALID_ARGUMENT,
            format!(
                "the attributes declare outputs {declared:?}, but program `{}` makes {made:?}",
                program.name
            ),
        ));
    }
    Ok(Kernel {
        node,
        last: LastBinding::with_fixed(shared.fixed),
        program: shared.program,
    })
}

unsafe extern "C" fn create(ctx: *mut TF_OpKernelConstruction) -> *mut c_void {
    let result = catch_unwind(AssertUnwindSafe(|| construct(ctx))).unwrap_or_else(|panic| {
        Err((
            TF_INTERNAL,
            format!("internal error in ovl-tf-bridge: {}", panic_message(&panic)),
        ))
    });
    match result {
        Ok(kernel) => Box::into_raw(Box::new(kernel)).cast(),
        Err((code, message)) => {
            let _ = catch_unwind(AssertUnwindSafe(|| {
                let status = Status::new();
                status.set(code, &message);
                // SAFETY: ctx comes from TensorFlow for this call.
                unsafe { TF_OpKernelConstruction_Failure(ctx, status.0) };
            }));
            std::ptr::null_mut()
        }
    }
}

unsafe extern "C" fn compute(kernel: *mut c_void, ctx: *mut TF_OpKernelContext) {
    let result = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: TensorFlow passes back the pointer `create` returned; it is null only when
        // construction failed, in which case compute is not called, but check anyway.
        match unsafe { kernel.cast::<Kernel>().as_ref() } {
            Some(k) => crate::compute::run(k, ctx),
            None => Err((
                TF_INTERNAL,
                "DynamicLib: the kernel was not constructed".into(),
            )),
        }
    }))
    .unwrap_or_else(|panic| {
        Err((
            TF_INTERNAL,
            format!("internal error in ovl-tf-bridge: {}", panic_message(&panic)),
        ))
    });
    if let Err((code, message)) = result {
        let _ = catch_unwind(AssertUnwindSafe(|| {
            let status = Status::new();
            status.set(code, &message);
            // SAFETY: ctx comes from TensorFlow for this call.
            unsafe { TF_OpKernelContext_Failure(ctx, status.0) };
        }));
    }
}

unsafe extern "C" fn delete(kernel: *mut c_void) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if !kernel.is_null() {
            // SAFETY: made by Box::into_raw in `create`, deleted once by TensorFlow.
            drop(unsafe { Box::from_raw(kernel.cast::<Kernel>()) });
        }
    }));
}

pub(crate) fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}

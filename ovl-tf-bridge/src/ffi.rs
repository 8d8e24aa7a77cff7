//! The part of TensorFlow's C API the bridge uses, declared by hand.
//!
//! Each declaration cites its header in the `tensorflow-cpu` 2.21 wheel
//! (`tensorflow/include/tensorflow/c/...`). Every symbol is exported by
//! `libtensorflow_framework.so.2` (see `build.rs` for how the bridge links to it).

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_void};

macro_rules! opaque {
    ($($name:ident),* $(,)?) => {
        $(
            #[doc = concat!("`", stringify!($name), "` (opaque).")]
            #[repr(C)]
            pub struct $name {
                _private: [u8; 0],
            }
        )*
    };
}

opaque!(
    TF_Status,
    TF_OpDefinitionBuilder,
    TF_ShapeInferenceContext,
    TF_KernelBuilder,
    TF_OpKernelConstruction,
    TF_OpKernelContext,
    TF_Tensor,
);

/// `TF_DataType` (tf_datatype.h), a C enum.
pub type TF_DataType = c_int;
pub const TF_FLOAT: TF_DataType = 1;
pub const TF_DOUBLE: TF_DataType = 2;
pub const TF_INT32: TF_DataType = 3;
pub const TF_UINT8: TF_DataType = 4;
pub const TF_INT16: TF_DataType = 5;
pub const TF_INT8: TF_DataType = 6;
pub const TF_INT64: TF_DataType = 9;
pub const TF_BOOL: TF_DataType = 10;
pub const TF_BFLOAT16: TF_DataType = 14;
pub const TF_UINT16: TF_DataType = 17;
pub const TF_HALF: TF_DataType = 19;
pub const TF_UINT32: TF_DataType = 22;
pub const TF_UINT64: TF_DataType = 23;

/// `TF_Code` (tf_status.h, values from tsl_status.h), a C enum.
pub type TF_Code = c_int;
pub const TF_INVALID_ARGUMENT: TF_Code = 3;
pub const TF_FAILED_PRECONDITION: TF_Code = 9;
pub const TF_INTERNAL: TF_Code = 13;

/// `TF_Buffer` (tf_buffer.h).
#[repr(C)]
pub struct TF_Buffer {
    pub data: *const c_void,
    pub length: usize,
    pub data_deallocator: Option<unsafe extern "C" fn(data: *mut c_void, length: usize)>,
}

/// `void (*)(TF_ShapeInferenceContext*, TF_Status*)` (ops.h).
pub type ShapeFn = unsafe extern "C" fn(*mut TF_ShapeInferenceContext, *mut TF_Status);
/// `void* (*create_func)(TF_OpKernelConstruction*)` (kernels.h).
pub type CreateFn = unsafe extern "C" fn(*mut TF_OpKernelConstruction) -> *mut c_void;
/// `void (*compute_func)(void*, TF_OpKernelContext*)` (kernels.h).
pub type ComputeFn = unsafe extern "C" fn(*mut c_void, *mut TF_OpKernelContext);
/// `void (*delete_func)(void*)` (kernels.h).
pub type DeleteFn = unsafe extern "C" fn(*mut c_void);

extern "C" {
    // ---- tf_status.h
    pub fn TF_NewStatus() -> *mut TF_Status;
    pub fn TF_DeleteStatus(status: *mut TF_Status);
    pub fn TF_SetStatus(status: *mut TF_Status, code: TF_Code, msg: *const c_char);
    pub fn TF_GetCode(status: *const TF_Status) -> TF_Code;
    pub fn TF_Message(status: *const TF_Status) -> *const c_char;

    // ---- tf_buffer.h
    pub fn TF_DeleteBuffer(buffer: *mut TF_Buffer);

    // ---- tf_tensor.h
    pub fn TF_DeleteTensor(tensor: *mut TF_Tensor);
    pub fn TF_TensorType(tensor: *const TF_Tensor) -> TF_DataType;
    pub fn TF_NumDims(tensor: *const TF_Tensor) -> c_int;
    pub fn TF_Dim(tensor: *const TF_Tensor, dim_index: c_int) -> i64;
    pub fn TF_TensorByteSize(tensor: *const TF_Tensor) -> usize;
    pub fn TF_TensorData(tensor: *const TF_Tensor) -> *mut c_void;

    // ---- ops.h
    pub fn TF_NewOpDefinitionBuilder(op_name: *const c_char) -> *mut TF_OpDefinitionBuilder;
    pub fn TF_RegisterOpDefinition(builder: *mut TF_OpDefinitionBuilder, status: *mut TF_Status);
    pub fn TF_OpDefinitionBuilderAddAttr(
        builder: *mut TF_OpDefinitionBuilder,
        attr_spec: *const c_char,
    );
    pub fn TF_OpDefinitionBuilderAddInput(
        builder: *mut TF_OpDefinitionBuilder,
        input_spec: *const c_char,
    );
    pub fn TF_OpDefinitionBuilderAddOutput(
        builder: *mut TF_OpDefinitionBuilder,
        output_spec: *const c_char,
    );
    pub fn TF_OpDefinitionBuilderSetShapeInferenceFunction(
        builder: *mut TF_OpDefinitionBuilder,
        shape_inference_func: ShapeFn,
    );
    pub fn TF_ShapeInferenceContextSetUnknownShape(
        ctx: *mut TF_ShapeInferenceContext,
        status: *mut TF_Status,
    );

    // ---- kernels.h
    pub fn TF_NewKernelBuilder(
        op_name: *const c_char,
        device_name: *const c_char,
        create_func: CreateFn,
        compute_func: ComputeFn,
        delete_func: DeleteFn,
    ) -> *mut TF_KernelBuilder;
    pub fn TF_RegisterKernelBuilder(
        kernel_name: *const c_char,
        builder: *mut TF_KernelBuilder,
        status: *mut TF_Status,
    );
    pub fn TF_OpKernelConstruction_GetNodeDef(
        ctx: *mut TF_OpKernelConstruction,
        status: *mut TF_Status,
    ) -> *mut TF_Buffer;
    pub fn TF_OpKernelConstruction_Failure(
        ctx: *mut TF_OpKernelConstruction,
        status: *mut TF_Status,
    );
    pub fn TF_OpKernelContext_Failure(ctx: *mut TF_OpKernelContext, status: *mut TF_Status);
    pub fn TF_NumInputs(ctx: *mut TF_OpKernelContext) -> c_int;
    pub fn TF_NumOutputs(ctx: *mut TF_OpKernelContext) -> c_int;
    pub fn TF_GetInput(
        ctx: *mut TF_OpKernelContext,
        i: c_int,
        tensor: *mut *mut TF_Tensor,
        status: *mut TF_Status,
    );
    pub fn TF_AllocateOutput(
        context: *mut TF_OpKernelContext,
        index: c_int,
        dtype: TF_DataType,
        dims: *const i64,
        num_dims: c_int,
        len: usize,
        status: *mut TF_Status,
    ) -> *mut TF_Tensor;
}

//! The part of XLA's FFI C API (`xla/ffi/api/c_api.h`, API version 0.3 as jaxlib 0.10 ships it
//! under `jax.ffi.include_dir()`) that the handler reads and writes, laid out as the header
//! lays it out. Every struct starts with its `struct_size`: XLA's structs may grow at their
//! ends (a minor version), so a struct is read only up to the fields written here, after
//! checking that the caller's `struct_size` covers them.

use std::ffi::{c_char, c_void};

/// The API's major version the handler is written for (`XLA_FFI_API_MAJOR`).
pub const API_MAJOR: i32 = 0;
/// The newest minor version the handler knows (`XLA_FFI_API_MINOR` of the header it was
/// checked against); it reports the older of this and the runtime's.
pub const API_MINOR: i32 = 3;

/// `XLA_FFI_Extension_Type`: the metadata query.
pub const EXTENSION_METADATA: i32 = 1;

/// `XLA_FFI_ExecutionStage_EXECUTE`.
pub const STAGE_EXECUTE: i32 = 3;

/// `XLA_FFI_ArgType_BUFFER` / `XLA_FFI_RetType_BUFFER`.
pub const BUFFER: i32 = 1;

/// `XLA_FFI_AttrType_SCALAR`.
pub const ATTR_SCALAR: i32 = 3;

/// `XLA_FFI_Error_Code_INVALID_ARGUMENT`.
pub const INVALID_ARGUMENT: i32 = 3;
/// `XLA_FFI_Error_Code_INTERNAL`.
pub const INTERNAL: i32 = 13;
/// `XLA_FFI_Error_Code_UNIMPLEMENTED`.
pub const UNIMPLEMENTED: i32 = 12;

/// `XLA_FFI_DataType` values (xla::PrimitiveType).
pub mod data_type {
    pub const PRED: i32 = 1;
    pub const S8: i32 = 2;
    pub const S16: i32 = 3;
    pub const S32: i32 = 4;
    pub const S64: i32 = 5;
    pub const U8: i32 = 6;
    pub const U16: i32 = 7;
    pub const U32: i32 = 8;
    pub const U64: i32 = 9;
    pub const F16: i32 = 10;
    pub const F32: i32 = 11;
    pub const F64: i32 = 12;
    pub const BF16: i32 = 16;
}

/// `XLA_FFI_Extension_Base`.
#[repr(C)]
pub struct ExtensionBase {
    pub struct_size: usize,
    pub kind: i32,
    pub next: *mut ExtensionBase,
}

/// `XLA_FFI_Api_Version`.
#[repr(C)]
pub struct ApiVersion {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub major_version: i32,
    pub minor_version: i32,
}

/// `XLA_FFI_Metadata` up to `traits` (a newer one goes on with `state_type_id`, untouched).
#[repr(C)]
pub struct Metadata {
    pub struct_size: usize,
    pub api_version: ApiVersion,
    pub traits: u32,
}

/// `XLA_FFI_Metadata_Extension`.
#[repr(C)]
pub struct MetadataExtension {
    pub extension_base: ExtensionBase,
    pub metadata: *mut Metadata,
}

/// An `XLA_FFI_Error` (opaque, made by the API's `XLA_FFI_Error_Create`).
#[repr(C)]
pub struct Error {
    _private: [u8; 0],
}

/// `XLA_FFI_Error_Create_Args`.
#[repr(C)]
pub struct ErrorCreateArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub message: *const c_char,
    pub errc: i32,
}

/// A function of the API taking its argument struct (`XLA_FFI_Stream_Get`, ...).
pub type ApiFn<A> = Option<unsafe extern "C" fn(*mut A) -> *mut Error>;

/// `XLA_FFI_Api` up to `XLA_FFI_DeviceOrdinal_Get`: the CPU handler calls
/// `XLA_FFI_Error_Create` only; the CUDA handler the stream, device memory and device ordinal
/// functions, each read only when the runtime's `struct_size` covers it.
#[repr(C)]
pub struct Api {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub api_version: ApiVersion,
    pub internal_api: *const c_void,
    pub error_create: Option<unsafe extern "C" fn(*mut ErrorCreateArgs) -> *mut Error>,
    pub error_get_message: Option<unsafe extern "C" fn(*mut ErrorGetMessageArgs)>,
    pub error_destroy: Option<unsafe extern "C" fn(*mut ErrorDestroyArgs)>,
    pub handler_register: *const c_void,
    pub stream_get: ApiFn<StreamGetArgs>,
    pub type_register: *const c_void,
    pub execution_context_get: *const c_void,
    pub state_set: *const c_void,
    pub state_get: *const c_void,
    pub device_memory_allocate: ApiFn<DeviceMemoryAllocateArgs>,
    pub device_memory_free: ApiFn<DeviceMemoryFreeArgs>,
    pub thread_pool_schedule: *const c_void,
    pub thread_pool_num_threads: *const c_void,
    pub future_create: *const c_void,
    pub future_set_available: *const c_void,
    pub future_set_error: *const c_void,
    pub run_id_get: *const c_void,
    pub device_ordinal_get: ApiFn<DeviceOrdinalGetArgs>,
}

/// `XLA_FFI_Error_GetMessage_Args`.
#[repr(C)]
pub struct ErrorGetMessageArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub error: *mut Error,
    pub message: *const c_char,
}

/// `XLA_FFI_Error_Destroy_Args`.
#[repr(C)]
pub struct ErrorDestroyArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub error: *mut Error,
}

/// `XLA_FFI_Stream_Get_Args`: the call's `CUstream` on the CUDA platform.
#[repr(C)]
pub struct StreamGetArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub ctx: *mut c_void,
    pub stream: *mut c_void,
}

/// `XLA_FFI_DeviceMemory_Allocate_Args`.
#[repr(C)]
pub struct DeviceMemoryAllocateArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub ctx: *mut c_void,
    pub size: usize,
    pub alignment: usize,
    pub data: *mut c_void,
}

/// `XLA_FFI_DeviceMemory_Free_Args`.
#[repr(C)]
pub struct DeviceMemoryFreeArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub ctx: *mut c_void,
    pub size: usize,
    pub data: *mut c_void,
}

/// `XLA_FFI_DeviceOrdinal_Get_Args`.
#[repr(C)]
pub struct DeviceOrdinalGetArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub ctx: *mut c_void,
    pub device_ordinal: i32,
}

/// `XLA_FFI_Buffer`.
#[repr(C)]
pub struct Buffer {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub dtype: i32,
    pub data: *mut c_void,
    pub rank: i64,
    pub dims: *const i64,
}

/// `XLA_FFI_Args` and `XLA_FFI_Rets` (the same layout: `types[k]`, `items[k]`).
#[repr(C)]
pub struct List {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub size: i64,
    pub types: *const i32,
    pub items: *const *mut c_void,
}

/// `XLA_FFI_ByteSpan`.
#[repr(C)]
pub struct ByteSpan {
    pub ptr: *const c_char,
    pub len: usize,
}

/// `XLA_FFI_Scalar`.
#[repr(C)]
pub struct Scalar {
    pub dtype: i32,
    pub value: *const c_void,
}

/// `XLA_FFI_Attrs` (sorted by name).
#[repr(C)]
pub struct Attrs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub size: i64,
    pub types: *const i32,
    pub names: *const *const ByteSpan,
    pub attrs: *const *const c_void,
}

/// `XLA_FFI_CallFrame` up to `attrs` (`future` follows, unused: the handler is synchronous).
#[repr(C)]
pub struct CallFrame {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub api: *const Api,
    pub ctx: *mut c_void,
    pub stage: i32,
    pub args: List,
    pub rets: List,
    pub attrs: Attrs,
}

/// The size of a struct up to and including a field, as the header's `XLA_FFI_STRUCT_SIZE`
/// computes it: what a caller's `struct_size` must reach for the field to be there.
macro_rules! size_through {
    ($t:ty, $field:ident, $ft:ty) => {
        std::mem::offset_of!($t, $field) + std::mem::size_of::<$ft>()
    };
}

/// `XLA_FFI_CallFrame`'s size through `attrs`.
pub const CALL_FRAME_SIZE: usize = size_through!(CallFrame, attrs, Attrs);
/// `XLA_FFI_Metadata`'s size through `traits`.
pub const METADATA_SIZE: usize = size_through!(Metadata, traits, u32);
/// `XLA_FFI_Metadata_Extension`'s size.
pub const METADATA_EXTENSION_SIZE: usize =
    size_through!(MetadataExtension, metadata, *mut Metadata);
/// `XLA_FFI_Api_Version`'s size.
pub const API_VERSION_SIZE: usize = size_through!(ApiVersion, minor_version, i32);
/// `XLA_FFI_Api`'s size through `XLA_FFI_Error_Create`.
pub const API_SIZE: usize = size_through!(Api, error_create, usize);
/// `XLA_FFI_Buffer`'s size.
pub const BUFFER_SIZE: usize = size_through!(Buffer, dims, *const i64);
/// `XLA_FFI_Error_Create_Args`' size.
pub const ERROR_CREATE_ARGS_SIZE: usize = size_through!(ErrorCreateArgs, errc, i32);
/// `XLA_FFI_Api`'s size through `XLA_FFI_Error_Destroy` (the message of an API error).
pub const API_SIZE_ERRORS: usize = size_through!(Api, error_destroy, usize);
/// `XLA_FFI_Api`'s size through `XLA_FFI_Stream_Get`.
pub const API_SIZE_STREAM: usize = size_through!(Api, stream_get, usize);
/// `XLA_FFI_Api`'s size through `XLA_FFI_DeviceMemory_Free`.
pub const API_SIZE_MEMORY: usize = size_through!(Api, device_memory_free, usize);
/// `XLA_FFI_Api`'s size through `XLA_FFI_DeviceOrdinal_Get`.
pub const API_SIZE_ORDINAL: usize = size_through!(Api, device_ordinal_get, usize);
/// `XLA_FFI_Error_GetMessage_Args`' size.
pub const ERROR_GET_MESSAGE_ARGS_SIZE: usize =
    size_through!(ErrorGetMessageArgs, message, *const c_char);
/// `XLA_FFI_Error_Destroy_Args`' size.
pub const ERROR_DESTROY_ARGS_SIZE: usize = size_through!(ErrorDestroyArgs, error, *mut Error);
/// `XLA_FFI_Stream_Get_Args`' size.
pub const STREAM_GET_ARGS_SIZE: usize = size_through!(StreamGetArgs, stream, *mut c_void);
/// `XLA_FFI_DeviceMemory_Allocate_Args`' size.
pub const ALLOCATE_ARGS_SIZE: usize = size_through!(DeviceMemoryAllocateArgs, data, *mut c_void);
/// `XLA_FFI_DeviceMemory_Free_Args`' size.
pub const FREE_ARGS_SIZE: usize = size_through!(DeviceMemoryFreeArgs, data, *mut c_void);
/// `XLA_FFI_DeviceOrdinal_Get_Args`' size.
pub const ORDINAL_GET_ARGS_SIZE: usize = size_through!(DeviceOrdinalGetArgs, device_ordinal, i32);

// The sizes the header's `XLA_FFI_DEFINE_STRUCT_TRAITS` gives on a 64-bit target.
#[cfg(target_pointer_width = "64")]
const _: () = {
    assert!(API_VERSION_SIZE == 24);
    assert!(METADATA_SIZE == 36);
    assert!(METADATA_EXTENSION_SIZE == 32);
    assert!(BUFFER_SIZE == 48);
    assert!(CALL_FRAME_SIZE == 40 + 40 + 40 + 48);
    assert!(ERROR_CREATE_ARGS_SIZE == 28);
    assert!(API_SIZE == 56);
    // 17 functions after `XLA_FFI_Error_Create`, in the header's order.
    assert!(API_SIZE_STREAM == 56 + 4 * 8);
    assert!(API_SIZE_MEMORY == 56 + 10 * 8);
    assert!(API_SIZE_ORDINAL == 56 + 17 * 8);
    assert!(STREAM_GET_ARGS_SIZE == 32);
    assert!(ALLOCATE_ARGS_SIZE == 48);
    assert!(FREE_ARGS_SIZE == 40);
    assert!(ORDINAL_GET_ARGS_SIZE == 28);
};

//! Small safe pieces over TensorFlow's C API that the op's registration, its `Compute` and the
//! XLA custom call share: an owned status, and the mapping between TensorFlow's and ovl's dtypes.

use crate::ffi::*;
use ovl_core::DType;
use std::ffi::{CStr, CString};

/// An owned `TF_Status`.
pub(crate) struct Status(pub(crate) *mut TF_Status);

impl Status {
    pub(crate) fn new() -> Status {
        // SAFETY: TF_NewStatus has no preconditions.
        Status(unsafe { TF_NewStatus() })
    }

    /// Sets the status to OK (before reusing it).
    pub(crate) fn reset(&self) {
        // SAFETY: self.0 is a live status; the message is static.
        unsafe { TF_SetStatus(self.0, 0, c"".as_ptr()) }
    }

    pub(crate) fn ok(&self) -> Result<(), String> {
        // SAFETY: self.0 is a live status.
        unsafe {
            if TF_GetCode(self.0) == 0 {
                Ok(())
            } else {
                Err(CStr::from_ptr(TF_Message(self.0))
                    .to_string_lossy()
                    .into_owned())
            }
        }
    }

    pub(crate) fn set(&self, code: TF_Code, message: &str) {
        let message = CString::new(message.replace('\0', " ")).unwrap_or_default();
        // SAFETY: self.0 is a live status; TF_SetStatus copies the message.
        unsafe { TF_SetStatus(self.0, code, message.as_ptr()) }
    }
}

impl Drop for Status {
    fn drop(&mut self) {
        // SAFETY: created by TF_NewStatus, deleted once.
        unsafe { TF_DeleteStatus(self.0) }
    }
}

/// The TensorFlow dtype of an ovl dtype.
pub(crate) fn tf_dtype(dtype: DType) -> TF_DataType {
    match dtype {
        DType::F32 => TF_FLOAT,
        DType::F64 => TF_DOUBLE,
        DType::I8 => TF_INT8,
        DType::I16 => TF_INT16,
        DType::I32 => TF_INT32,
        DType::I64 => TF_INT64,
        DType::U8 => TF_UINT8,
        DType::U16 => TF_UINT16,
        DType::U32 => TF_UINT32,
        DType::U64 => TF_UINT64,
        DType::Bool => TF_BOOL,
        DType::F16 => TF_HALF,
        DType::BF16 => TF_BFLOAT16,
    }
}

/// The ovl dtype of a TensorFlow dtype, if ovl supports it.
pub(crate) fn ovl_dtype(dtype: TF_DataType) -> Option<DType> {
    DType::ALL.into_iter().find(|&d| tf_dtype(d) == dtype)
}

/// A TensorFlow dtype's name, for messages.
pub(crate) fn tf_dtype_name(dtype: TF_DataType) -> String {
    match ovl_dtype(dtype) {
        Some(d) => ovl::program::tensorflow_dtype_name(d).to_string(),
        None => format!("TensorFlow dtype {dtype} (not supported by ovl)"),
    }
}

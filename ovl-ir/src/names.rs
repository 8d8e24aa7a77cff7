//! Readable names for IR entities, used by every error message and by the text printer:
//! operators' source locations, opcodes, dtypes, tensor types and tensor references.

use crate::dtype::DType;
use crate::ir::{self, Op, TensorKind};

/// ` (defined at file:line)`, or nothing when the place is unknown.
pub fn at(defined_at: &str) -> String {
    if defined_at.is_empty() {
        String::new()
    } else {
        format!(" (defined at {defined_at})")
    }
}

/// `file:line` of the operator's source location, or empty.
pub fn defined_at(dag: &ir::ExpressionDag) -> String {
    match &dag.source {
        Some(s) if !s.file.is_empty() => format!("{}:{}", s.file, s.line),
        _ => String::new(),
    }
}

/// The opcode's name in lower case without the `OP_` prefix (`add`, `end_range`, ...), or
/// `op <n>` for an unknown value.
pub fn op_name(code: i32) -> String {
    match crate::ops::info_of_code(code) {
        Some(row) => row.name.to_string(),
        None if code == Op::Unspecified as i32 => "unspecified".to_string(),
        None => format!("op {code}"),
    }
}

/// A readable name for an IR dtype value: `f32`, or `DTYPE_UNSPECIFIED` for values that are no dtype.
pub fn dtype_name(value: i32) -> String {
    match DType::from_ir(value) {
        Some(d) => d.name().to_string(),
        None => match ir::Dtype::try_from(value) {
            Ok(d) => d.as_str_name().to_string(),
            Err(_) => format!("dtype {value}"),
        },
    }
}

/// `f32[4, 8]`.
pub fn tensor_type_name(t: &ir::TensorType) -> String {
    if t.symbolic.is_empty() {
        format!("{}{:?}", dtype_name(t.dtype), t.shape)
    } else {
        let shape = crate::symbolic::shape_text(&t.shape, &t.symbolic, &[]);
        format!("{}{shape}", dtype_name(t.dtype))
    }
}

/// `input`, `output`, `local`.
pub fn kind_word(kind: TensorKind) -> &'static str {
    match kind {
        TensorKind::Input => "input",
        TensorKind::Output => "output",
        TensorKind::Local => "local",
        TensorKind::Unspecified => "unspecified tensor",
    }
}

/// `input 0`, `output 1`, `local 2`.
pub fn tensor_ref_name(r: &ir::TensorRef) -> String {
    match TensorKind::try_from(r.kind) {
        Ok(kind) => format!("{} {}", kind_word(kind), r.index),
        Err(_) => format!("tensor of unknown kind {} index {}", r.kind, r.index),
    }
}

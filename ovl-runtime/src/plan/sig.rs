//! The dtype and shape of the tensors a plan runs on, and why a graph cannot be planned.

use super::PlanError;
use ovl_core::ir;
use ovl_core::{DType, HostTensor};
use std::fmt;

/// The dtype and shape of one tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sig {
    /// Element type.
    pub dtype: DType,
    /// Static shape.
    pub shape: Vec<usize>,
}

impl Sig {
    /// The signature of an IR tensor type; an error names an unsupported dtype.
    pub fn from_ir(t: &ir::TensorType) -> Result<Sig, PlanError> {
        let dtype = DType::from_ir(t.dtype).ok_or(PlanError::UnsupportedDType(t.dtype))?;
        let shape = t
            .shape
            .iter()
            .map(|&d| usize::try_from(d).map_err(|_| PlanError::DimensionTooLarge(d)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Sig { dtype, shape })
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether it has no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The number of bytes of the elements.
    pub fn bytes(&self) -> usize {
        self.len() * self.dtype.size()
    }

    /// Whether `t` has this dtype and shape.
    pub fn fits(&self, t: &HostTensor) -> bool {
        t.dtype() == self.dtype && t.shape == self.shape
    }
}

impl fmt::Display for Sig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{:?}", self.dtype, self.shape)
    }
}

//! The dtype and shape of the tensors a plan runs on, and why a graph cannot be planned.

use ovl_core::ir;
use ovl_core::{DType, HostTensor};
use std::fmt;

/// Why a graph cannot be planned: it is malformed (a damaged or hand-made program; fusion and
/// `evaluate` only make well-formed graphs).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// A tensor type has a dtype ovl does not know.
    #[error("unsupported dtype {0} in IR")]
    UnsupportedDType(i32),
    /// A dimension does not fit in memory addresses.
    #[error("dimension {0} is too large")]
    DimensionTooLarge(u64),
    /// The graph has sizes known only at run time.
    #[error(
        "the graph has sizes known only at run time ({symbols}); plan it with \
         `Plan::specialized` and the symbol values"
    )]
    Symbolic {
        /// The symbols' names.
        symbols: String,
    },
    /// The symbol values do not fit the graph.
    #[error("{0}")]
    Symbols(String),
    /// The wiring does not match the operators, or names a tensor that does not exist.
    #[error("{0}")]
    Wiring(String),
    /// An operator reads an input before it is computed.
    #[error("the operators are not in a topological order")]
    NotTopological,
    /// An operator input has another type than its source.
    #[error("an input of operator {operator} (`{name}`) has another type than its source")]
    TypeMismatch {
        /// The operator's index.
        operator: usize,
        /// Its name.
        name: String,
    },
}

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

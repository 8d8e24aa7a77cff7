//! What both runtimes know of an operator's tensors and workgroup, with sizes that may be given
//! at run time ([`Geometry`]), and the checks of a run's symbol values and tensors against them.

use super::emit::shape_text;
use super::sizes::{self, Size, Unsized};
use crate::error::RunError;
use ovl_ir::ir;
use ovl_ir::{DType, HostTensor};

/// A tensor type: dtype and sizes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TensorSig {
    pub dtype: DType,
    pub sizes: Vec<Size>,
}

impl TensorSig {
    fn of(t: &ir::TensorType) -> Option<TensorSig> {
        Some(TensorSig {
            dtype: DType::from_ir(t.dtype)?,
            sizes: sizes::sizes(&t.shape, &t.symbolic),
        })
    }

    /// `f32[S0, 4]`.
    fn name(&self) -> String {
        format!("{}{}", self.dtype, shape_text(&self.sizes))
    }
}

/// The tensor types, the workgroup and the symbol count of an operator.
#[derive(Clone, Debug)]
pub(crate) struct Geometry {
    pub inputs: Vec<TensorSig>,
    pub outputs: Vec<TensorSig>,
    pub workgroup: Vec<Size>,
    pub symbol_count: u32,
    /// The workgroup when every size is known (the common case needs no resolution).
    known_workgroup: Option<Vec<u64>>,
}

impl Geometry {
    /// The geometry of `dag`; `Err` says what is not supported.
    pub fn of(dag: &ir::ExpressionDag) -> Result<Geometry, String> {
        let list = |l: &[ir::TensorType], what: &str| {
            l.iter()
                .map(TensorSig::of)
                .collect::<Option<Vec<_>>>()
                .ok_or(format!("an {what} type is not supported"))
        };
        let workgroup = sizes::sizes(&dag.workgroup_shape, &dag.symbolic_workgroup);
        let known_workgroup = if sizes::any_symbolic(&workgroup) {
            None
        } else {
            let shape = dag.workgroup_shape.clone();
            shape
                .iter()
                .try_fold(1u64, |n, &d| n.checked_mul(d))
                .filter(|&n| n <= i64::MAX as u64)
                .ok_or("the workgroup is too large")?;
            Some(shape)
        };
        Ok(Geometry {
            inputs: list(&dag.inputs, "input")?,
            outputs: list(&dag.outputs, "output")?,
            workgroup,
            symbol_count: dag.symbol_count,
            known_workgroup,
        })
    }

    /// Checks the count of symbol values and that each fits an `int64_t`.
    fn check_symbols(&self, operator: &str, symbols: &[u64]) -> Result<(), RunError> {
        if symbols.len() != self.symbol_count as usize {
            return Err(RunError::SymbolCount {
                operator: operator.to_string(),
                expected: self.symbol_count as usize,
                got: symbols.len(),
            });
        }
        if let Some(v) = symbols.iter().find(|&&v| v > i64::MAX as u64) {
            return Err(self.bad_values(operator, symbols, format!("{v} exceeds 2^63 - 1")));
        }
        Ok(())
    }

    fn bad_values(&self, operator: &str, symbols: &[u64], problem: String) -> RunError {
        RunError::SymbolValues {
            operator: operator.to_string(),
            values: symbols.to_vec(),
            problem,
        }
    }

    /// Why `sizes` (of `what`) cannot be sized for `symbols`, as an error.
    fn unsized_error(
        &self,
        operator: &str,
        symbols: &[u64],
        what: &str,
        sizes: &[Size],
        why: Unsized,
    ) -> RunError {
        let problem = match why {
            Unsized::Dimension { dim, value } => format!(
                "they make dimension {dim} of {what} {} equal to {value}; every size must be \
                 between 0 and 2^63 - 1",
                shape_text(&sizes[dim..=dim])
            ),
            Unsized::TooLarge => format!(
                "they make {what} {} hold more than 2^63 - 1 elements",
                shape_text(sizes)
            ),
        };
        self.bad_values(operator, symbols, problem)
    }

    /// The workgroup for `symbols`, after checking them.
    pub fn workgroup(&self, operator: &str, symbols: &[u64]) -> Result<Vec<u64>, RunError> {
        self.check_symbols(operator, symbols)?;
        if let Some(w) = &self.known_workgroup {
            return Ok(w.clone());
        }
        sizes::resolve(&self.workgroup, symbols).map_err(|why| {
            self.unsized_error(operator, symbols, "the workgroup", &self.workgroup, why)
        })
    }

    /// The shape of one tensor for `symbols` (checked), with its bytes within `i64::MAX`.
    fn shape(
        &self,
        operator: &str,
        symbols: &[u64],
        what: &str,
        t: &TensorSig,
    ) -> Result<Vec<u64>, RunError> {
        let shape = sizes::resolve(&t.sizes, symbols)
            .map_err(|why| self.unsized_error(operator, symbols, what, &t.sizes, why))?;
        let bytes = sizes::product(&shape).checked_mul(t.dtype.size() as u64);
        if !bytes.is_some_and(|b| b <= i64::MAX as u64) {
            return Err(self.unsized_error(operator, symbols, what, &t.sizes, Unsized::TooLarge));
        }
        Ok(shape)
    }

    /// Checks that every tensor can be sized for `symbols` (the counts were checked).
    pub fn check_tensors(&self, operator: &str, symbols: &[u64]) -> Result<(), RunError> {
        for (kind, list) in [("input", &self.inputs), ("output", &self.outputs)] {
            for (k, t) in list.iter().enumerate() {
                if sizes::any_symbolic(&t.sizes) {
                    self.shape(operator, symbols, &format!("{kind} {k}"), t)?;
                }
            }
        }
        Ok(())
    }

    /// Checks the tensors passed against the operator's types for `symbols` (checked): counts,
    /// dtypes, shapes, and that each holds as many elements as its shape says.
    pub fn check<'t>(
        &self,
        operator: &str,
        symbols: &[u64],
        inputs: &[&HostTensor],
        outputs: &mut dyn ExactSizeIterator<Item = &'t HostTensor>,
    ) -> Result<(), RunError> {
        self.check_list(
            operator,
            symbols,
            "input",
            &self.inputs,
            &mut inputs.iter().copied(),
        )?;
        self.check_list(operator, symbols, "output", &self.outputs, outputs)
    }

    fn check_list<'t>(
        &self,
        operator: &str,
        symbols: &[u64],
        kind: &'static str,
        declared: &[TensorSig],
        passed: &mut dyn ExactSizeIterator<Item = &'t HostTensor>,
    ) -> Result<(), RunError> {
        if passed.len() != declared.len() {
            return Err(RunError::TensorCount {
                operator: operator.to_string(),
                kind,
                expected: declared.len(),
                got: passed.len(),
            });
        }
        for (k, (t, h)) in declared.iter().zip(passed).enumerate() {
            let what = format!("{kind} {k}");
            let shape = self.shape(operator, symbols, &what, t)?;
            let consistent =
                h.shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)) == Some(h.len());
            let same_shape = h.shape.len() == shape.len()
                && h.shape.iter().zip(&shape).all(|(&a, &b)| a as u64 == b);
            if h.dtype() != t.dtype || !same_shape || !consistent {
                let mut got = format!("{}{:?}", h.dtype(), h.shape);
                if !consistent {
                    got += &format!(" holding {} elements", h.len());
                }
                let mut expected = format!("{}{:?}", t.dtype, shape);
                if sizes::any_symbolic(&t.sizes) {
                    expected += &format!(" ({} for symbol values {symbols:?})", t.name());
                }
                return Err(RunError::TensorType {
                    operator: operator.to_string(),
                    tensor: what,
                    expected,
                    got,
                });
            }
        }
        Ok(())
    }
}

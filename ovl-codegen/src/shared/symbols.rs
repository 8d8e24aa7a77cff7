//! What both runtimes know of an operator's tensors and workgroup, with sizes that may be given
//! at run time ([`Geometry`]), and the checks of a run's symbol values and tensors against them
//! (the sizes are resolved by `ovl_ir::symbolic`).

use super::sizes;
use crate::error::{GeometryError, RunError};
use ovl_ir::ir;
use ovl_ir::symbolic::{resolve_shape, shape_text, SymbolError};
use ovl_ir::{DType, HostTensor};
use std::borrow::Cow;

/// A tensor type: dtype, shape and symbolic dimensions.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorSig {
    pub dtype: DType,
    ty: ir::TensorType,
}

impl TensorSig {
    fn of(t: &ir::TensorType) -> Option<TensorSig> {
        Some(TensorSig {
            dtype: DType::from_ir(t.dtype)?,
            ty: t.clone(),
        })
    }

    fn is_symbolic(&self) -> bool {
        !self.ty.symbolic.is_empty()
    }

    /// `f32[s0, 4]`.
    fn name(&self) -> String {
        format!(
            "{}{}",
            self.dtype,
            shape_text(&self.ty.shape, &self.ty.symbolic, &[])
        )
    }
}

/// The tensor types, the workgroup and the symbol count of an operator.
#[derive(Clone, Debug)]
pub struct Geometry {
    pub inputs: Vec<TensorSig>,
    pub outputs: Vec<TensorSig>,
    /// The workgroup as a shape with symbolic dimensions (its dtype is unused).
    workgroup: ir::TensorType,
    pub symbol_count: u32,
    /// The workgroup when every size is known (the common case needs no resolution).
    known_workgroup: Option<Vec<u64>>,
}

impl Geometry {
    /// The geometry of `dag`; `Err` says what is not supported.
    pub fn of(dag: &ir::ExpressionDag) -> Result<Geometry, GeometryError> {
        let list = |l: &[ir::TensorType], what: &'static str| {
            l.iter()
                .map(TensorSig::of)
                .collect::<Option<Vec<_>>>()
                .ok_or(GeometryError::UnsupportedType { what })
        };
        let known_workgroup = if dag.symbolic_workgroup.is_empty() {
            let shape = dag.workgroup_shape.clone();
            shape
                .iter()
                .try_fold(1u64, |n, &d| n.checked_mul(d))
                .filter(|&n| n <= i64::MAX as u64)
                .ok_or(GeometryError::WorkgroupTooLarge)?;
            Some(shape)
        } else {
            None
        };
        Ok(Geometry {
            inputs: list(&dag.inputs, "input")?,
            outputs: list(&dag.outputs, "output")?,
            workgroup: ir::TensorType {
                dtype: 0,
                shape: dag.workgroup_shape.clone(),
                symbolic: dag.symbolic_workgroup.clone(),
            },
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
            return Err(bad_values(
                operator,
                symbols,
                format!("{v} exceeds 2^63 - 1"),
            ));
        }
        Ok(())
    }

    /// The workgroup for `symbols`, after checking them.
    pub fn workgroup(&self, operator: &str, symbols: &[u64]) -> Result<Vec<u64>, RunError> {
        self.workgroup_ref(operator, symbols).map(Cow::into_owned)
    }

    /// [`workgroup`](Self::workgroup), borrowed when every size is known (no allocation per
    /// run).
    pub fn workgroup_ref(
        &self,
        operator: &str,
        symbols: &[u64],
    ) -> Result<Cow<'_, [u64]>, RunError> {
        self.check_symbols(operator, symbols)?;
        if let Some(w) = &self.known_workgroup {
            return Ok(Cow::Borrowed(w));
        }
        let shape = resolve_shape(&self.workgroup, symbols)
            .map_err(|e| unsized_error(operator, symbols, "the workgroup", e))?;
        if sizes::product(&shape) > i64::MAX as u64 {
            let e = SymbolError::Feed(format!("{shape:?} has more than 2^63 - 1 workers"));
            return Err(unsized_error(operator, symbols, "the workgroup", e));
        }
        Ok(Cow::Owned(shape))
    }

    /// The shape of one tensor for `symbols` (checked), with its bytes within `i64::MAX`.
    pub fn shape(
        &self,
        operator: &str,
        symbols: &[u64],
        what: &str,
        t: &TensorSig,
    ) -> Result<Vec<u64>, RunError> {
        if !t.is_symbolic() {
            return Ok(t.ty.shape.clone());
        }
        resolve_sized(t, symbols).map_err(|e| unsized_error(operator, symbols, what, e))
    }

    /// Checks that every tensor can be sized for `symbols` (the counts were checked). Tensors
    /// whose sizes are all known have nothing to check; nothing is allocated unless a check
    /// fails.
    pub fn check_tensors(&self, operator: &str, symbols: &[u64]) -> Result<(), RunError> {
        for (kind, list) in [("input", &self.inputs), ("output", &self.outputs)] {
            for (k, t) in list.iter().enumerate().filter(|(_, t)| t.is_symbolic()) {
                resolve_sized(t, symbols)
                    .map_err(|e| unsized_error(operator, symbols, &format!("{kind} {k}"), e))?;
            }
        }
        Ok(())
    }

    /// Checks the tensors passed against the operator's types for `symbols` (checked): counts,
    /// dtypes, shapes, and that each holds as many elements as its shape says.
    pub fn check(
        &self,
        operator: &str,
        symbols: &[u64],
        inputs: &[&HostTensor],
        outputs: &mut dyn ExactSizeIterator<Item = &HostTensor>,
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

    fn check_list(
        &self,
        operator: &str,
        symbols: &[u64],
        kind: &'static str,
        declared: &[TensorSig],
        passed: &mut dyn ExactSizeIterator<Item = &HostTensor>,
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
                if t.is_symbolic() {
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

fn bad_values(operator: &str, symbols: &[u64], problem: String) -> RunError {
    RunError::SymbolValues {
        operator: operator.to_string(),
        values: symbols.to_vec(),
        problem,
    }
}

/// Why `what` cannot be sized for `symbols`, as an error.
/// The shape of a symbolic tensor for `symbols`, with its bytes within `i64::MAX`.
fn resolve_sized(t: &TensorSig, symbols: &[u64]) -> Result<Vec<u64>, SymbolError> {
    let shape = resolve_shape(&t.ty, symbols)?;
    let bytes = shape
        .iter()
        .try_fold(1u64, |n, &d| n.checked_mul(d))
        .and_then(|n| n.checked_mul(t.dtype.size() as u64));
    if bytes.is_none_or(|b| b > i64::MAX as u64) {
        return Err(SymbolError::Feed(format!(
            "{shape:?} takes more than 2^63 - 1 bytes"
        )));
    }
    Ok(shape)
}

fn unsized_error(operator: &str, symbols: &[u64], what: &str, e: SymbolError) -> RunError {
    bad_values(operator, symbols, format!("{what}: {e}"))
}

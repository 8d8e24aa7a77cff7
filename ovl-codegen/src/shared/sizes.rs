//! Sizes of dimensions as generated code sees them: known when the operator is compiled, or
//! sized at run time (`proto/ovl.proto`, "Symbolic sizes": `scale * S[symbol] + offset`, where
//! `S` are the symbol values the operator runs with). Generated code spells a known size as a
//! literal and a symbolic one from the kernel's symbol parameters `ovl_S<k>` (the runtimes
//! resolve sizes for the values of a run with `ovl_ir::symbolic`).

use ovl_ir::ir;

/// One dimension of a workgroup or tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    /// Known when compiled.
    Known(u64),
    /// `scale * S[symbol] + offset`, known when the operator runs.
    Symbolic {
        symbol: u32,
        scale: i64,
        offset: i64,
    },
}

impl Size {
    /// The size if known when compiled.
    pub fn known(self) -> Option<u64> {
        match self {
            Size::Known(n) => Some(n),
            Size::Symbolic { .. } => None,
        }
    }

    /// The size as a C++ `int64_t` expression of the kernel's symbol parameters.
    pub fn cpp(self) -> String {
        match self {
            Size::Known(n) => format!("{n}LL"),
            Size::Symbolic {
                symbol,
                scale,
                offset,
            } => {
                let s = format!("ovl_S{symbol}");
                let scaled = if scale == 1 {
                    s
                } else {
                    format!("{scale}LL * {s}")
                };
                match offset {
                    0 if scale == 1 => scaled,
                    0 => format!("({scaled})"),
                    o if o < 0 => format!("({scaled} - {}LL)", o.unsigned_abs()),
                    o => format!("({scaled} + {o}LL)"),
                }
            }
        }
    }

    /// The size as a C++ `uint64_t` expression (for bounds checks and fault records).
    pub fn cpp_unsigned(self) -> String {
        match self {
            Size::Known(n) => format!("{n}ULL"),
            s => format!("(uint64_t){}", s.cpp()),
        }
    }
}

/// The sizes of a shape: `shape[d]`, or its [`Size::Symbolic`] where `symbolic` names `d`
/// (then `shape[d]` is only the size it was traced with and is not used).
pub fn sizes(shape: &[u64], symbolic: &[ir::SymbolicDim]) -> Vec<Size> {
    let mut out: Vec<Size> = shape.iter().map(|&n| Size::Known(n)).collect();
    for s in symbolic {
        if let Some(slot) = out.get_mut(s.dim as usize) {
            *slot = Size::Symbolic {
                symbol: s.symbol,
                scale: s.scale,
                offset: s.offset,
            };
        }
    }
    out
}

/// Whether any size is symbolic.
pub fn any_symbolic(sizes: &[Size]) -> bool {
    sizes.iter().any(|s| s.known().is_none())
}

/// The product of a resolved shape (0 when a dimension is 0).
pub fn product(shape: &[u64]) -> u64 {
    if shape.contains(&0) {
        return 0;
    }
    shape.iter().product()
}

/// The canonical hash of an operator as generated code sees it
/// ([`ovl_ir::hash::canonical_hash`], which covers the symbolic fields), with the example size
/// that a symbolic dimension's `shape[dim]` holds set to 0: generated code never uses it, so
/// traces of one program at different sizes share one cache entry (which serves every size),
/// while a concrete operator, whose hash has no symbolic fields, never shares it.
pub fn code_hash(dag: &ir::ExpressionDag) -> ovl_ir::hash::Digest {
    if dag.symbol_count == 0
        && dag.symbolic_workgroup.is_empty()
        && dag
            .inputs
            .iter()
            .chain(&dag.outputs)
            .chain(&dag.locals)
            .all(|t| t.symbolic.is_empty())
    {
        return ovl_ir::hash::canonical_hash(dag);
    }
    let mut d = dag.clone();
    let clear = |shape: &mut Vec<u64>, symbolic: &[ir::SymbolicDim]| {
        for s in symbolic {
            if let Some(slot) = shape.get_mut(s.dim as usize) {
                *slot = 0;
            }
        }
    };
    let symbolic = d.symbolic_workgroup.clone();
    clear(&mut d.workgroup_shape, &symbolic);
    for t in d
        .inputs
        .iter_mut()
        .chain(&mut d.outputs)
        .chain(&mut d.locals)
    {
        let symbolic = t.symbolic.clone();
        clear(&mut t.shape, &symbolic);
    }
    ovl_ir::hash::canonical_hash(&d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spelling() {
        let s = |scale, offset| Size::Symbolic {
            symbol: 1,
            scale,
            offset,
        };
        assert_eq!(Size::Known(7).cpp(), "7LL");
        assert_eq!(s(1, 0).cpp(), "ovl_S1");
        assert_eq!(s(2, 0).cpp(), "(2LL * ovl_S1)");
        assert_eq!(s(1, -3).cpp(), "(ovl_S1 - 3LL)");
        assert_eq!(s(4, 1).cpp(), "(4LL * ovl_S1 + 1LL)");
        assert_eq!(s(4, 1).cpp_unsigned(), "(uint64_t)(4LL * ovl_S1 + 1LL)");
        assert_eq!(product(&[3, 0, 5]), 0);
    }
}

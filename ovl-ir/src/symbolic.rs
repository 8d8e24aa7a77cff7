//! Sizes known only when a program runs ("Symbolic sizes" in `proto/ovl.proto`).
//!
//! A dimension of a tensor type or of a workgroup may be *symbolic*: its size is
//! `scale * S + offset`, where `S` is the run-time value of a symbol (a batch size, say).
//! Running an operator with symbol values is running its [`specialize_operator`]d form, so every
//! consumer that only knows concrete IR (the interpreter, the fusion pass) works on
//! specialized copies, while the code generator compiles the symbolic operator once and takes
//! the values at run time.
//!
//! Symbolic IR is made by [`unify`](crate::unify): the same graph traced at several sizes,
//! whose differences are affine in the size.
//!
//! ```
//! use ovl_ir::{ir, symbolic};
//!
//! let t = ir::TensorType {
//!     dtype: ir::Dtype::F32 as i32,
//!     shape: vec![8, 3], // traced with batch 8: an example
//!     symbolic: vec![ir::SymbolicDim { dim: 0, symbol: 0, scale: 2, offset: 1 }],
//! };
//! assert_eq!(symbolic::resolve_shape(&t, &[5]).unwrap(), vec![11, 3]);
//! assert!(symbolic::resolve_shape(&t, &[]).is_err()); // the symbol needs a value
//! ```

use crate::ir::{self, Op};
use crate::shape::element_count;

/// Why symbol values do not fit an operator, a graph or the shapes fed to it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SymbolError {
    /// A symbolic size names a symbol that was given no value.
    #[error("a size depends on symbol {symbol} but only {given} symbol value(s) were given")]
    Missing {
        /// The symbol.
        symbol: u32,
        /// How many values were given.
        given: usize,
    },
    /// The values make a size negative or too large.
    #[error("{size} is {value} for {name} = {symbol_value}, which is not a valid size")]
    BadSize {
        /// The size as text (`2*batch+1`).
        size: String,
        /// Its value.
        value: i128,
        /// The symbol's name.
        name: String,
        /// The symbol's value.
        symbol_value: u64,
    },
    /// Shapes fed to a graph disagree about a symbol, or do not fit a symbolic size.
    #[error("{0}")]
    Feed(String),
}

/// The symbolic entry for dimension `dim`, if that dimension is symbolic.
pub fn symbolic_dim(dims: &[ir::SymbolicDim], dim: usize) -> Option<&ir::SymbolicDim> {
    dims.iter().find(|d| d.dim as usize == dim)
}

/// Whether an operator has any symbolic size (or reads a symbol).
pub fn is_symbolic_operator(dag: &ir::ExpressionDag) -> bool {
    dag.symbol_count > 0
}

/// Whether a graph has any symbolic size.
pub fn is_symbolic_graph(dag: &ir::OperatorDag) -> bool {
    !dag.symbols.is_empty()
}

/// A symbolic size as text, e.g. `batch`, `2*batch`, `batch-1`.
pub fn size_text(d: &ir::SymbolicDim, name: &str) -> String {
    let mut s = if d.scale == 1 {
        name.to_string()
    } else {
        format!("{}*{name}", d.scale)
    };
    match d.offset {
        0 => {}
        o if o > 0 => s += &format!("+{o}"),
        o => s += &format!("{o}"),
    }
    s
}

/// The default name of symbol `k` where a graph gives none (`s0`, `s1`, ...).
pub fn default_symbol_name(k: u32) -> String {
    format!("s{k}")
}

/// A shape as text with its symbolic dimensions spelled out: `[batch, 200]`.
pub fn shape_text(shape: &[u64], symbolic: &[ir::SymbolicDim], names: &[String]) -> String {
    let dims: Vec<String> = shape
        .iter()
        .enumerate()
        .map(|(k, n)| match symbolic_dim(symbolic, k) {
            Some(d) => size_text(d, &symbol_name(names, d.symbol)),
            None => n.to_string(),
        })
        .collect();
    format!("[{}]", dims.join(", "))
}

fn symbol_name(names: &[String], k: u32) -> String {
    names
        .get(k as usize)
        .cloned()
        .unwrap_or_else(|| default_symbol_name(k))
}

/// The size of a symbolic dimension for the given symbol values.
pub fn dim_size(d: &ir::SymbolicDim, symbols: &[u64]) -> Result<u64, SymbolError> {
    let s = *symbols.get(d.symbol as usize).ok_or(SymbolError::Missing {
        symbol: d.symbol,
        given: symbols.len(),
    })?;
    let value = d.scale as i128 * s as i128 + d.offset as i128;
    u64::try_from(value)
        .ok()
        .filter(|&v| usize::try_from(v).is_ok())
        .ok_or_else(|| SymbolError::BadSize {
            size: size_text(d, &default_symbol_name(d.symbol)),
            value,
            name: default_symbol_name(d.symbol),
            symbol_value: s,
        })
}

fn resolve(
    shape: &[u64],
    symbolic: &[ir::SymbolicDim],
    symbols: &[u64],
) -> Result<Vec<u64>, SymbolError> {
    let mut out = shape.to_vec();
    for d in symbolic {
        if let Some(slot) = out.get_mut(d.dim as usize) {
            *slot = dim_size(d, symbols)?;
        }
    }
    if element_count(&out).is_none() {
        return Err(SymbolError::Feed(format!(
            "the shape {out:?} has more elements than fit in memory addresses"
        )));
    }
    Ok(out)
}

/// A tensor type's shape for the given symbol values.
pub fn resolve_shape(t: &ir::TensorType, symbols: &[u64]) -> Result<Vec<u64>, SymbolError> {
    resolve(&t.shape, &t.symbolic, symbols)
}

/// An operator's workgroup for the given symbol values.
pub fn resolve_workgroup(
    dag: &ir::ExpressionDag,
    symbols: &[u64],
) -> Result<Vec<u64>, SymbolError> {
    resolve(&dag.workgroup_shape, &dag.symbolic_workgroup, symbols)
}

/// A tensor type with its symbolic dimensions replaced by their sizes.
pub fn specialize_type(t: &ir::TensorType, symbols: &[u64]) -> Result<ir::TensorType, SymbolError> {
    Ok(ir::TensorType {
        dtype: t.dtype,
        shape: resolve_shape(t, symbols)?,
        symbolic: Vec::new(),
    })
}

fn specialize_types(
    list: &[ir::TensorType],
    symbols: &[u64],
) -> Result<Vec<ir::TensorType>, SymbolError> {
    list.iter().map(|t| specialize_type(t, symbols)).collect()
}

/// The concrete operator that `dag` is for the given symbol values: symbolic sizes replaced by
/// their values, `symbol` expressions by constants. A concrete operator comes back unchanged.
pub fn specialize_operator(
    dag: &ir::ExpressionDag,
    symbols: &[u64],
) -> Result<ir::ExpressionDag, SymbolError> {
    if !is_symbolic_operator(dag) {
        return Ok(dag.clone());
    }
    let mut out = dag.clone();
    out.workgroup_shape = resolve_workgroup(dag, symbols)?;
    out.symbolic_workgroup.clear();
    out.symbol_count = 0;
    out.inputs = specialize_types(&dag.inputs, symbols)?;
    out.outputs = specialize_types(&dag.outputs, symbols)?;
    out.locals = specialize_types(&dag.locals, symbols)?;
    for e in &mut out.expressions {
        if e.code == Op::Symbol as i32 {
            let value = *symbols.get(e.axis as usize).ok_or(SymbolError::Missing {
                symbol: e.axis,
                given: symbols.len(),
            })?;
            e.code = Op::Const as i32;
            e.int_value = value as i64;
            e.axis = 0;
        }
    }
    Ok(out)
}

/// The concrete graph that `dag` is for the given symbol values (every operator and type
/// specialized, `symbols` cleared).
pub fn specialize_graph(
    dag: &ir::OperatorDag,
    symbols: &[u64],
) -> Result<ir::OperatorDag, SymbolError> {
    if !is_symbolic_graph(dag) {
        return Ok(dag.clone());
    }
    Ok(ir::OperatorDag {
        version: dag.version,
        operators: dag
            .operators
            .iter()
            .map(|op| specialize_operator(op, symbols))
            .collect::<Result<_, _>>()?,
        inputs: specialize_types(&dag.inputs, symbols)?,
        operator_inputs: dag.operator_inputs.clone(),
        outputs: dag.outputs.clone(),
        symbols: Vec::new(),
    })
}

/// The symbol values that make `types` (symbolic) have the `shapes` fed for them: each symbolic
/// dimension determines its symbol; every feed must agree, and every concrete dimension must
/// match. `names` names the symbols (their count is the result's length); `what(k)` names feed
/// `k` in messages. A symbol that no feed determines is an error.
pub fn solve_symbols(
    types: &[&ir::TensorType],
    shapes: &[&[u64]],
    names: &[String],
    what: &dyn Fn(usize) -> String,
) -> Result<Vec<u64>, SymbolError> {
    let mut values: Vec<Option<(u64, usize)>> = vec![None; names.len()];
    for (k, (t, shape)) in types.iter().zip(shapes).enumerate() {
        let expected = shape_text(&t.shape, &t.symbolic, names);
        if shape.len() != t.shape.len() {
            return Err(SymbolError::Feed(format!(
                "{} has shape {shape:?} but the program expects {expected} (rank {})",
                what(k),
                t.shape.len()
            )));
        }
        for d in &t.symbolic {
            let n = shape[d.dim as usize] as i128;
            let name = symbol_name(names, d.symbol);
            let rest = n - d.offset as i128;
            if rest < 0 || d.scale <= 0 || rest % d.scale as i128 != 0 {
                return Err(SymbolError::Feed(format!(
                    "{} has shape {shape:?}, but dimension {} must be {} for some whole \
                     {name} >= 0 (the program expects {expected})",
                    what(k),
                    d.dim,
                    size_text(d, &name),
                )));
            }
            let v = (rest / d.scale as i128) as u64;
            let slot = values.get_mut(d.symbol as usize).ok_or_else(|| {
                SymbolError::Feed(format!(
                    "{} has a size depending on symbol {} but the program names {} symbol(s)",
                    what(k),
                    d.symbol,
                    names.len()
                ))
            })?;
            match *slot {
                None => *slot = Some((v, k)),
                Some((prev, from)) if prev != v => {
                    return Err(SymbolError::Feed(format!(
                        "{} has shape {shape:?}, which makes {name} = {v}, but {} made {name} = \
                         {prev}; inputs that share the dimension {name} must have the same size \
                         in it",
                        what(k),
                        what(from)
                    )))
                }
                Some(_) => {}
            }
        }
    }
    let values: Vec<u64> = values
        .iter()
        .enumerate()
        .map(|(s, v)| {
            v.map(|(v, _)| v).ok_or_else(|| {
                SymbolError::Feed(format!(
                    "no input determines the size {}; a symbolic size must appear in an input",
                    symbol_name(names, s as u32)
                ))
            })
        })
        .collect::<Result<_, _>>()?;
    for (k, (t, shape)) in types.iter().zip(shapes).enumerate() {
        let want = resolve_shape(t, &values)?;
        if want.as_slice() != *shape {
            return Err(SymbolError::Feed(format!(
                "{} has shape {shape:?} but the program expects {} (here {want:?})",
                what(k),
                shape_text(&t.shape, &t.symbolic, names)
            )));
        }
    }
    Ok(values)
}

/// Checks the symbolic parts of one operator (called by `validate`): every symbolic dimension
/// is a dimension of its shape, named once, with scale >= 1 and a symbol below `symbol_count`;
/// local tensors are concrete (a worker's private storage has a size known when compiling).
pub(crate) fn check_operator(dag: &ir::ExpressionDag) -> Result<(), String> {
    let check = |what: &str, rank: usize, dims: &[ir::SymbolicDim]| -> Result<(), String> {
        for (k, d) in dims.iter().enumerate() {
            if d.dim as usize >= rank {
                return Err(format!(
                    "{what} has a symbolic dimension {} but rank {rank}",
                    d.dim
                ));
            }
            if dims[..k].iter().any(|e| e.dim == d.dim) {
                return Err(format!(
                    "{what} names dimension {} as symbolic twice",
                    d.dim
                ));
            }
            if d.scale < 1 {
                return Err(format!(
                    "{what}: symbolic dimension {} has scale {}; a size grows with its symbol \
                     (scale >= 1)",
                    d.dim, d.scale
                ));
            }
            if d.symbol >= dag.symbol_count {
                return Err(format!(
                    "{what}: symbolic dimension {} uses symbol {} but the operator takes {} \
                     symbol value(s) (symbol_count)",
                    d.dim, d.symbol, dag.symbol_count
                ));
            }
        }
        Ok(())
    };
    check(
        "the workgroup",
        dag.workgroup_shape.len(),
        &dag.symbolic_workgroup,
    )?;
    for (what, list) in [("input", &dag.inputs), ("output", &dag.outputs)] {
        for (k, t) in list.iter().enumerate() {
            check(&format!("{what} {k}"), t.shape.len(), &t.symbolic)?;
        }
    }
    if let Some(k) = dag.locals.iter().position(|t| !t.symbolic.is_empty()) {
        return Err(format!(
            "local tensor {k} has a symbolic size; a worker's local tensors must have sizes \
             known when compiling"
        ));
    }
    Ok(())
}

/// Checks the symbolic parts of a graph (called by `validate_operator_dag`): graph inputs'
/// symbolic dimensions and every operator's symbols are below `symbols.len()`.
pub(crate) fn check_graph(dag: &ir::OperatorDag) -> Result<(), String> {
    let count = dag.symbols.len() as u32;
    for (k, t) in dag.inputs.iter().enumerate() {
        for d in &t.symbolic {
            if d.dim as usize >= t.shape.len() || d.scale < 1 || d.symbol >= count {
                return Err(format!(
                    "graph input {k} has a bad symbolic dimension {d:?} (rank {}, {count} \
                     symbol(s))",
                    t.shape.len()
                ));
            }
        }
    }
    for (i, op) in dag.operators.iter().enumerate() {
        if op.symbol_count > count {
            return Err(format!(
                "operator {i} (`{}`) takes {} symbol value(s) but the graph names {count} \
                 symbol(s)",
                op.name, op.symbol_count
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::Builder;
    use crate::DType;

    fn sym(dim: u32, scale: i64, offset: i64) -> ir::SymbolicDim {
        ir::SymbolicDim {
            dim,
            symbol: 0,
            scale,
            offset,
        }
    }

    #[test]
    fn sizes_resolve_and_bad_values_are_errors() {
        let d = sym(0, 2, -3);
        assert_eq!(dim_size(&d, &[5]).unwrap(), 7);
        assert!(matches!(
            dim_size(&d, &[1]),
            Err(SymbolError::BadSize { value: -1, .. })
        ));
        assert!(matches!(
            dim_size(&d, &[]),
            Err(SymbolError::Missing { .. })
        ));
        assert_eq!(size_text(&d, "batch"), "2*batch-3");
        assert_eq!(size_text(&sym(0, 1, 0), "b"), "b");
    }

    #[test]
    fn specialize_replaces_sizes_and_symbols() {
        let mut b = Builder::new("op", &[4]);
        b.input(DType::F32, &[4, 3]);
        b.output(DType::F32, &[4]);
        let mut dag = b.build();
        dag.symbol_count = 1;
        dag.symbolic_workgroup = vec![sym(0, 1, 0)];
        dag.inputs[0].symbolic = vec![sym(0, 1, 0)];
        dag.outputs[0].symbolic = vec![sym(0, 1, 0)];
        dag.expressions.push(ir::Expression {
            code: Op::Symbol as i32,
            dtype: ir::Dtype::I64 as i32,
            ..Default::default()
        });
        crate::validate::validate(&dag).unwrap();
        let s = specialize_operator(&dag, &[9]).unwrap();
        assert_eq!(s.workgroup_shape, vec![9]);
        assert_eq!(s.inputs[0].shape, vec![9, 3]);
        assert_eq!(s.outputs[0].shape, vec![9]);
        let last = s.expressions.last().unwrap();
        assert_eq!((last.code, last.int_value), (Op::Const as i32, 9));
        assert_eq!(s.symbol_count, 0);
        crate::validate::validate(&s).unwrap();
    }

    #[test]
    fn solving_symbols_from_feeds_checks_agreement() {
        let t = ir::TensorType {
            dtype: ir::Dtype::F32 as i32,
            shape: vec![8, 3],
            symbolic: vec![sym(0, 1, 0)],
        };
        let u = ir::TensorType {
            dtype: ir::Dtype::F32 as i32,
            shape: vec![16],
            symbolic: vec![sym(0, 2, 0)],
        };
        let names = vec!["batch".to_string()];
        let what = |k: usize| format!("input {k}");
        let v = solve_symbols(&[&t, &u], &[&[5, 3], &[10]], &names, &what).unwrap();
        assert_eq!(v, vec![5]);
        let e = solve_symbols(&[&t, &u], &[&[5, 3], &[12]], &names, &what).unwrap_err();
        assert!(
            e.to_string()
                .contains("makes batch = 6, but input 0 made batch = 5"),
            "{e}"
        );
        let e = solve_symbols(&[&t, &u], &[&[5, 4], &[10]], &names, &what).unwrap_err();
        assert!(e.to_string().contains("expects [batch, 3]"), "{e}");
        let e = solve_symbols(&[&u], &[&[7]], &names, &what).unwrap_err();
        assert!(e.to_string().contains("2*batch"), "{e}");
        assert_eq!(
            solve_symbols(&[&t], &[&[0, 3]], &names, &what).unwrap(),
            vec![0]
        );
    }
}

//! One symbolic graph from the same graph traced at several sizes.
//!
//! A program whose size (a batch, say) is known only when it runs is made by tracing the user's
//! code at three sizes of that symbol and unifying the results: the traces must have the same
//! structure (opcodes, operands, tensors, wiring); every number that differs between them (a
//! dimension, a literal) must be an affine function `scale * size + offset` of the size with a
//! whole scale and offset, found from the first two traces and checked by every other. A
//! dimension becomes a [`ir::SymbolicDim`]; a literal becomes `symbol * scale + offset`,
//! computed in `i64` and cast to the literal's dtype. Anything else (a float that is not a whole
//! number, a local tensor sized by the symbol, a different structure) is a [`UnifyError`] that
//! names the operator, its source line and what differs.
//!
//! The traces may already have sizes known only at run time in other symbols (a program
//! exported for any batch size, batched over a loop whose length is known only at run time:
//! `ovl::program_batch::batch_program`): those symbolic parts (symbolic dimensions, `symbol`
//! expressions, the graph's symbol names) must be the same in every trace and are kept; the
//! new symbol gets the next index (the number of symbols the traces' graph already names), and
//! an operator that depends on it gets a `symbol_count` covering it.

use crate::dtype::DType;
use crate::ir::{self, Op};
use crate::names::{at, defined_at, op_name};

/// The symbol a graph that has no symbol yet unifies in (the next index in general: see
/// [`unify_graphs`]).
pub const SYMBOL: u32 = 0;

/// Why traces could not be unified into one symbolic graph.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnifyError {
    /// The traces are unusable as a set (fewer than three, equal sizes).
    #[error("{0}")]
    Traces(String),
    /// An operator cannot be written for every size.
    #[error(
        "operator `{operator}`{} cannot be made polymorphic in `{symbol}`: {message}",
        at(defined_at)
    )]
    Operator {
        /// The operator's name.
        operator: String,
        /// `file:line`, or empty.
        defined_at: String,
        /// The symbol's name.
        symbol: String,
        /// What differs.
        message: String,
    },
    /// The graph around the operators differs (inputs, wiring, outputs).
    #[error("the graph cannot be made polymorphic in `{symbol}`: {message}")]
    Graph {
        /// The symbol's name.
        symbol: String,
        /// What differs.
        message: String,
    },
}

/// An affine function of the size, `scale * size + offset`, found from the values `v` taken at
/// `sizes`; `None` when no whole `scale` and `offset` fit every value.
pub fn affine_fit(sizes: &[u64], v: &[i128]) -> Option<(i128, i128)> {
    let (b0, b1) = (sizes[0] as i128, sizes[1] as i128);
    let dv = v[1] - v[0];
    let db = b1 - b0;
    if db == 0 || dv % db != 0 {
        return None;
    }
    let scale = dv / db;
    let offset = v[0] - scale * b0;
    sizes
        .iter()
        .zip(v)
        .all(|(&b, &x)| scale * b as i128 + offset == x)
        .then_some((scale, offset))
}

/// One shape unified: dimensions equal in every trace stay, the others become symbolic in
/// `symbol`. `known` are the dimensions that are symbolic already (in other symbols; the same
/// in every trace): they are kept as they are. `shape[dim]` keeps the first trace's size; the
/// symbolic dimensions come back in the order of their dimension.
pub fn unify_shape(
    sizes: &[u64],
    shapes: &[&[u64]],
    known: &[ir::SymbolicDim],
    symbol: u32,
) -> Result<(Vec<u64>, Vec<ir::SymbolicDim>), String> {
    let rank = shapes[0].len();
    if shapes.iter().any(|s| s.len() != rank) {
        return Err(format!(
            "the rank depends on the size ({})",
            describe(sizes, shapes.iter().map(|s| format!("{s:?}")))
        ));
    }
    let mut symbolic = Vec::new();
    for d in 0..rank {
        if let Some(k) = known.iter().find(|k| k.dim as usize == d) {
            symbolic.push(*k);
            continue;
        }
        let v: Vec<i128> = shapes.iter().map(|s| s[d] as i128).collect();
        if v.iter().all(|&x| x == v[0]) {
            continue;
        }
        match affine_fit(sizes, &v) {
            Some((scale, offset)) if scale >= 1 && i64::try_from(offset).is_ok() => {
                symbolic.push(ir::SymbolicDim {
                    dim: d as u32,
                    symbol,
                    scale: scale as i64,
                    offset: offset as i64,
                })
            }
            _ => {
                return Err(format!(
                    "dimension {d} is not a whole multiple of the size plus a constant, growing \
                     with it ({})",
                    describe(sizes, v.iter().map(|x| x.to_string()))
                ))
            }
        }
    }
    Ok((shapes[0].to_vec(), symbolic))
}

/// A tensor type unified in `symbol` (see [`unify_shape`]); dtypes and the sizes already
/// symbolic must agree.
pub fn unify_type(
    sizes: &[u64],
    types: &[&ir::TensorType],
    symbol: u32,
) -> Result<ir::TensorType, String> {
    if types.iter().any(|t| t.dtype != types[0].dtype) {
        return Err("its dtype depends on the size".into());
    }
    if types.iter().any(|t| t.symbolic != types[0].symbolic) {
        return Err("its sizes known only at run time differ between the traces".into());
    }
    if let Some(d) = types[0].symbolic.iter().find(|d| d.symbol >= symbol) {
        return Err(format!(
            "dimension {} is already sized by symbol {}, which is not below the new symbol {symbol}",
            d.dim, d.symbol
        ));
    }
    let shapes: Vec<&[u64]> = types.iter().map(|t| t.shape.as_slice()).collect();
    let (shape, symbolic) = unify_shape(sizes, &shapes, &types[0].symbolic, symbol)?;
    Ok(ir::TensorType {
        dtype: types[0].dtype,
        shape,
        symbolic,
    })
}

/// `5 at size 1009, 7 at size 1013, ...`
fn describe(sizes: &[u64], values: impl Iterator<Item = String>) -> String {
    values
        .zip(sizes)
        .map(|(v, b)| format!("{v} at size {b}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn check_sizes(sizes: &[u64], symbol: &str) -> Result<(), UnifyError> {
    let distinct = sizes
        .iter()
        .all(|a| sizes.iter().filter(|b| *b == a).count() == 1);
    if sizes.len() < 3 || !distinct {
        return Err(UnifyError::Traces(format!(
            "unifying traces in `{symbol}` needs at least three traces at different sizes \
             (two to find each affine size, one to check it); got sizes {sizes:?}"
        )));
    }
    Ok(())
}

/// Unifies the same operator traced at `sizes` in symbol number `index`, named `symbol` (see
/// the module documentation). The result has `symbol_count` `index + 1` when anything in it
/// depends on the size, and is the first trace unchanged otherwise. Parts already symbolic (in
/// symbols below `index`) must be equal in every trace.
pub fn unify_operator(
    sizes: &[u64],
    traces: &[&ir::ExpressionDag],
    symbol: &str,
    index: u32,
) -> Result<ir::ExpressionDag, UnifyError> {
    check_sizes(sizes, symbol)?;
    let first = traces[0];
    let err = |message: String| UnifyError::Operator {
        operator: first.name.clone(),
        defined_at: defined_at(first),
        symbol: symbol.to_string(),
        message,
    };
    if traces.iter().any(|t| {
        t.symbolic_workgroup != first.symbolic_workgroup || t.symbol_count != first.symbol_count
    }) {
        return Err(err(
            "its sizes known only at run time differ between the traces".into(),
        ));
    }
    if traces.iter().any(|t| t.library_call != first.library_call) {
        return Err(err(
            "it is a different library call (or none) at different sizes".into(),
        ));
    }
    if first.symbol_count > index {
        return Err(err(format!(
            "it already uses {} symbol(s), so the new symbol cannot be number {index}",
            first.symbol_count
        )));
    }
    if traces
        .iter()
        .any(|t| t.expressions.len() != first.expressions.len())
    {
        return Err(err(format!(
            "its traces differ in length ({}): the code takes a different path for different \
             sizes; write it so that only sizes and literals depend on `{symbol}`",
            describe(
                sizes,
                traces
                    .iter()
                    .map(|t| format!("{} expressions", t.expressions.len()))
            )
        )));
    }
    let types = |what: &str, pick: &dyn Fn(&ir::ExpressionDag) -> &Vec<ir::TensorType>| {
        let n = pick(first).len();
        if traces.iter().any(|t| pick(t).len() != n) {
            return Err(err(format!("the number of {what}s depends on the size")));
        }
        (0..n)
            .map(|k| {
                let ts: Vec<&ir::TensorType> = traces.iter().map(|t| &pick(t)[k]).collect();
                unify_type(sizes, &ts, index).map_err(|m| err(format!("{what} {k}: {m}")))
            })
            .collect::<Result<Vec<_>, _>>()
    };
    let inputs = types("input", &|t| &t.inputs)?;
    let outputs = types("output", &|t| &t.outputs)?;
    let locals = types("local tensor", &|t| &t.locals)?;
    let new = |t: &ir::TensorType| t.symbolic.iter().any(|d| d.symbol == index);
    if let Some(k) = locals.iter().position(new) {
        return Err(err(format!(
            "local tensor {k} is sized by `{symbol}`; a worker's local tensors must have sizes \
             that do not depend on it"
        )));
    }
    let shapes: Vec<&[u64]> = traces
        .iter()
        .map(|t| t.workgroup_shape.as_slice())
        .collect();
    let (workgroup_shape, symbolic_workgroup) =
        unify_shape(sizes, &shapes, &first.symbolic_workgroup, index)
            .map_err(|m| err(format!("the workgroup: {m}")))?;

    let mut expressions = Vec::with_capacity(first.expressions.len());
    let mut new_index = Vec::with_capacity(first.expressions.len());
    let mut reads_symbol = false;
    for (i, e) in first.expressions.iter().enumerate() {
        let all: Vec<&ir::Expression> = traces.iter().map(|t| &t.expressions[i]).collect();
        let same_shape = |a: &ir::Expression| {
            a.code == e.code
                && a.dtype == e.dtype
                && a.operands == e.operands
                && a.tensor == e.tensor
                && a.axis == e.axis
        };
        if !all.iter().all(|a| same_shape(a)) {
            return Err(err(format!(
                "expression %{i} ({}) differs between the traces: the code takes a different \
                 path for different sizes",
                op_name(e.code)
            )));
        }
        let renumber = |mut x: ir::Expression| {
            for o in &mut x.operands {
                *o = new_index[*o as usize];
            }
            x
        };
        let literal_same = all.iter().all(|a| {
            a.float_value.to_bits() == e.float_value.to_bits()
                && a.int_value == e.int_value
                && a.uint_value == e.uint_value
        });
        if literal_same {
            let x = renumber(e.clone());
            new_index.push(expressions.len() as u32);
            expressions.push(x);
            continue;
        }
        if e.code != Op::Const as i32 {
            return Err(err(format!(
                "expression %{i} ({}) has a value that depends on the size; only literals and \
                 sizes may",
                op_name(e.code)
            )));
        }
        let dtype =
            DType::from_ir(e.dtype).ok_or_else(|| err(format!("expression %{i}: bad dtype")))?;
        let values: Option<Vec<i128>> = all.iter().map(|a| literal_as_integer(a, dtype)).collect();
        let fit = values.as_ref().and_then(|v| affine_fit(sizes, v));
        let Some((scale, offset)) =
            fit.filter(|(s, o)| i64::try_from(*s).is_ok() && i64::try_from(*o).is_ok())
        else {
            let shown = all.iter().map(|a| literal_text(a, dtype));
            return Err(err(format!(
                "the literal %{i} ({}) is not a whole multiple of `{symbol}` plus a constant \
                 ({}); compute it inside the operator from a size instead (for example divide by \
                 the dimension as a float there)",
                dtype.name(),
                describe(sizes, shown)
            )));
        };
        reads_symbol = true;
        let at = expressions.len() as u32;
        let mut push = |x: ir::Expression| {
            expressions.push(x);
            expressions.len() as u32 - 1
        };
        let i64t = ir::Dtype::I64 as i32;
        let mut v = push(ir::Expression {
            code: Op::Symbol as i32,
            dtype: i64t,
            axis: index,
            ..Default::default()
        });
        if scale != 1 {
            let c = push(int_const(scale as i64));
            v = push(binary(Op::Mul, v, c));
        }
        if offset != 0 {
            let c = push(int_const(offset as i64));
            v = push(binary(Op::Add, v, c));
        }
        if dtype != DType::I64 {
            v = push(ir::Expression {
                code: Op::Cast as i32,
                dtype: e.dtype,
                operands: vec![v],
                ..Default::default()
            });
        }
        debug_assert!(v >= at);
        new_index.push(v);
    }
    let symbolic = reads_symbol
        || symbolic_workgroup.iter().any(|d| d.symbol == index)
        || inputs.iter().chain(&outputs).any(new);
    let out = ir::ExpressionDag {
        version: first.version,
        name: first.name.clone(),
        expressions,
        workgroup_shape,
        inputs,
        outputs,
        locals,
        source: first.source.clone(),
        gradient: first.gradient.clone(),
        library_call: first.library_call,
        symbolic_workgroup,
        symbol_count: if symbolic {
            index + 1
        } else {
            first.symbol_count
        },
    };
    crate::validate::validate(&out)
        .map_err(|e| err(format!("the unified operator is not valid: {e}")))?;
    Ok(out)
}

fn int_const(v: i64) -> ir::Expression {
    ir::Expression {
        code: Op::Const as i32,
        dtype: ir::Dtype::I64 as i32,
        int_value: v,
        ..Default::default()
    }
}

fn binary(op: Op, a: u32, b: u32) -> ir::Expression {
    ir::Expression {
        code: op as i32,
        dtype: ir::Dtype::I64 as i32,
        operands: vec![a, b],
        ..Default::default()
    }
}

/// A literal's value as a whole number, if it is one (floats: integral and exactly
/// representable; bools never).
fn literal_as_integer(e: &ir::Expression, dtype: DType) -> Option<i128> {
    if dtype == DType::Bool {
        None
    } else if dtype.is_float() {
        let f = e.float_value;
        (f.is_finite() && f.fract() == 0.0 && f.abs() < 2f64.powi(53)).then_some(f as i128)
    } else if dtype.is_unsigned_int() {
        Some(e.uint_value as i128)
    } else {
        Some(e.int_value as i128)
    }
}

fn literal_text(e: &ir::Expression, dtype: DType) -> String {
    if dtype.is_float() {
        format!("{}", e.float_value)
    } else if dtype.is_unsigned_int() {
        e.uint_value.to_string()
    } else {
        e.int_value.to_string()
    }
}

/// Unifies the same graph traced at `sizes` (at least three, distinct): every operator with
/// [`unify_operator`], the graph inputs' types, and the wiring, which must be equal. The new
/// symbol's number is the number of symbols the traces already name (they must name the same
/// ones, and not `symbol`); the result names it `symbol` after them when anything depends on
/// it (and adds no symbol otherwise).
pub fn unify_graphs(
    sizes: &[u64],
    traces: &[&ir::OperatorDag],
    symbol: &str,
) -> Result<ir::OperatorDag, UnifyError> {
    check_sizes(sizes, symbol)?;
    let first = traces[0];
    let graph = |message: String| UnifyError::Graph {
        symbol: symbol.to_string(),
        message,
    };
    if traces.iter().any(|t| t.symbols != first.symbols) {
        return Err(graph(
            "the traces name different symbols for their sizes known at run time".into(),
        ));
    }
    if first.symbols.iter().any(|s| s == symbol) {
        return Err(graph(format!(
            "the traces already have a symbol named `{symbol}`; choose another name"
        )));
    }
    let index = first.symbols.len() as u32;
    if traces
        .iter()
        .any(|t| t.operators.len() != first.operators.len())
    {
        return Err(graph(format!(
            "the number of kernels depends on the size ({}); fusion decided differently at \
             different sizes",
            describe(
                sizes,
                traces
                    .iter()
                    .map(|t| format!("{} operators", t.operators.len()))
            )
        )));
    }
    if traces.iter().any(|t| {
        t.operator_inputs != first.operator_inputs
            || t.outputs != first.outputs
            || t.inputs.len() != first.inputs.len()
            || t.version != first.version
    }) {
        return Err(graph(
            "the operators are wired differently at different sizes".to_string(),
        ));
    }
    let operators = (0..first.operators.len())
        .map(|i| {
            let ops: Vec<&ir::ExpressionDag> = traces.iter().map(|t| &t.operators[i]).collect();
            unify_operator(sizes, &ops, symbol, index)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let inputs = (0..first.inputs.len())
        .map(|k| {
            let ts: Vec<&ir::TensorType> = traces.iter().map(|t| &t.inputs[k]).collect();
            unify_type(sizes, &ts, index).map_err(|m| graph(format!("graph input {k}: {m}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let symbolic = operators.iter().any(|o| o.symbol_count > index)
        || inputs
            .iter()
            .any(|t| t.symbolic.iter().any(|d| d.symbol == index));
    let mut symbols = first.symbols.clone();
    if symbolic {
        symbols.push(symbol.to_string());
    }
    let out = ir::OperatorDag {
        version: first.version,
        operators,
        inputs,
        operator_inputs: first.operator_inputs.clone(),
        outputs: first.outputs.clone(),
        symbols,
    };
    crate::validate::validate_operator_dag(&out)
        .map_err(|e| graph(format!("the unified graph is not valid: {e}")))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::Builder;
    use crate::ir::TensorKind::{Input as IN, Output as OUT};
    use crate::symbolic::specialize_operator;

    /// out[i, j] = x[i, j] * (rows as f32) + (2 * rows + 1) as i64 as f32: literals and sizes
    /// that depend on the batch.
    fn scaled(rows: u64) -> ir::ExpressionDag {
        let mut b = Builder::new("scaled", &[rows, 3]);
        b.input(DType::F32, &[rows, 3]);
        b.output(DType::F32, &[rows, 3]);
        let i = b.position(0);
        let j = b.position(1);
        let x = b.read(IN, 0, &[i, j]);
        let r = b.f32(rows as f32);
        let y = b.op(Op::Mul, &[x, r]);
        let k = b.i64(2 * rows as i64 + 1);
        let kf = b.cast(k, DType::F32);
        let z = b.op(Op::Add, &[y, kf]);
        b.write(OUT, 0, &[i, j], z);
        b.build()
    }

    #[test]
    fn literals_and_sizes_become_affine_in_the_symbol() {
        let sizes = [1009, 1013, 1019];
        let traces: Vec<_> = sizes.iter().map(|&n| scaled(n)).collect();
        let refs: Vec<_> = traces.iter().collect();
        let u = unify_operator(&sizes, &refs, "batch", SYMBOL).unwrap();
        assert_eq!(u.symbol_count, 1);
        assert_eq!(u.symbolic_workgroup.len(), 1);
        assert_eq!(u.inputs[0].symbolic[0].scale, 1);
        // Specializing at any size gives what tracing at that size gives, apart from the
        // literals' new form: check the semantics through the text of the specialized operator.
        for n in [0u64, 1, 7] {
            let s = specialize_operator(&u, &[n]).unwrap();
            assert_eq!(s.workgroup_shape, vec![n, 3]);
            assert_eq!(s.outputs[0].shape, vec![n, 3]);
        }
    }

    #[test]
    fn a_float_that_is_not_affine_is_an_error_naming_the_operator() {
        let sizes = [1009, 1013, 1019];
        let mk = |n: u64| {
            let mut d = scaled(n);
            // 1 / rows: not a whole multiple of the size.
            for e in &mut d.expressions {
                if e.code == Op::Const as i32 && e.dtype == ir::Dtype::F32 as i32 {
                    e.float_value = (1.0 / n as f32) as f64;
                }
            }
            d
        };
        let traces: Vec<_> = sizes.iter().map(|&n| mk(n)).collect();
        let refs: Vec<_> = traces.iter().collect();
        let e = unify_operator(&sizes, &refs, "batch", SYMBOL)
            .unwrap_err()
            .to_string();
        assert!(e.contains("operator `scaled`"), "{e}");
        assert!(e.contains("not a whole multiple of `batch`"), "{e}");
    }

    #[test]
    fn the_check_trace_catches_a_coincidence() {
        // Equal to the size at the first two traces, not at the third.
        let sizes = [1009, 1013, 1019];
        let v = [1009i128, 1013, 1020];
        assert_eq!(affine_fit(&sizes, &v), None);
        assert_eq!(affine_fit(&sizes, &[2019, 2027, 2039]), Some((2, 1)));
        let e = unify_shape(&sizes, &[&[4], &[4], &[5]], &[], SYMBOL).unwrap_err();
        assert!(e.contains("dimension 0"), "{e}");
        assert!(check_sizes(&[1, 2], "b").is_err());
        assert!(check_sizes(&[1, 2, 2], "b").is_err());
    }

    #[test]
    fn traces_already_symbolic_unify_in_the_next_symbol() {
        let sizes = [1009, 1013, 1019];
        let traces: Vec<_> = sizes.iter().map(|&n| scaled(n)).collect();
        let refs: Vec<_> = traces.iter().collect();
        let rows = unify_operator(&sizes, &refs, "batch", SYMBOL).unwrap();
        // The symbolic operator batched over 5, 7 and 11 examples, unified in symbol 1.
        let loop_sizes = [5u64, 7, 11];
        let batched: Vec<_> = loop_sizes
            .iter()
            .map(|&n| crate::batch::batch_operator(&rows, &[true], n).unwrap())
            .collect();
        let refs: Vec<_> = batched.iter().collect();
        let u = unify_operator(&loop_sizes, &refs, "pfor", 1).unwrap();
        assert_eq!(u.symbol_count, 2);
        assert_eq!(u.symbolic_workgroup.len(), 2);
        assert_eq!(
            (u.symbolic_workgroup[0].dim, u.symbolic_workgroup[0].symbol),
            (0, 1)
        );
        assert_eq!(
            (u.symbolic_workgroup[1].dim, u.symbolic_workgroup[1].symbol),
            (1, 0)
        );
        for (r, n) in [(0u64, 3u64), (4, 1), (2, 6)] {
            let want = crate::batch::batch_operator(
                &specialize_operator(&rows, &[r]).unwrap(),
                &[true],
                n,
            )
            .unwrap();
            assert_eq!(specialize_operator(&u, &[r, n]).unwrap(), want);
        }
        // The new symbol must come after the ones the traces use.
        let e = unify_operator(&loop_sizes, &refs, "pfor", 0).unwrap_err();
        assert!(e.to_string().contains("already uses 1 symbol"), "{e}");
        // Parts already symbolic must be equal in every trace.
        let mut odd = batched.clone();
        odd[2].inputs[0].symbolic[0].scale = 2;
        let refs: Vec<_> = odd.iter().collect();
        let e = unify_operator(&loop_sizes, &refs, "pfor", 1).unwrap_err();
        assert!(e.to_string().contains("differ between the traces"), "{e}");
    }
}

//! Library calls (`LibraryCall` in `proto/ovl.proto`): operators that call a tuned routine
//! instead of running a worker program. Here: the shape rules of each call ([`gemm_dims`],
//! checked by `validate`), the reference worker program that defines what a call computes
//! ([`expand`]: the interpreter runs it, and so does any backend without the library), and the
//! operator of a call ([`gemm_operator`]).

use crate::builder::{tensor_type, Builder, IN, OUT};
use crate::dtype::{DType, Literal};
use crate::ir::{self, Op};
use std::borrow::Cow;

/// The sizes of one GEMM call, read from its operator's tensor types (the traced sizes of a
/// symbolic operator; concrete sizes after specialization).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmDims {
    /// The product of the batch dimensions (1 without any).
    pub batch: u64,
    pub m: u64,
    pub n: u64,
    pub k: u64,
    pub transpose_a: bool,
    pub transpose_b: bool,
    pub dtype: DType,
    /// Products summed (`Gemm.terms`, at least 1): inputs `2 * terms`, pairs shaped alike.
    pub terms: u64,
}

/// The number of products a GEMM call sums (`Gemm.terms`, 0 read as 1).
pub fn gemm_terms(g: &ir::Gemm) -> usize {
    (g.terms as usize).max(1)
}

/// The call of `dag`, when it is a library call.
pub fn call(dag: &ir::ExpressionDag) -> Option<&ir::library_call::Call> {
    dag.library_call.as_ref().and_then(|c| c.call.as_ref())
}

/// Whether `dag` is a library call (of any kind, even one this version does not know).
pub fn is_library_call(dag: &ir::ExpressionDag) -> bool {
    dag.library_call.is_some()
}

/// A short name of the call, for reports: `gemm`, `gemm(aᵀ)`, `gemm(bᵀ)`, `gemm(aᵀ, bᵀ)`.
pub fn describe(dag: &ir::ExpressionDag) -> String {
    match call(dag) {
        Some(ir::library_call::Call::Gemm(g)) => {
            let form = match (g.transpose_a, g.transpose_b) {
                (false, false) => "gemm",
                (true, false) => "gemm(aᵀ)",
                (false, true) => "gemm(bᵀ)",
                (true, true) => "gemm(aᵀ, bᵀ)",
            };
            match gemm_terms(g) {
                1 => form.into(),
                t => format!("{form} sum of {t}"),
            }
        }
        None => "an unknown library call".into(),
    }
}

fn shape_of(t: &ir::TensorType) -> &[u64] {
    &t.shape
}

/// The symbolic size of dimension `d` of `t`, if any, as `(symbol, scale, offset)`.
fn symbolic_dim(t: &ir::TensorType, d: usize) -> Option<(u32, i64, i64)> {
    t.symbolic
        .iter()
        .find(|s| s.dim as usize == d)
        .map(|s| (s.symbol, s.scale, s.offset))
}

/// Why an operator is not a valid library call (`proto/ovl.proto`'s `LibraryCall`): what is
/// wrong, with the shapes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LibraryCallError {
    /// A call of a kind this version does not know.
    #[error("a library call of a kind this version does not know")]
    UnknownKind,
    /// A call with a worker program or local tensors.
    #[error("a library call has no expressions and no local tensors")]
    HasBody,
    /// A GEMM without exactly 2 inputs per term and 1 output.
    #[error(
        "a GEMM of {terms} term(s) reads {} inputs and writes 1 output, not {inputs} and {outputs}",
        2 * *.terms
    )]
    Arity {
        /// Products summed.
        terms: usize,
        /// Inputs declared.
        inputs: usize,
        /// Outputs declared.
        outputs: usize,
    },
    /// A sum of products whose pairs are not shaped alike.
    #[error("the terms of a GEMM sum of products have operands of different types")]
    Terms,
    /// Operands and result not of one numeric dtype.
    #[error(
        "a GEMM multiplies numbers of one dtype: the operands and result are {a}, {b} and {c}"
    )]
    DTypes {
        /// The first operand's dtype name.
        a: String,
        /// The second's.
        b: String,
        /// The result's.
        c: String,
    },
    /// Shapes that do not multiply (or a workgroup other than the result's shape).
    #[error(
        "GEMM{}{} shapes {a:?} and {b:?} do not multiply into {c:?} (workgroup {workgroup:?}): \
         need [batch.., {}] and [batch.., {}] into [batch.., m, n]{}",
        if *.transpose_a { " (a transposed)" } else { "" },
        if *.transpose_b { " (b transposed)" } else { "" },
        if *.transpose_a { "k, m" } else { "m, k" },
        if *.transpose_b { "n, k" } else { "k, n" },
        if *.run_time {
            "; a dimension sized at run time in one tensor is sized otherwise in another"
        } else {
            ""
        }
    )]
    Shapes {
        /// The first operand's shape.
        a: Vec<u64>,
        /// The second's.
        b: Vec<u64>,
        /// The result's.
        c: Vec<u64>,
        /// The workgroup.
        workgroup: Vec<u64>,
        /// The first operand is read transposed.
        transpose_a: bool,
        /// The second operand is read transposed.
        transpose_b: bool,
        /// The sizes match as traced, but not as sized at run time.
        run_time: bool,
    },
}

/// Checks a library call's signature against the rules of `proto/ovl.proto` and returns its
/// sizes; the error names the shapes. Every other consumer relies on a validated operator.
pub fn gemm_dims(dag: &ir::ExpressionDag) -> Result<GemmDims, LibraryCallError> {
    use LibraryCallError as E;
    let g = match call(dag) {
        Some(ir::library_call::Call::Gemm(g)) => g,
        None => return Err(E::UnknownKind),
    };
    if !dag.expressions.is_empty() || !dag.locals.is_empty() {
        return Err(E::HasBody);
    }
    let terms = gemm_terms(g);
    if dag.inputs.len() != 2 * terms || dag.outputs.len() != 1 {
        return Err(E::Arity {
            terms,
            inputs: dag.inputs.len(),
            outputs: dag.outputs.len(),
        });
    }
    let (a, b, c) = (&dag.inputs[0], &dag.inputs[1], &dag.outputs[0]);
    let dtypes = || E::DTypes {
        a: crate::names::dtype_name(a.dtype),
        b: crate::names::dtype_name(b.dtype),
        c: crate::names::dtype_name(c.dtype),
    };
    let dtype = DType::from_ir(a.dtype).ok_or_else(dtypes)?;
    if dtype == DType::Bool || b.dtype != a.dtype || c.dtype != a.dtype {
        return Err(dtypes());
    }
    let (sa, sb, sc) = (shape_of(a), shape_of(b), shape_of(c));
    let r = sa.len();
    let mismatch = |run_time: bool| E::Shapes {
        a: sa.to_vec(),
        b: sb.to_vec(),
        c: sc.to_vec(),
        workgroup: dag.workgroup_shape.clone(),
        transpose_a: g.transpose_a,
        transpose_b: g.transpose_b,
        run_time,
    };
    if r < 2 || sb.len() != r || sc.len() != r || sa[..r - 2] != sb[..r - 2] {
        return Err(mismatch(false));
    }
    // Every later pair: the first pair's types (shapes, run-time sizes, dtype).
    if dag.inputs[2..]
        .chunks(2)
        .any(|pair| pair[0] != *a || pair[1] != *b)
    {
        return Err(E::Terms);
    }
    let (m, ka) = if g.transpose_a {
        (sa[r - 1], sa[r - 2])
    } else {
        (sa[r - 2], sa[r - 1])
    };
    let (kb, n) = if g.transpose_b {
        (sb[r - 1], sb[r - 2])
    } else {
        (sb[r - 2], sb[r - 1])
    };
    let expected_c: Vec<u64> = sa[..r - 2].iter().copied().chain([m, n]).collect();
    if ka != kb || sc != expected_c.as_slice() || dag.workgroup_shape != expected_c {
        return Err(mismatch(false));
    }
    // Run-time sizes: each dimension that occurs twice is sized the same way in both places.
    let (ia_m, ia_k) = if g.transpose_a {
        (r - 1, r - 2)
    } else {
        (r - 2, r - 1)
    };
    let (ib_k, ib_n) = if g.transpose_b {
        (r - 1, r - 2)
    } else {
        (r - 2, r - 1)
    };
    let wg = ir::TensorType {
        dtype: c.dtype,
        shape: dag.workgroup_shape.clone(),
        symbolic: dag.symbolic_workgroup.clone(),
    };
    let mut same = vec![(a, ia_k, b, ib_k), (a, ia_m, c, r - 2), (b, ib_n, c, r - 1)];
    for d in 0..r - 2 {
        same.push((a, d, b, d));
        same.push((a, d, c, d));
    }
    for d in 0..r {
        same.push((c, d, &wg, d));
    }
    if same
        .iter()
        .any(|&(x, i, y, j)| symbolic_dim(x, i) != symbolic_dim(y, j))
    {
        return Err(mismatch(true));
    }
    let batch = sa[..r - 2].iter().try_fold(1u64, |p, &d| p.checked_mul(d));
    Ok(GemmDims {
        batch: batch.ok_or_else(|| mismatch(false))?,
        m,
        n,
        k: ka,
        transpose_a: g.transpose_a,
        transpose_b: g.transpose_b,
        dtype,
        terms: terms as u64,
    })
}

/// The operator of a GEMM call on `a` and `b` (shapes as `proto/ovl.proto` says), named `name`;
/// `Err` names the shapes when they do not multiply.
pub fn gemm_operator(
    name: &str,
    dtype: DType,
    a: &[u64],
    b: &[u64],
    transpose_a: bool,
    transpose_b: bool,
) -> Result<ir::ExpressionDag, LibraryCallError> {
    gemm_sum_operator(name, dtype, a, b, (transpose_a, transpose_b), 1)
}

/// The operator of a GEMM call summing `terms` products, each of operands shaped `a` and `b`
/// (inputs `[A_1, B_1, ..., A_terms, B_terms]`, as `proto/ovl.proto` says).
pub fn gemm_sum_operator(
    name: &str,
    dtype: DType,
    a: &[u64],
    b: &[u64],
    (transpose_a, transpose_b): (bool, bool),
    terms: usize,
) -> Result<ir::ExpressionDag, LibraryCallError> {
    let r = a.len();
    let c: Vec<u64> = if r >= 2 && b.len() == r {
        let m = if transpose_a { a[r - 1] } else { a[r - 2] };
        let n = if transpose_b { b[r - 2] } else { b[r - 1] };
        a[..r - 2].iter().copied().chain([m, n]).collect()
    } else {
        Vec::new()
    };
    let dag = ir::ExpressionDag {
        version: crate::IR_VERSION,
        name: name.into(),
        workgroup_shape: c.clone(),
        inputs: (0..terms.max(1))
            .flat_map(|_| [tensor_type(dtype, a), tensor_type(dtype, b)])
            .collect(),
        outputs: vec![tensor_type(dtype, &c)],
        library_call: Some(ir::LibraryCall {
            call: Some(ir::library_call::Call::Gemm(ir::Gemm {
                transpose_a,
                transpose_b,
                terms: if terms > 1 { terms as u32 } else { 0 },
            })),
        }),
        ..Default::default()
    };
    gemm_dims(&dag)?;
    Ok(dag)
}

/// An `i64` expression of dimension `d` of `t`: a constant, or the symbol's value scaled and
/// offset where the size is given at run time.
fn size_expr(b: &mut Builder, t: &ir::TensorType, d: usize) -> u32 {
    match symbolic_dim(t, d) {
        None => b.i64(t.shape[d] as i64),
        Some((symbol, scale, offset)) => {
            let s = b.raw(ir::Expression {
                code: Op::Symbol as i32,
                dtype: DType::I64.to_ir() as i32,
                axis: symbol,
                ..Default::default()
            });
            let scale = b.i64(scale);
            let scaled = b.op(Op::Mul, &[s, scale]);
            let offset = b.i64(offset);
            b.op(Op::Add, &[scaled, offset])
        }
    }
}

/// The reference program of a library call: what it computes, as a worker program (one worker
/// per element of C: a sequential sum over `t` from 0, `op(A)[.., i, t] * op(B)[.., t, j]`
/// added in order). An operator that is not a library call, or whose call does not fit its
/// tensors (which `validate` reports), is returned as it is.
pub fn expand(dag: &ir::ExpressionDag) -> Cow<'_, ir::ExpressionDag> {
    let Some(ir::library_call::Call::Gemm(g)) = call(dag) else {
        return Cow::Borrowed(dag);
    };
    if gemm_dims(dag).is_err() {
        // Not a valid call: left as it is, for `validate` to report.
        return Cow::Borrowed(dag);
    }
    let mut b = Builder {
        dag: ir::ExpressionDag {
            library_call: None,
            expressions: Vec::new(),
            ..dag.clone()
        },
    };
    let a_type = dag.inputs[0].clone();
    let r = a_type.shape.len();
    let dtype = DType::from_ir(a_type.dtype).unwrap_or(DType::F32);
    // A half dtype accumulates in f32 and rounds once, at the write (`proto/ovl.proto`).
    let acc_dtype = dtype.compute();
    let pos: Vec<u32> = (0..r as u32).map(|axis| b.position(axis)).collect();
    let zero = b.constant(
        acc_dtype,
        if dtype.is_float() {
            Literal::Float(0.0)
        } else {
            Literal::Int(0)
        },
    );
    let acc = b.var(zero);
    for term in 0..gemm_terms(g) as u32 {
        let start = b.i64(0);
        let k = size_expr(&mut b, &a_type, if g.transpose_a { r - 2 } else { r - 1 });
        let step = b.i64(1);
        let t = b.range(start, k, step);
        let (i, j) = (pos[r - 2], pos[r - 1]);
        let batch = &pos[..r - 2];
        let a_at: Vec<u32> = batch
            .iter()
            .copied()
            .chain(if g.transpose_a { [t, i] } else { [i, t] })
            .collect();
        let b_at: Vec<u32> = batch
            .iter()
            .copied()
            .chain(if g.transpose_b { [j, t] } else { [t, j] })
            .collect();
        let mut x = b.read(IN, 2 * term, &a_at);
        let mut y = b.read(IN, 2 * term + 1, &b_at);
        if acc_dtype != dtype {
            x = b.cast(x, acc_dtype);
            y = b.cast(y, acc_dtype);
        }
        let product = b.op(Op::Mul, &[x, y]);
        let sum = b.op(Op::Add, &[acc, product]);
        b.assign(acc, sum);
        b.end_range();
    }
    let result = if acc_dtype != dtype {
        b.cast(acc, dtype)
    } else {
        acc
    };
    b.write(OUT, 0, &pos, result);
    Cow::Owned(b.build())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_are_checked_and_named() {
        let ok = gemm_operator("mm", DType::F32, &[3, 5], &[5, 7], false, false).unwrap();
        assert_eq!(ok.workgroup_shape, vec![3, 7]);
        let t = gemm_operator("mm", DType::F64, &[2, 5, 3], &[2, 7, 5], true, true).unwrap();
        assert_eq!(t.outputs[0].shape, vec![2, 3, 7]);
        let bad = gemm_operator("mm", DType::F32, &[3, 5], &[4, 7], false, false).unwrap_err();
        assert!(
            matches!(&bad, LibraryCallError::Shapes { a, b, .. } if *a == [3, 5] && *b == [4, 7]),
            "{bad}"
        );
        assert!(bad.to_string().contains("[3, 5] and [4, 7]"), "{bad}");
        let bad = gemm_operator("mm", DType::F32, &[5], &[5, 7], false, false).unwrap_err();
        assert!(bad.to_string().contains("[5]"), "{bad}");
        let bad = gemm_operator("mm", DType::F32, &[2, 3, 5], &[3, 5, 7], false, false);
        assert!(bad.is_err());
        let bad = gemm_operator("mm", DType::Bool, &[3, 5], &[5, 7], false, false).unwrap_err();
        assert!(matches!(bad, LibraryCallError::DTypes { .. }), "{bad}");
        assert!(bad.to_string().contains("bool"), "{bad}");
    }

    #[test]
    fn a_sum_of_products_has_two_inputs_per_term_shaped_alike() {
        let dag = gemm_sum_operator("mm", DType::F32, &[4, 3], &[4, 5], (true, false), 3).unwrap();
        assert_eq!(dag.inputs.len(), 6);
        let dims = gemm_dims(&dag).unwrap();
        assert_eq!((dims.m, dims.n, dims.k, dims.terms), (3, 5, 4, 3));
        assert_eq!(describe(&dag), "gemm(aᵀ) sum of 3");
        crate::validate::validate(&expand(&dag)).unwrap();
        let mut odd = dag.clone();
        odd.inputs[4] = tensor_type(DType::F32, &[2, 3]);
        assert_eq!(gemm_dims(&odd), Err(LibraryCallError::Terms));
        let mut short = dag;
        short.inputs.pop();
        let err = gemm_dims(&short).unwrap_err();
        assert!(
            err.to_string().contains("3 term(s) reads 6 inputs"),
            "{err}"
        );
    }

    #[test]
    fn the_reference_program_validates() {
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let a = if ta { [2, 0, 3] } else { [2, 3, 0] };
            let b = if tb { [2, 4, 0] } else { [2, 0, 4] };
            let dag = gemm_operator("mm", DType::I32, &a, &b, ta, tb).unwrap();
            crate::validate::validate(&dag).unwrap();
            let body = expand(&dag);
            assert!(body.library_call.is_none());
            crate::validate::validate(&body).unwrap();
        }
    }

    #[test]
    fn batching_keeps_a_call_over_batched_operands_and_expands_it_otherwise() {
        let dag = gemm_operator("mm", DType::F32, &[3, 5], &[7, 5], false, true).unwrap();
        let both = crate::batch::batch_operator(&dag, &[true, true], 4).unwrap();
        assert_eq!(gemm_dims(&both).unwrap().batch, 4);
        assert_eq!(both.outputs[0].shape, vec![4, 3, 7]);
        let shared = crate::batch::batch_operator(&dag, &[true, false], 4).unwrap();
        assert!(!is_library_call(&shared) && !shared.expressions.is_empty());
        crate::validate::validate(&shared).unwrap();
    }
}

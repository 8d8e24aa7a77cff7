//! Matrix products on handles: [`gemm`] records a library call (`proto/ovl.proto`, "Library
//! calls"; `ovl_ir::library`), which the CPU runs through a tuned GEMM and fusion never merges.
//! Its gradient is two more calls, with transposed operands instead of transposed copies.

use crate::builtin_gradient::set_builtin_gradient_keyed;
use crate::error::TraceError;
use crate::host::Scalar;
use crate::lazy::{GradientCall, Lazy, LazyTensor, Node, OperatorNode};
use crate::DType;
use std::panic::Location;
use std::sync::Arc;

/// The operator name of a matrix product in reports and messages.
const NAME: &str = "matmul";

/// `op(a) · op(b)`, where `op` transposes the last two axes when asked: `a` is `[batch.., m, k]`
/// (or `[batch.., k, m]` with `transpose_a`), `b` is `[batch.., k, n]` (or `[batch.., n, k]`
/// with `transpose_b`), the result `[batch.., m, n]`; the batch dimensions (any number, possibly
/// none) are equal in both. Each element is the sum of `k` products (`k = 0` gives zeros; see
/// `proto/ovl.proto` for the order and for what a library may reorder). Shapes that do not
/// multiply, ranks below 2 and `bool` operands are an error of `evaluate` naming the shapes and
/// the caller's line. Gradients: `dy · op(b)ᵀ` and `op(a)ᵀ · dy`, as calls with transposed
/// operands.
#[track_caller]
pub fn gemm<T: Scalar>(a: &Lazy<T>, b: &Lazy<T>, transpose_a: bool, transpose_b: bool) -> Lazy<T> {
    gemm_at(a, b, transpose_a, transpose_b, Location::caller())
}

fn gemm_at<T: Scalar>(
    a: &Lazy<T>,
    b: &Lazy<T>,
    transpose_a: bool,
    transpose_b: bool,
    at: &'static Location<'static>,
) -> Lazy<T> {
    let (sa, sb) = (a.inner.shape.clone(), b.inner.shape.clone());
    let wide = |s: &[usize]| s.iter().map(|&d| d as u64).collect::<Vec<u64>>();
    let built = if T::DTYPE == DType::Bool {
        Err("a matrix product multiplies numbers, not bool".to_string())
    } else {
        ovl_ir::library::gemm_operator(
            NAME,
            T::DTYPE,
            &wide(&sa),
            &wide(&sb),
            transpose_a,
            transpose_b,
        )
        .map_err(|e| e.to_string())
    };
    let source = Some(crate::ir::SourceLocation {
        file: at.file().to_string(),
        line: at.line(),
        column: at.column(),
    });
    let (dag, error) = match built {
        Ok(dag) => (dag, None),
        Err(message) => {
            // A placeholder operator that runs nothing: `evaluate` reports the error first.
            let shape = guess_shape(&sa, &sb, transpose_a, transpose_b);
            let dag = crate::ir::ExpressionDag {
                version: crate::IR_VERSION,
                name: NAME.into(),
                workgroup_shape: wide(&shape),
                inputs: vec![
                    ovl_ir::builder::tensor_type(T::DTYPE, &wide(&sa)),
                    ovl_ir::builder::tensor_type(T::DTYPE, &wide(&sb)),
                ],
                outputs: vec![ovl_ir::builder::tensor_type(T::DTYPE, &wide(&shape))],
                ..Default::default()
            };
            let error = TraceError {
                operator: NAME.into(),
                operator_file: at.file().to_string(),
                operator_line: at.line(),
                file: at.file().to_string(),
                line: at.line(),
                column: at.column(),
                message: format!("`{NAME}`: {message}"),
            };
            (dag, Some(Arc::new(error)))
        }
    };
    let dag = crate::ir::ExpressionDag { source, ..dag };
    let shape: Arc<[usize]> = dag.outputs[0].shape.iter().map(|&d| d as usize).collect();
    let node = OperatorNode::new(Arc::new(dag), vec![a.inner.clone(), b.inner.clone()], error);
    let y = Lazy::from_untyped(LazyTensor {
        node: Arc::new(Node::Operator(node)),
        output: 0,
        dtype: T::DTYPE,
        shape,
    });
    let key = format!("gemm:{}:{transpose_a}:{transpose_b}", T::DTYPE.name());
    set_builtin_gradient_keyed(&y, key.as_str(), move |c: &GradientCall| {
        gradient::<T>(c, transpose_a, transpose_b, at)
    });
    y
}

/// The result's shape as far as it can be told from shapes that do not multiply.
fn guess_shape(a: &[usize], b: &[usize], transpose_a: bool, transpose_b: bool) -> Vec<usize> {
    let (ra, rb) = (a.len(), b.len());
    if ra < 2 || rb < 2 {
        return vec![1, 1];
    }
    let m = if transpose_a { a[ra - 1] } else { a[ra - 2] };
    let n = if transpose_b { b[rb - 2] } else { b[rb - 1] };
    a[..ra - 2].iter().copied().chain([m, n]).collect()
}

/// The transposes and the input pairs of `t` when it is the result of a GEMM call recorded
/// without a trace error (one product or a sum of products).
fn terms_of(t: &LazyTensor) -> Option<((bool, bool), &[LazyTensor])> {
    let Node::Operator(op) = &*t.node else {
        return None;
    };
    match ovl_ir::library::call(&op.dag) {
        Some(crate::ir::library_call::Call::Gemm(g)) if op.error.is_none() && t.output == 0 => {
            Some(((g.transpose_a, g.transpose_b), &op.inputs))
        }
        _ => None,
    }
}

/// `x + y` as one GEMM call summing the products of both, when both are results of GEMM calls
/// with the same transposes and operand shapes (`proto/ovl.proto`, `Gemm.terms`); `None`
/// otherwise. The backward pass adds a weight's gradient contributions so: for a weight used in
/// T products (`x_t W` in T steps of a recurrence), `Σ_t x_tᵀ · dz_t` becomes one product over
/// the steps instead of T products and T - 1 additions of weight-sized tensors.
pub(crate) fn merge_sum<T: Scalar>(x: &LazyTensor, y: &LazyTensor) -> Option<LazyTensor> {
    let (flags, xs) = terms_of(x)?;
    let (flags_y, ys) = terms_of(y)?;
    let alike = |a: &LazyTensor, b: &LazyTensor| a.shape == b.shape && a.dtype == b.dtype;
    if flags != flags_y
        || x.dtype != T::DTYPE
        || !alike(x, y)
        || !alike(&xs[0], &ys[0])
        || !alike(&xs[1], &ys[1])
    {
        return None;
    }
    let inputs: Vec<LazyTensor> = xs.iter().chain(ys).cloned().collect();
    let terms = inputs.len() / 2;
    let wide = |s: &[usize]| s.iter().map(|&d| d as u64).collect::<Vec<u64>>();
    let dag = ovl_ir::library::gemm_sum_operator(
        NAME,
        T::DTYPE,
        &wide(&xs[0].shape),
        &wide(&xs[1].shape),
        flags,
        terms,
    )
    .ok()?;
    let node = OperatorNode::new(Arc::new(dag), inputs, None);
    let sum = Lazy::<T>::from_untyped(LazyTensor {
        node: Arc::new(Node::Operator(node)),
        output: 0,
        dtype: T::DTYPE,
        shape: x.shape.clone(),
    });
    let key = format!(
        "gemm-sum:{}:{}:{}:{terms}",
        T::DTYPE.name(),
        flags.0,
        flags.1
    );
    let at = Location::caller();
    set_builtin_gradient_keyed(&sum, key.as_str(), move |c: &GradientCall| {
        (0..terms)
            .flat_map(|term| term_gradient::<T>(c, term, flags, at))
            .collect()
    });
    Some(sum.inner)
}

/// With `C = op(A) · op(B)`: `dA = dC · op(B)ᵀ` (or its transpose `op(B) · dCᵀ` when A was
/// transposed), `dB = op(A)ᵀ · dC` (or `dCᵀ · op(A)` when B was), each a call whose flags say
/// which operand is read transposed.
fn gradient<T: Scalar>(
    c: &GradientCall,
    transpose_a: bool,
    transpose_b: bool,
    at: &'static Location<'static>,
) -> Vec<Option<LazyTensor>> {
    term_gradient::<T>(c, 0, (transpose_a, transpose_b), at).to_vec()
}

/// The gradients of the operands of product `term` of a call (inputs `2 term` and `2 term + 1`),
/// as [`gradient`] says.
fn term_gradient<T: Scalar>(
    c: &GradientCall,
    term: usize,
    (transpose_a, transpose_b): (bool, bool),
    at: &'static Location<'static>,
) -> [Option<LazyTensor>; 2] {
    let (a, b) = (c.input::<T>(2 * term), c.input::<T>(2 * term + 1));
    let dc = c.output_grad::<T>(0);
    let da = if transpose_a {
        gemm_at(&b, &dc, transpose_b, true, at)
    } else {
        gemm_at(&dc, &b, false, !transpose_b, at)
    };
    let db = if transpose_b {
        gemm_at(&dc, &a, true, transpose_a, at)
    } else {
        gemm_at(&a, &dc, !transpose_a, false, at)
    };
    [Some(da.into_untyped()), Some(db.into_untyped())]
}

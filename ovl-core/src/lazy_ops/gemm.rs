//! Matrix products on handles: [`gemm`] records a library call (`proto/ovl.proto`, "Library
//! calls"; `ovl_ir::library`), which the CPU runs through a tuned GEMM and fusion never merges.
//! Its gradient is two more calls, with transposed operands instead of transposed copies.

use crate::autodiff::set_builtin_gradient_keyed;
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

/// With `C = op(A) · op(B)`: `dA = dC · op(B)ᵀ` (or its transpose `op(B) · dCᵀ` when A was
/// transposed), `dB = op(A)ᵀ · dC` (or `dCᵀ · op(A)` when B was), each a call whose flags say
/// which operand is read transposed.
fn gradient<T: Scalar>(
    c: &GradientCall,
    transpose_a: bool,
    transpose_b: bool,
    at: &'static Location<'static>,
) -> Vec<Option<LazyTensor>> {
    let (a, b, dc) = (c.input::<T>(0), c.input::<T>(1), c.output_grad::<T>(0));
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
    vec![Some(da.into_untyped()), Some(db.into_untyped())]
}

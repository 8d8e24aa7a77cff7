//! The gradients of arithmetic on handles (`&a + &b`, `a * 2.0`, `-a`, ...), so that
//! [`crate::autodiff::backward`] runs through it as through `ovl_stdlib`'s functions, which are
//! this same arithmetic. Each gradient is itself arithmetic on handles (so it has a gradient
//! too), and a gradient flowing into a broadcast operand is summed over the broadcast axes by
//! [`sum_to`].

use super::{elementwise, Operand};
use crate::dtype::{DType, Literal};
use crate::host::Scalar;
use crate::ir::{Op, TensorKind};
use crate::lazy::{GradientCall, Lazy, LazyTensor, Node, OperatorNode};
use ovl_ir::builder::Builder;
use ovl_ir::ops::Combiner;
use std::panic::Location;
use std::sync::Arc;

/// Attaches the gradient of `y = op(operands)` (an arithmetic `op`: add, sub, mul, div, mod,
/// neg) to `y`. `pattern` has one entry per operand: its literal for a scalar, `None` for a
/// tensor (the call's inputs, in order).
pub(super) fn attach<T: Scalar>(
    y: &Lazy<T>,
    op: Op,
    pattern: Vec<Option<Literal>>,
    at: &'static Location<'static>,
) {
    if !matches!(
        op,
        Op::Add | Op::Sub | Op::Mul | Op::Div | Op::Mod | Op::Neg
    ) {
        return;
    }
    // What the closure captures: the op and the literals (a float's bits exactly).
    let key = format!("{}:{op:?}:{pattern:?}", T::DTYPE.name());
    crate::builtin_gradient::set_builtin_gradient_keyed(
        y,
        key.as_str(),
        move |c: &GradientCall| gradient::<T>(c, op, &pattern, at),
    );
}

/// One elementwise operator of the gradient, at the forward call's line.
fn ew<T: Scalar>(op: Op, operands: Vec<Operand>, at: &'static Location<'static>) -> Lazy<T> {
    let name = ovl_ir::ops::info(op).map_or("op", |r| r.name);
    elementwise::<T, T>(name, op, operands, at)
}

fn tensor<T: Scalar>(x: &Lazy<T>) -> Operand {
    Operand::Tensor(x.inner.clone())
}

fn gradient<T: Scalar>(
    c: &GradientCall,
    op: Op,
    pattern: &[Option<Literal>],
    at: &'static Location<'static>,
) -> Vec<Option<LazyTensor>> {
    let g = c.output_grad::<T>(0);
    // The operands as the forward call saw them.
    let mut next = 0;
    let operands: Vec<Operand> = pattern
        .iter()
        .map(|p| match p {
            Some(lit) => Operand::Scalar(*lit),
            None => {
                next += 1;
                tensor(&c.input::<T>(next - 1))
            }
        })
        .collect();
    let copy = |o: &Operand| match o {
        Operand::Tensor(t) => Operand::Tensor(t.clone()),
        Operand::Scalar(l) => Operand::Scalar(*l),
    };
    let neg = |x: &Lazy<T>| ew::<T>(Op::Neg, vec![tensor(x)], at);
    let times = |x: &Lazy<T>, o: &Operand| ew::<T>(Op::Mul, vec![tensor(x), copy(o)], at);
    let over = |x: &Lazy<T>, o: &Operand| ew::<T>(Op::Div, vec![tensor(x), copy(o)], at);
    let mut grads = Vec::new();
    for (j, p) in pattern.iter().enumerate() {
        if p.is_some() {
            continue;
        }
        let d: Option<Lazy<T>> = match (op, j) {
            (Op::Add, _) | (Op::Sub | Op::Mod, 0) => Some(g.clone()),
            (Op::Sub | Op::Neg, _) => Some(neg(&g)),
            (Op::Mod, _) => None,
            (Op::Mul, _) => Some(times(&g, &operands[1 - j])),
            (Op::Div, 0) => Some(over(&g, &operands[1])),
            // d(a / b)/db = -g * a / b².
            (Op::Div, _) => {
                let b = &operands[1];
                let squared = ew::<T>(Op::Mul, vec![copy(b), copy(b)], at);
                Some(neg(&over(&times(&g, &operands[0]), &tensor(&squared))))
            }
            _ => None,
        };
        let Operand::Tensor(input) = &operands[j] else {
            continue;
        };
        grads.push(d.map(|d| sum_to(d, &input.shape, at).into_untyped()));
    }
    grads
}

/// `g` summed over the axes along which a tensor of `shape` was broadcast to `g`'s shape
/// (numpy's rule, right-aligned): the gradient of a broadcast operand. One operator, a worker
/// per element of the result, with an accumulator over the broadcast elements in row-major
/// order; `g` itself when nothing was broadcast.
pub(crate) fn sum_to<T: Scalar>(
    g: Lazy<T>,
    shape: &[usize],
    at: &'static Location<'static>,
) -> Lazy<T> {
    let from: Vec<u64> = g.shape().iter().map(|&d| d as u64).collect();
    let to: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
    if from == to || T::DTYPE == DType::Bool {
        return g;
    }
    let mut dag = sum_to_dag(T::DTYPE, T::default().to_literal(), &from, &to);
    dag.source = Some(crate::ir::SourceLocation {
        file: at.file().to_string(),
        line: at.line(),
        column: at.column(),
    });
    let dag = Arc::new(dag);
    let key = crate::lazy::operator_key(&dag);
    let node = Arc::new(Node::Operator(OperatorNode::with_key(
        dag,
        key,
        vec![g.inner.clone()],
        None,
    )));
    Lazy::from_untyped(LazyTensor {
        node,
        output: 0,
        dtype: T::DTYPE,
        shape: shape.into(),
    })
}

/// The operator of [`sum_to`] from shape `from` to shape `to` (no source location); `zero` is the
/// dtype's 0.
fn sum_to_dag(dtype: DType, zero: Literal, from: &[u64], to: &[u64]) -> crate::ir::ExpressionDag {
    let off = from.len().saturating_sub(to.len());
    // The axes of `g` that are summed, with their strides in the flattened loop.
    let summed: Vec<usize> = (0..from.len())
        .filter(|&k| k < off || (to[k - off] == 1 && from[k] != 1))
        .collect();
    let count: u64 = summed.iter().map(|&k| from[k]).product();
    let workgroup = if to.is_empty() { vec![1] } else { to.to_vec() };
    let mut b = Builder::new("sum_to", &workgroup);
    b.input(dtype, from);
    b.output(dtype, to);
    let position: Vec<u32> = (0..to.len() as u32).map(|a| b.position(a)).collect();
    let zero = b.constant(dtype, zero);
    let acc = b.accumulator(Combiner::Sum, zero);
    let (start, end, one) = (b.i64(0), b.i64(count as i64), b.i64(1));
    let t = b.range(start, end, one);
    // Summed axis `k` is `(t / stride) % n`, without the division where the stride is 1 (the
    // innermost summed axis) and without the remainder where `t / stride < n` always (the
    // outermost): one summed axis reads at `t` itself, so that fusion and the C++ compiler see
    // a contiguous walk (with `(t / 1) % n` a fused softmax gradient stayed scalar and
    // recomputed its `exp`: the reuse of a loop's values matches indices exactly).
    let mut index = Vec::with_capacity(from.len());
    let mut stride = count;
    for k in 0..from.len() {
        if summed.contains(&k) {
            let outermost = stride == count;
            stride /= from[k].max(1);
            let q = if stride == 1 {
                t
            } else {
                let s = b.i64(stride as i64);
                b.op(Op::Div, &[t, s])
            };
            index.push(if outermost {
                q
            } else {
                let n = b.i64(from[k] as i64);
                b.op(Op::Mod, &[q, n])
            });
        } else {
            index.push(position[k - off]);
        }
    }
    let v = b.read(TensorKind::Input, 0, &index);
    b.accumulate(acc, v);
    b.end_range();
    b.write(TensorKind::Output, 0, &position, acc);
    let mut dag = b.build();
    dag.source = None;
    dag
}

/// `x + y` as one [`sum_to`] of the sum of what each reduces, when both are [`sum_to`] results
/// from one shape to one shape; `None` otherwise. The backward pass adds a broadcast operand's
/// gradient contributions so: for a bias added in T steps of a recurrence, `Σ_t sum_to(dz_t)`
/// becomes `sum_to(Σ_t dz_t)`: elementwise additions that fuse into the one reduction, where T
/// reductions and their additions fused into one kernel of T loops (142 KB of C++ at T = 35,
/// 1.3 s to compile).
pub(crate) fn merge_sum_to<T: Scalar>(x: &LazyTensor, y: &LazyTensor) -> Option<LazyTensor> {
    let gx = reduced_by_sum_to::<T>(x)?;
    let gy = reduced_by_sum_to::<T>(y)?;
    if x.dtype != T::DTYPE || y.dtype != T::DTYPE || x.shape != y.shape || gx.shape != gy.shape {
        return None;
    }
    let total = &Lazy::<T>::from_untyped(gx) + &Lazy::<T>::from_untyped(gy);
    Some(sum_to(total, &x.shape, Location::caller()).into_untyped())
}

/// What `t` reduces when it is the result of [`sum_to`] (its operator is the one `sum_to` makes
/// for those shapes, whatever its source location).
fn reduced_by_sum_to<T: Scalar>(t: &LazyTensor) -> Option<LazyTensor> {
    let Node::Operator(op) = &*t.node else {
        return None;
    };
    let [g] = &op.inputs[..] else {
        return None;
    };
    if op.error.is_some() || t.output != 0 || op.dag.name != "sum_to" {
        return None;
    }
    let wide = |s: &[usize]| s.iter().map(|&d| d as u64).collect::<Vec<u64>>();
    let mut dag = (*op.dag).clone();
    dag.source = None;
    let made = sum_to_dag(
        T::DTYPE,
        T::default().to_literal(),
        &wide(&g.shape),
        &wide(&t.shape),
    );
    (dag == made).then(|| g.clone())
}

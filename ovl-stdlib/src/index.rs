//! Trace-time helpers shared by the operators: shapes, broadcasting and rank-generic indices.
//! They run while an operator is traced (plain Rust, no staged control flow).

use ovl::prelude::*;

/// The workgroup for an output of `shape`: one worker per element, one worker for a scalar.
pub(crate) fn workers(shape: &[usize]) -> Position {
    if shape.is_empty() {
        position_in([1])
    } else {
        position_in(shape)
    }
}

/// The worker's own element in a tensor of rank `rank` laid over the workgroup.
pub(crate) fn own(p: &Position, rank: usize) -> Vec<Idx> {
    (0..rank).map(|k| ix(p[k])).collect()
}

/// The broadcast of two shapes ([`ovl::broadcast`], the rule the arithmetic on lazy handles
/// uses too); records a trace error (and returns `a`) when they do not broadcast.
pub(crate) fn broadcast(op: &str, a: &[usize], b: &[usize]) -> Vec<usize> {
    match broadcast_shapes(a, b) {
        Some(s) => s,
        None => {
            trace_error(ovl::broadcast::mismatch(op, a, b));
            a.to_vec()
        }
    }
}

pub use ovl::broadcast::broadcast_shapes;

/// The element of a tensor of `shape` that the worker at `p` reads when `shape` broadcasts to
/// `out` ([`ovl::broadcast::broadcast_axes`]: leading dimensions are added, size-1 dimensions
/// repeat).
pub(crate) fn broadcast_index(p: &Position, shape: &[usize], out: &[usize]) -> Vec<Idx> {
    ovl::broadcast::broadcast_axes(shape, out)
        .into_iter()
        .map(|axis| match axis {
            Some(a) => ix(p[a]),
            None => ix(0usize),
        })
        .collect()
}

/// `axis` if it is an axis of a tensor of rank `rank`; otherwise records a trace error.
pub(crate) fn checked_axis(op: &str, axis: usize, shape: &[usize]) -> usize {
    if axis < shape.len() {
        axis
    } else {
        let what_to_do = match shape.len() {
            0 => "a 0-d tensor has no axis: `reshape` it to [1] first".to_string(),
            r => format!("pass an axis in 0..{r}"),
        };
        trace_error(format!(
            "`{op}`: axis {axis} is out of range for a tensor of shape {shape:?} (rank {}): \
             {what_to_do}",
            shape.len()
        ));
        0
    }
}

/// `shape` without `axis`.
pub(crate) fn without(shape: &[usize], axis: usize) -> Vec<usize> {
    let mut s = shape.to_vec();
    if axis < s.len() {
        s.remove(axis);
    }
    s
}

/// `shape` with `n` inserted at `axis`.
pub(crate) fn with(shape: &[usize], axis: usize, n: usize) -> Vec<usize> {
    let mut s = shape.to_vec();
    s.insert(axis.min(s.len()), n);
    s
}

/// The element of a tensor of rank `rank` at the worker's position (over the other axes) and at
/// index `k` along `axis`.
pub(crate) fn along(p: &Position, rank: usize, axis: usize, k: impl IndexPart) -> Vec<Idx> {
    let mut k = Some(ix(k));
    (0..rank)
        .map(|d| match d.cmp(&axis) {
            std::cmp::Ordering::Less => ix(p[d]),
            std::cmp::Ordering::Equal => k.take().unwrap_or_else(|| ix(0usize)),
            std::cmp::Ordering::Greater => ix(p[d - 1]),
        })
        .collect()
}

/// The worker's own element shifted by `offset` along `axis`.
pub(crate) fn shifted(p: &Position, rank: usize, axis: usize, offset: usize) -> Vec<Idx> {
    (0..rank)
        .map(|d| {
            if d == axis {
                ix(p[d] + offset as i64)
            } else {
                ix(p[d])
            }
        })
        .collect()
}

/// A constant of type `T` from an `f64`.
pub(crate) fn lit<T: Scalar>(v: f64) -> Expr<T> {
    constant(v).cast::<T>()
}

/// `perm` if it permutes the axes of `shape`; otherwise records a trace error and returns the
/// identity.
pub(crate) fn checked_perm(perm: &[usize], shape: &[usize]) -> Vec<usize> {
    let mut sorted = perm.to_vec();
    sorted.sort_unstable();
    if sorted == (0..shape.len()).collect::<Vec<_>>() {
        perm.to_vec()
    } else {
        trace_error(format!(
            "`transpose`: {perm:?} is not a permutation of the {} axes of a {shape:?} tensor",
            shape.len()
        ));
        (0..shape.len()).collect()
    }
}

/// The shape whose axis `i` is axis `perm[i]` of `shape`.
pub(crate) fn permuted(shape: &[usize], perm: &[usize]) -> Vec<usize> {
    perm.iter().map(|&a| shape[a]).collect()
}

/// The input element of a transpose by `perm` at the worker's output position.
pub(crate) fn unpermuted_index(p: &Position, perm: &[usize]) -> Vec<Idx> {
    let mut idx: Vec<Idx> = perm.iter().map(|_| ix(0usize)).collect();
    for (out_axis, &in_axis) in perm.iter().enumerate() {
        idx[in_axis] = ix(p[out_axis]);
    }
    idx
}

/// The worker's position without `axis` (for reading a tensor that lacks that axis).
pub(crate) fn skipping(p: &Position, rank: usize, axis: usize) -> Vec<Idx> {
    (0..rank).filter(|&d| d != axis).map(|d| ix(p[d])).collect()
}

/// `n` new outputs of `shape`.
pub(crate) fn outputs_of<T: Scalar>(n: usize, shape: &[usize]) -> Vec<Tensor<T>> {
    (0..n).map(|_| output(shape)).collect()
}

/// The shape all `xs` share; records a trace error when they differ or there are none.
pub(crate) fn common_shape<T: Scalar>(op: &str, xs: &[Tensor<T>]) -> Vec<usize> {
    let Some(first) = xs.first() else {
        trace_error(format!("`{op}` of no tensors: pass at least one"));
        return vec![1];
    };
    if let Some(x) = xs.iter().find(|x| x.shape() != first.shape()) {
        trace_error(format!(
            "`{op}`: pieces of shapes {:?} and {:?}; all pieces must have the same shape",
            first.shape(),
            x.shape()
        ));
    }
    first.shape().to_vec()
}

/// The shape of a reduction of `shape` along `axis`: the axis removed, or kept with size 1.
pub(crate) fn reduced_shape(shape: &[usize], axis: usize, keep: bool) -> Vec<usize> {
    let reduced = without(shape, axis);
    if keep {
        with(&reduced, axis, 1)
    } else {
        reduced
    }
}

/// Element `k` along `axis` of the row of a tensor of rank `rank` that the worker at `p` of a
/// reduction's workgroup reduces (the workgroup is the reduced shape: with the axis kept as size
/// 1 when `keep`, without it otherwise).
pub(crate) fn row_element(
    p: &Position,
    rank: usize,
    axis: usize,
    keep: bool,
    k: impl IndexPart,
) -> Vec<Idx> {
    if !keep {
        return along(p, rank, axis, k);
    }
    let mut k = Some(ix(k));
    (0..rank)
        .map(|d| {
            if d == axis {
                k.take().unwrap_or_else(|| ix(0usize))
            } else {
                ix(p[d])
            }
        })
        .collect()
}

/// The element of a reduction's result (of rank `rank - 1`, or `rank` when `keep`) that belongs
/// to the worker at `p` of an elementwise operator over the reduced tensor of rank `rank`: the
/// row statistic read back at the broadcast index.
pub(crate) fn row_of(p: &Position, rank: usize, axis: usize, keep: bool) -> Vec<Idx> {
    if keep {
        (0..rank)
            .map(|d| if d == axis { ix(0usize) } else { ix(p[d]) })
            .collect()
    } else {
        skipping(p, rank, axis)
    }
}

/// The number of elements of `shape` (1 for a 0-d shape), `None` on overflow.
pub(crate) fn element_count(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
}

/// The element of a tensor of shape `from` that the worker at `p` of a reshape to `to` reads:
/// the same row-major flattened position. Leading and trailing axes that the two shapes share
/// are read directly; only the axes in between go through a flattened index (a multiply-add per
/// output axis, a division and a remainder per input axis, none for axes of size 1).
pub(crate) fn reshaped_index(p: &Position, from: &[usize], to: &[usize]) -> Vec<Idx> {
    let lead = from.iter().zip(to).take_while(|(a, b)| a == b).count();
    let tail = from[lead..]
        .iter()
        .rev()
        .zip(to[lead..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let (from_mid, to_mid) = (&from[lead..from.len() - tail], &to[lead..to.len() - tail]);
    // The flattened position within the middle axes of `to` (row-major).
    let mut flat: Option<Expr<i64>> = None;
    let mut stride = 1i64;
    for (i, &d) in to_mid.iter().enumerate().rev() {
        if d != 1 {
            let term = p[lead + i] * stride;
            flat = Some(match flat {
                Some(f) => term + f,
                None => term,
            });
        }
        stride = stride.saturating_mul(d as i64);
    }
    let mut index: Vec<Idx> = (0..lead).map(|d| ix(p[d])).collect();
    let mut stride = 1i64;
    let mut mid = Vec::with_capacity(from_mid.len());
    for (j, &d) in from_mid.iter().enumerate().rev() {
        mid.push(match flat {
            Some(f) if d != 1 => {
                let q = if stride == 1 { f } else { f / stride };
                // The first axis needs no remainder: the flattened position is in range.
                ix(if j == 0 { q } else { q % d as i64 })
            }
            _ => ix(0usize),
        });
        stride = stride.saturating_mul(d as i64);
    }
    index.extend(mid.into_iter().rev());
    let to_tail = to.len() - tail;
    index.extend((0..tail).map(|i| ix(p[to_tail + i])));
    index
}

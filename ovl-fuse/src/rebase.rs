//! Workgroups that differ only by axes of extent 1 (`[rows]` and `[rows, 1]`, the shapes of a
//! row reduction and of elementwise operators on its kept-dimension result) have the same
//! workers in the same row-major order. Rewriting an operator's positions onto the other shape
//! (a component of extent 1 is the literal 0) changes nothing it computes or how it faults, and
//! lets the two hand values over in registers or share a kernel as siblings.

use ovl_ir::ir;
use ovl_ir::typed::{Inst, Kernel};
use ovl_ir::{DType, Literal};

/// For each axis of `from`: the axis of `to` it becomes (`None` for an axis of extent 1), when
/// the two shapes list the same extents other than 1, in the same order.
pub(crate) fn axis_map(from: &[u64], to: &[u64]) -> Option<Vec<Option<usize>>> {
    let big = |s: &[u64]| s.iter().copied().filter(|&d| d != 1).collect::<Vec<_>>();
    if big(from) != big(to) {
        return None;
    }
    let mut to_axes = (0..to.len()).filter(|&k| to[k] != 1);
    Some(
        from.iter()
            .map(|&d| if d == 1 { None } else { to_axes.next() })
            .collect(),
    )
}

/// `dag` over the workgroup `to` (see [`axis_map`]); `None` when the shapes are not so related.
pub(crate) fn rebased(
    dag: &ir::ExpressionDag,
    kernel: &Kernel,
    to: &[u64],
) -> Option<ir::ExpressionDag> {
    if ovl_ir::library::is_library_call(dag) {
        // Its workgroup is its output's shape.
        return None;
    }
    let map = axis_map(&dag.workgroup_shape, to)?;
    let mut out = dag.clone();
    out.workgroup_shape = to.to_vec();
    for (e, x) in out.expressions.iter_mut().zip(&kernel.exprs) {
        let Inst::Position { axis } = x.inst else {
            continue;
        };
        match map.get(axis as usize).copied().flatten() {
            Some(k) => e.axis = k as u32,
            None => {
                *e = Inst::Const(Literal::Int(0)).encode(Some(DType::I64));
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_axes_are_dropped_and_added() {
        assert_eq!(axis_map(&[4], &[4, 1]), Some(vec![Some(0)]));
        assert_eq!(axis_map(&[4, 1], &[4]), Some(vec![Some(0), None]));
        assert_eq!(
            axis_map(&[1, 4, 5], &[4, 1, 5]),
            Some(vec![None, Some(0), Some(2)])
        );
        assert_eq!(axis_map(&[4, 5], &[5, 4]), None);
        assert_eq!(axis_map(&[4], &[4, 2]), None);
    }
}

//! The one broadcasting rule of ovl (numpy's): the arithmetic on lazy handles (`&a + &b`) and
//! `ovl_stdlib`'s elementwise operators both use these functions.
//!
//! Shapes are aligned at their last dimension; a missing leading dimension counts as 1, and
//! along each dimension the sizes must be equal or one of them 1 (which repeats).

/// The broadcast of two shapes, if they broadcast.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let rank = a.len().max(b.len());
    let dim = |s: &[usize], k: usize| {
        let offset = rank - s.len();
        if k < offset {
            1
        } else {
            s[k - offset]
        }
    };
    (0..rank)
        .map(|k| match (dim(a, k), dim(b, k)) {
            (x, y) if x == y => Some(x),
            (1, y) => Some(y),
            (x, 1) => Some(x),
            _ => None,
        })
        .collect()
}

/// How a tensor of `shape` is read when broadcast to `out` (which [`broadcast_shapes`] gave):
/// for each of its dimensions, the dimension of `out` whose position indexes it, or `None` where
/// a size-1 dimension repeats (index 0).
pub fn broadcast_axes(shape: &[usize], out: &[usize]) -> Vec<Option<usize>> {
    let offset = out.len().saturating_sub(shape.len());
    shape
        .iter()
        .enumerate()
        .map(|(k, &d)| (out.get(k + offset) == Some(&d)).then_some(k + offset))
        .collect()
}

/// The message for shapes that do not broadcast, for the operation `op`.
pub fn mismatch(op: &str, a: &[usize], b: &[usize]) -> String {
    format!(
        "`{op}`: shapes {a:?} and {b:?} do not broadcast (trailing dimensions must be equal or 1)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_and_axes() {
        assert_eq!(broadcast_shapes(&[3, 1], &[4]), Some(vec![3, 4]));
        assert_eq!(broadcast_shapes(&[], &[2, 2]), Some(vec![2, 2]));
        assert_eq!(broadcast_shapes(&[2, 0], &[1]), Some(vec![2, 0]));
        assert_eq!(broadcast_shapes(&[3], &[4]), None);
        assert_eq!(broadcast_axes(&[3, 1], &[3, 4]), vec![Some(0), None]);
        assert_eq!(broadcast_axes(&[4], &[3, 4]), vec![Some(1)]);
        assert_eq!(broadcast_axes(&[], &[3, 4]), vec![]);
    }
}

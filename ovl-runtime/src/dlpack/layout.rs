//! Where the elements of a DLPack tensor lie: the check that its strides are contiguous
//! row-major (so ovl can use the memory in place) and the element offsets of any strides (for
//! the copy into a fresh row-major tensor).

use super::error::DlpackError;

/// Whether `strides` (in elements; `None`: NULL, contiguous by definition) lay out `shape`
/// contiguously in row-major order; the error names the first axis, from the last, whose
/// stride is off. Axes of size 1 may have any stride; a tensor without elements is
/// contiguous whatever its strides.
pub(super) fn check_row_major(shape: &[usize], strides: Option<&[i64]>) -> Result<(), DlpackError> {
    let Some(strides) = strides else {
        return Ok(());
    };
    if shape.contains(&0) {
        return Ok(());
    }
    let mut expected: i64 = 1;
    for axis in (0..shape.len()).rev() {
        if shape[axis] != 1 && strides[axis] != expected {
            return Err(DlpackError::NotContiguous {
                axis,
                shape: shape.to_vec(),
                strides: strides.to_vec(),
                stride: strides[axis],
                expected,
            });
        }
        // The element count was checked to fit, so every partial product does too.
        expected = expected.saturating_mul(shape[axis] as i64);
    }
    Ok(())
}

/// Calls `f` with the element offset (in elements, from the first element) of every element
/// of `shape` under `strides`, in row-major order.
pub(super) fn for_each_offset(shape: &[usize], strides: &[i64], mut f: impl FnMut(isize)) {
    if shape.contains(&0) {
        return;
    }
    let mut index = vec![0usize; shape.len()];
    let mut offset: isize = 0;
    loop {
        f(offset);
        // Advance the odometer: the last axis fastest.
        let mut axis = shape.len();
        loop {
            if axis == 0 {
                return;
            }
            axis -= 1;
            index[axis] += 1;
            offset += strides[axis] as isize;
            if index[axis] < shape[axis] {
                break;
            }
            offset -= strides[axis] as isize * shape[axis] as isize;
            index[axis] = 0;
        }
    }
}

/// The offsets (in elements) of the first and last elements' furthest reach under
/// `strides`: the lowest and highest element offsets any element has. `None` for a tensor
/// without elements, or when an offset overflows.
pub(super) fn offset_range(shape: &[usize], strides: &[i64]) -> Option<(i64, i64)> {
    if shape.contains(&0) {
        return None;
    }
    let (mut low, mut high) = (0i64, 0i64);
    for (&n, &s) in shape.iter().zip(strides) {
        let reach = s.checked_mul(n as i64 - 1)?;
        if reach < 0 {
            low = low.checked_add(reach)?;
        } else {
            high = high.checked_add(reach)?;
        }
    }
    Some((low, high))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_major_accepts_null_unit_axes_and_empty() {
        assert!(check_row_major(&[2, 3], None).is_ok());
        assert!(check_row_major(&[2, 3], Some(&[3, 1])).is_ok());
        assert!(check_row_major(&[2, 1, 3], Some(&[3, 99, 1])).is_ok());
        assert!(check_row_major(&[1], Some(&[-5])).is_ok());
        assert!(check_row_major(&[0, 3], Some(&[7, 7])).is_ok());
        assert!(check_row_major(&[], Some(&[])).is_ok());
    }

    #[test]
    fn row_major_names_the_axis() {
        match check_row_major(&[2, 3], Some(&[1, 2])) {
            Err(DlpackError::NotContiguous {
                axis,
                stride,
                expected,
                ..
            }) => assert_eq!((axis, stride, expected), (1, 2, 1)),
            other => panic!("{other:?}"),
        }
        match check_row_major(&[2, 3], Some(&[4, 1])) {
            Err(DlpackError::NotContiguous { axis, .. }) => assert_eq!(axis, 0),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn offsets_follow_the_strides() {
        let mut seen = Vec::new();
        for_each_offset(&[2, 3], &[1, 2], |o| seen.push(o));
        assert_eq!(seen, [0, 2, 4, 1, 3, 5]);
        seen.clear();
        for_each_offset(&[3], &[-1], |o| seen.push(o));
        assert_eq!(seen, [0, -1, -2]);
        seen.clear();
        for_each_offset(&[], &[], |o| seen.push(o));
        assert_eq!(seen, [0]);
        seen.clear();
        for_each_offset(&[2, 0], &[1, 1], |o| seen.push(o));
        assert!(seen.is_empty());
        assert_eq!(offset_range(&[2, 3], &[-3, 1]), Some((-3, 2)));
    }
}

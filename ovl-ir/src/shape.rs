//! Shapes: element counts that cannot overflow. The lowest module of the crate: it imports
//! nothing else of it, so every other module may use it.

/// The number of elements of a shape, if it fits in `usize`.
pub fn element_count(shape: &[u64]) -> Option<usize> {
    shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(usize::try_from(d).ok()?))
}

/// The number of elements of a shape of any integer type, without wrapping; `None` when it
/// does not fit 64 bits.
pub fn checked_count<N: Copy + TryInto<u64>>(dims: &[N]) -> Option<u64> {
    dims.iter()
        .try_fold(1u64, |n, &d| n.checked_mul(d.try_into().ok()?))
}

//! Indices as affine maps of the worker's position, for the gradient pass: which workers read
//! an input element (to invert a read in gather form) and whether two workers may write one
//! output element.

use crate::ir::Op;
use crate::typed::{Inst, Kernel, ValueId};

/// `constant + sum(coeffs[k] * p_k) + sum(c * index of loop)` over the forward workgroup's
/// axes and the indices of enclosing counted loops.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Affine {
    /// One coefficient per workgroup axis.
    pub coeffs: Vec<i64>,
    /// The constant term.
    pub constant: i64,
    /// Coefficients of loop indices (the RANGE expression), sorted by loop, none zero.
    pub loops: Vec<(ValueId, i64)>,
}

impl Affine {
    fn constant(rank: usize, c: i64) -> Affine {
        Affine {
            coeffs: vec![0; rank],
            constant: c,
            loops: Vec::new(),
        }
    }

    fn combine(&self, other: &Affine, sign: i64) -> Option<Affine> {
        let coeffs = self
            .coeffs
            .iter()
            .zip(&other.coeffs)
            .map(|(&a, &b)| a.checked_add(b.checked_mul(sign)?))
            .collect::<Option<Vec<_>>>()?;
        let mut loops = self.loops.clone();
        for &(l, c) in &other.loops {
            let c = c.checked_mul(sign)?;
            match loops.iter_mut().find(|(m, _)| *m == l) {
                Some(slot) => slot.1 = slot.1.checked_add(c)?,
                None => loops.push((l, c)),
            }
        }
        loops.retain(|&(_, c)| c != 0);
        loops.sort_unstable();
        Some(Affine {
            coeffs,
            constant: self
                .constant
                .checked_add(other.constant.checked_mul(sign)?)?,
            loops,
        })
    }

    fn scale(&self, k: i64) -> Option<Affine> {
        let mut loops = self
            .loops
            .iter()
            .map(|&(l, c)| Some((l, c.checked_mul(k)?)))
            .collect::<Option<Vec<_>>>()?;
        loops.retain(|&(_, c)| c != 0);
        Some(Affine {
            coeffs: self
                .coeffs
                .iter()
                .map(|&a| a.checked_mul(k))
                .collect::<Option<Vec<_>>>()?,
            constant: self.constant.checked_mul(k)?,
            loops,
        })
    }

    fn is_constant(&self) -> bool {
        self.loops.is_empty() && self.coeffs.iter().all(|&c| c == 0)
    }

    /// The one axis this map depends on, with its coefficient; `None` for a constant, a map
    /// of several axes or one with a loop index.
    pub fn single_axis(&self) -> Option<(usize, i64)> {
        if !self.loops.is_empty() {
            return None;
        }
        let mut found = None;
        for (k, &a) in self.coeffs.iter().enumerate() {
            if a != 0 {
                if found.is_some() {
                    return None;
                }
                found = Some((k, a));
            }
        }
        found
    }

    /// The smallest and largest value over the workgroup `w` (`None` on overflow, for an
    /// empty workgroup or with a loop index).
    pub fn range(&self, w: &[u64]) -> Option<(i128, i128)> {
        if !self.loops.is_empty() {
            return None;
        }
        let mut lo = self.constant as i128;
        let mut hi = lo;
        for (&a, &d) in self.coeffs.iter().zip(w) {
            let far = (a as i128).checked_mul(d.checked_sub(1)? as i128)?;
            if far < 0 {
                lo += far;
            } else {
                hi += far;
            }
        }
        Some((lo, hi))
    }
}

/// The index vector of an access: one map per dimension.
pub type IndexMap = Vec<Affine>;

/// `v` as an affine map of the position, when it is one: positions, integer literals, `+`,
/// `-`, negation, products with a literal and casts between integer dtypes of at least 32 bits
/// (indices of real tensors fit them). Anything else (data, variables, divisions) is `None`.
pub fn affine_of(k: &Kernel, v: ValueId, rank: usize) -> Option<Affine> {
    let e = &k.exprs[v as usize];
    match &e.inst {
        Inst::Position { axis } => {
            let mut a = Affine::constant(rank, 0);
            *a.coeffs.get_mut(*axis as usize)? = 1;
            Some(a)
        }
        Inst::Range { .. } => {
            let mut a = Affine::constant(rank, 0);
            a.loops.push((v, 1));
            Some(a)
        }
        Inst::Const(lit) => {
            let d = e.dtype?;
            if !d.is_int() {
                return None;
            }
            let c = match lit {
                crate::Literal::Int(i) => *i,
                crate::Literal::UInt(u) => i64::try_from(*u).ok()?,
                _ => return None,
            };
            Some(Affine::constant(rank, c))
        }
        Inst::Cast { value } => {
            let from = k.exprs[*value as usize].dtype?;
            let to = e.dtype?;
            let wide = |d: crate::DType| d.is_int() && d.size() >= 4;
            if wide(from) && wide(to) {
                affine_of(k, *value, rank)
            } else {
                None
            }
        }
        Inst::Unary { op: Op::Neg, a } => affine_of(k, *a, rank)?.scale(-1),
        Inst::Binary { op, a, b } => {
            let x = affine_of(k, *a, rank)?;
            let y = affine_of(k, *b, rank)?;
            match op {
                Op::Add => x.combine(&y, 1),
                Op::Sub => x.combine(&y, -1),
                Op::Mul if y.is_constant() => x.scale(y.constant),
                Op::Mul if x.is_constant() => y.scale(x.constant),
                _ => None,
            }
        }
        _ => None,
    }
}

/// The map of an access's indices, when every index is affine.
pub fn index_map(k: &Kernel, indices: &[ValueId], rank: usize) -> Option<IndexMap> {
    indices.iter().map(|&i| affine_of(k, i, rank)).collect()
}

/// Whether two workers never share an element: each axis of extent > 1 is alone, with a
/// non-zero coefficient, in some index, and no index names a loop.
pub fn injective(map: &IndexMap, w: &[u64]) -> bool {
    map.iter().all(|a| a.loops.is_empty())
        && w.iter().enumerate().all(|(axis, &n)| {
            n <= 1
                || map
                    .iter()
                    .any(|a| matches!(a.single_axis(), Some((k, c)) if k == axis && c != 0))
        })
}

/// Whether no element is written twice by a write inside `loops` (innermost first) over the
/// workgroup `w`: each axis of extent > 1 and each of the loops is alone, with a non-zero
/// coefficient, in some index.
pub fn injective_in_loops(map: &IndexMap, w: &[u64], loops: &[ValueId]) -> bool {
    let alone = |l: ValueId| {
        map.iter().any(|a| {
            a.coeffs.iter().all(|&c| c == 0) && matches!(a.loops[..], [(m, c)] if m == l && c != 0)
        })
    };
    let named = map.iter().flat_map(|a| a.loops.iter().map(|&(l, _)| l));
    let axes = w.iter().enumerate().all(|(axis, &n)| {
        n <= 1
            || map
                .iter()
                .any(|a| matches!(a.single_axis(), Some((k, c)) if k == axis && c != 0))
    });
    axes && loops.iter().all(|&l| alone(l)) && named.into_iter().all(alone)
}

/// Whether every worker of `w` accesses an element inside `shape`.
pub fn in_bounds(map: &IndexMap, w: &[u64], shape: &[u64]) -> bool {
    map.len() == shape.len()
        && map
            .iter()
            .zip(shape)
            .all(|(a, &n)| a.range(w).is_some_and(|(lo, hi)| lo >= 0 && hi < n as i128))
}

/// Whether two maps never give one element over the workgroup: in some index both have the
/// same coefficients and their constants differ by more than that index's spread.
pub fn disjoint(x: &IndexMap, y: &IndexMap, w: &[u64]) -> bool {
    x.iter().zip(y).any(|(a, b)| {
        a.coeffs == b.coeffs
            && a.range(w)
                .is_some_and(|(lo, hi)| (a.constant as i128 - b.constant as i128).abs() > hi - lo)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(rows: &[(&[i64], i64)]) -> IndexMap {
        rows.iter()
            .map(|(c, k)| Affine {
                coeffs: c.to_vec(),
                constant: *k,
                loops: Vec::new(),
            })
            .collect()
    }

    #[test]
    fn gates_are_injective_disjoint_and_inside() {
        let w = [2, 3];
        let g0 = map(&[(&[1, 0], 0), (&[0, 1], 0)]);
        let g1 = map(&[(&[1, 0], 0), (&[0, 1], 3)]);
        assert!(injective(&g0, &w) && injective(&g1, &w));
        assert!(disjoint(&g0, &g1, &w));
        assert!(in_bounds(&g1, &w, &[2, 12]));
        assert!(!in_bounds(&g1, &w, &[2, 5]));
        // Neighbours in a stencil overlap.
        let s = map(&[(&[1, 0], 0), (&[0, 1], 1)]);
        assert!(!disjoint(&g0, &s, &w));
        // A broadcast read is not injective.
        let b = map(&[(&[0, 1], 0)]);
        assert!(!injective(&b, &w));
    }
}

//! Index patterns: the index of a read or a write as an affine map of the worker position.
//!
//! An index operand is analysed into `c + a0*p0 + a1*p1 + ...` where `pk` is component `k` of
//! the worker's position. Two accesses are compared by comparing these maps (coefficients and
//! constant), so `p0 + 1`, `1 + p0` and `(p0 + 2) - 1` are the same pattern. An index that is not
//! such a map, or that depends on anything but the position and literals (data read from a
//! tensor, a variable, a loop index, a division, a product of two position-dependent values, an
//! operation that could wrap around), is *opaque* and never matches anything.

use crate::ir::{Op, TensorKind};
use crate::typed::{Inst, Kernel, ValueId};
use crate::{DType, Literal};
use std::collections::HashMap;
use std::fmt;

/// `constant + sum(coeffs[k] * p_k)`: one index as an affine function of the worker position.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Affine {
    /// One coefficient per workgroup dimension.
    pub coeffs: Vec<i64>,
    /// The constant term.
    pub constant: i64,
}

impl Affine {
    fn constant(rank: usize, c: i64) -> Affine {
        Affine {
            coeffs: vec![0; rank],
            constant: c,
        }
    }

    fn position(rank: usize, axis: usize) -> Affine {
        let mut a = Affine::constant(rank, 0);
        a.coeffs[axis] = 1;
        a
    }

    /// Whether the map does not depend on the position.
    pub fn is_constant(&self) -> bool {
        self.coeffs.iter().all(|&c| c == 0)
    }

    /// The smallest and largest value over a workgroup of the given shape (`None` on overflow
    /// or when the shapes disagree).
    pub fn range(&self, workgroup: &[u64]) -> Option<(i128, i128)> {
        if workgroup.len() != self.coeffs.len() {
            return None;
        }
        let mut lo = self.constant as i128;
        let mut hi = lo;
        for (&a, &d) in self.coeffs.iter().zip(workgroup) {
            let far = (a as i128).checked_mul(d.checked_sub(1)? as i128)?;
            if far < 0 {
                lo = lo.checked_add(far)?;
            } else {
                hi = hi.checked_add(far)?;
            }
        }
        Some((lo, hi))
    }

    fn combine(&self, other: &Affine, sign: i64) -> Option<Affine> {
        let coeffs = self
            .coeffs
            .iter()
            .zip(&other.coeffs)
            .map(|(&a, &b)| a.checked_add(b.checked_mul(sign)?))
            .collect::<Option<Vec<_>>>()?;
        Some(Affine {
            coeffs,
            constant: self
                .constant
                .checked_add(other.constant.checked_mul(sign)?)?,
        })
    }

    fn scale(&self, k: i64) -> Option<Affine> {
        Some(Affine {
            coeffs: self
                .coeffs
                .iter()
                .map(|&a| a.checked_mul(k))
                .collect::<Option<Vec<_>>>()?,
            constant: self.constant.checked_mul(k)?,
        })
    }
}

impl fmt::Display for Affine {
    /// `p0`, `p1 + 1`, `2*p0 - p1 + 3`, `0`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (k, &a) in self.coeffs.iter().enumerate() {
            if a == 0 {
                continue;
            }
            let (sign, mag) = if a < 0 {
                ("-", a.unsigned_abs())
            } else {
                ("+", a as u64)
            };
            if first {
                if sign == "-" {
                    f.write_str("-")?;
                }
            } else {
                write!(f, " {sign} ")?;
            }
            if mag == 1 {
                write!(f, "p{k}")?;
            } else {
                write!(f, "{mag}*p{k}")?;
            }
            first = false;
        }
        if first {
            write!(f, "{}", self.constant)
        } else if self.constant > 0 {
            write!(f, " + {}", self.constant)
        } else if self.constant < 0 {
            write!(f, " - {}", self.constant.unsigned_abs())
        } else {
            Ok(())
        }
    }
}

/// The index of one tensor access as a function of the worker position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IndexPattern {
    /// One affine map per tensor dimension.
    Affine(Vec<Affine>),
    /// Not an affine function of the position; `why` says what it depends on.
    Opaque {
        /// What makes it opaque, e.g. "depends on the loop index %7".
        why: String,
    },
}

impl IndexPattern {
    /// Whether two patterns are provably the same function of the position. Opaque patterns
    /// never match, not even themselves.
    pub fn matches(&self, other: &IndexPattern) -> bool {
        match (self, other) {
            (IndexPattern::Affine(a), IndexPattern::Affine(b)) => a == b,
            _ => false,
        }
    }

    /// Whether two patterns are provably the same function of the position over `workgroup`:
    /// like [`IndexPattern::matches`], but a component of extent 1 is always 0, so its
    /// coefficients do not matter (`[p0, p1]` and `[p0, 0]` over `[4, 1]`).
    pub fn matches_over(&self, other: &IndexPattern, workgroup: &[u64]) -> bool {
        let norm = |maps: &[Affine]| -> Vec<Affine> {
            maps.iter()
                .map(|m| Affine {
                    coeffs: m
                        .coeffs
                        .iter()
                        .enumerate()
                        .map(|(k, &a)| if workgroup.get(k) == Some(&1) { 0 } else { a })
                        .collect(),
                    constant: m.constant,
                })
                .collect()
        };
        match (self.affine(), other.affine()) {
            (Some(a), Some(b)) => norm(a) == norm(b),
            _ => false,
        }
    }

    /// The affine maps, when the pattern is affine.
    pub fn affine(&self) -> Option<&[Affine]> {
        match self {
            IndexPattern::Affine(a) => Some(a),
            IndexPattern::Opaque { .. } => None,
        }
    }

    /// Whether distinct workers of `workgroup` always access distinct elements (proved by the
    /// position-dependent part having full column rank over the dimensions of extent > 1).
    pub fn is_one_to_one(&self, workgroup: &[u64]) -> bool {
        let Some(maps) = self.affine() else {
            return false;
        };
        let axes: Vec<usize> = (0..workgroup.len()).filter(|&k| workgroup[k] > 1).collect();
        let matrix: Vec<Vec<i128>> = maps
            .iter()
            .map(|m| axes.iter().map(|&k| m.coeffs[k] as i128).collect())
            .collect();
        rank(matrix, axes.len()) == Some(axes.len())
    }

    /// Whether every index stays within `shape` for every worker of `workgroup`.
    pub fn in_bounds(&self, workgroup: &[u64], shape: &[u64]) -> bool {
        let Some(maps) = self.affine() else {
            return false;
        };
        maps.len() == shape.len()
            && maps.iter().zip(shape).all(|(m, &d)| {
                m.range(workgroup)
                    .is_some_and(|(lo, hi)| lo >= 0 && hi < d as i128)
            })
    }

    /// Whether `self` and `other` differ by a constant offset only (a neighbour access).
    pub fn is_shift_of(&self, other: &IndexPattern) -> bool {
        match (self.affine(), other.affine()) {
            (Some(a), Some(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.coeffs == y.coeffs)
            }
            _ => false,
        }
    }
}

impl fmt::Display for IndexPattern {
    /// `[p0, p1 + 1]`, or `[?] (why)` for an opaque pattern.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IndexPattern::Affine(maps) => {
                f.write_str("[")?;
                for (i, m) in maps.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{m}")?;
                }
                f.write_str("]")
            }
            IndexPattern::Opaque { why } => write!(f, "[?] ({why})"),
        }
    }
}

/// The rank of an integer matrix (fraction-free elimination); `None` on overflow.
fn rank(mut m: Vec<Vec<i128>>, cols: usize) -> Option<usize> {
    let mut r = 0;
    for c in 0..cols {
        let Some(pivot) = (r..m.len()).find(|&i| m[i][c] != 0) else {
            continue;
        };
        m.swap(r, pivot);
        for i in 0..m.len() {
            if i != r && m[i][c] != 0 {
                let (a, b) = (m[r][c], m[i][c]);
                let pivot_row = m[r].clone();
                for (x, &y) in m[i].iter_mut().zip(&pivot_row) {
                    *x = x.checked_mul(a)?.checked_sub(y.checked_mul(b)?)?;
                }
                let g = m[i].iter().fold(0i128, |g, &x| gcd(g, x.abs()));
                if g > 1 {
                    m[i].iter_mut().for_each(|x| *x /= g);
                }
            }
        }
        r += 1;
    }
    Some(r)
}

fn gcd(a: i128, b: i128) -> i128 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Analyses the index operands of the accesses of one operator (its typed form), remembering
/// sub-results.
pub struct PatternAnalysis<'a> {
    kernel: &'a Kernel,
    workgroup: &'a [u64],
    memo: HashMap<u32, Result<Affine, String>>,
}

/// Deeper index expressions than this are treated as opaque (keeps the analysis bounded).
const MAX_DEPTH: usize = 256;

impl<'a> PatternAnalysis<'a> {
    /// An analysis of `kernel`, whose workgroup is `workgroup` (the operator's
    /// `workgroup_shape`: the traced sizes where a dimension is symbolic), over which an index
    /// must not wrap around its dtype.
    pub fn new(kernel: &'a Kernel, workgroup: &'a [u64]) -> Self {
        PatternAnalysis {
            kernel,
            workgroup,
            memo: HashMap::new(),
        }
    }

    /// The pattern of the READ or WRITE expression `access` (the index operands; a WRITE's
    /// value operand is not part of it).
    pub fn access(&mut self, access: usize) -> IndexPattern {
        let Some(e) = self.kernel.exprs.get(access) else {
            return IndexPattern::Opaque {
                why: format!("expression %{access} does not exist"),
            };
        };
        let (Inst::Read { indices, .. } | Inst::Write { indices, .. }) = &e.inst else {
            return IndexPattern::Opaque {
                why: format!("expression %{access} is not a read or a write"),
            };
        };
        let mut maps = Vec::with_capacity(indices.len());
        for &operand in indices {
            match self.index(operand, 0) {
                Ok(a) => maps.push(a),
                Err(why) => return IndexPattern::Opaque { why },
            }
        }
        IndexPattern::Affine(maps)
    }

    /// The map of each index operand of the READ or WRITE `access` on its own: `None` for an
    /// operand that is not an affine function of the position (a loop index, data read), where
    /// [`PatternAnalysis::access`] makes the whole pattern opaque. `x[k, p1]` in a loop over
    /// `k` gives `[None, Some(p1)]`. (Of another expression: the map of each of its operands.)
    pub fn operand_maps(&mut self, access: usize) -> Vec<Option<Affine>> {
        let Some(e) = self.kernel.exprs.get(access) else {
            return Vec::new();
        };
        let operands: Vec<ValueId> = match &e.inst {
            Inst::Read { indices, .. } | Inst::Write { indices, .. } => indices.clone(),
            _ => self.kernel.operands(access).collect(),
        };
        operands
            .into_iter()
            .map(|o| self.index(o, 0).ok())
            .collect()
    }

    fn index(&mut self, id: u32, depth: usize) -> Result<Affine, String> {
        if let Some(r) = self.memo.get(&id) {
            return r.clone();
        }
        let r = self.compute(id, depth);
        self.memo.insert(id, r.clone());
        r
    }

    fn compute(&mut self, id: u32, depth: usize) -> Result<Affine, String> {
        if depth > MAX_DEPTH {
            return Err("the index expression is too deep to analyse".into());
        }
        let rank = self.workgroup.len();
        let kernel = self.kernel;
        let e = kernel
            .exprs
            .get(id as usize)
            .ok_or_else(|| format!("expression %{id} does not exist"))?;
        let dtype = e.dtype;
        let overflow = || "the index arithmetic overflows".to_string();
        let result = match e.inst {
            Inst::Const(literal) => {
                let v: i128 = match (dtype, literal) {
                    (Some(d), Literal::Int(v)) if d.is_signed_int() => v as i128,
                    (Some(d), Literal::UInt(v)) if d.is_unsigned_int() => v as i128,
                    _ => return Err(format!("the index uses the non-integer constant %{id}")),
                };
                let v = i64::try_from(v).map_err(|_| "an index constant beyond i64".to_string())?;
                Affine::constant(rank, v)
            }
            Inst::Position { axis } => {
                let axis = axis as usize;
                if axis >= rank {
                    return Err(format!("position axis {axis} is outside the workgroup"));
                }
                Affine::position(rank, axis)
            }
            Inst::Binary {
                op: op @ (Op::Add | Op::Sub),
                a,
                b,
            } => {
                let a = self.index(a, depth + 1)?;
                let b = self.index(b, depth + 1)?;
                let sign = if op == Op::Add { 1 } else { -1 };
                a.combine(&b, sign).ok_or_else(overflow)?
            }
            Inst::Binary { op: Op::Mul, a, b } => {
                let a = self.index(a, depth + 1)?;
                let b = self.index(b, depth + 1)?;
                let scaled = if b.is_constant() {
                    a.scale(b.constant)
                } else if a.is_constant() {
                    b.scale(a.constant)
                } else {
                    return Err(format!(
                        "the index multiplies two position-dependent values (%{id})"
                    ));
                };
                scaled.ok_or_else(overflow)?
            }
            Inst::Unary { op: Op::Neg, a } => {
                self.index(a, depth + 1)?.scale(-1).ok_or_else(overflow)?
            }
            Inst::Cast { value } => {
                let from = kernel.exprs.get(value as usize).and_then(|x| x.dtype);
                if !from.is_some_and(|d| d.is_int()) {
                    return Err(format!("the index casts a non-integer value (%{id})"));
                }
                self.index(value, depth + 1)?
            }
            Inst::Read { tensor, .. } => {
                let kind = match tensor.kind {
                    TensorKind::Input => "input",
                    TensorKind::Local => "local",
                    _ => "tensor",
                };
                return Err(format!(
                    "depends on data read from {kind} {} (%{id})",
                    tensor.index
                ));
            }
            Inst::Variable { .. } => return Err(format!("depends on the variable %{id}")),
            Inst::Range { .. } => return Err(format!("depends on the loop index %{id}")),
            ref other => {
                return Err(format!(
                    "uses `{}` (%{id}), which is not an affine operation",
                    other
                        .op()
                        .as_str_name()
                        .trim_start_matches("OP_")
                        .to_ascii_lowercase()
                ))
            }
        };
        // Integer arithmetic wraps: the map is only exact when no intermediate leaves its dtype.
        let Some((lo, hi)) = dtype.filter(|d| d.is_int()).and_then(DType::int_range) else {
            return Err(format!("the index %{id} is not an integer"));
        };
        match result.range(self.workgroup) {
            Some((a, b)) if a >= lo && b <= hi => Ok(result),
            _ => Err(format!(
                "the index %{id} may wrap around its dtype {}",
                dtype.map_or("?", |d| d.name())
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn aff(coeffs: &[i64], c: i64) -> Affine {
        Affine {
            coeffs: coeffs.to_vec(),
            constant: c,
        }
    }

    #[test]
    fn display_is_readable() {
        assert_eq!(aff(&[1, 0], 0).to_string(), "p0");
        assert_eq!(aff(&[0, 1], 1).to_string(), "p1 + 1");
        assert_eq!(aff(&[2, -1], -3).to_string(), "2*p0 - p1 - 3");
        assert_eq!(aff(&[-1], 0).to_string(), "-p0");
        assert_eq!(aff(&[0, 0], 4).to_string(), "4");
    }

    #[test]
    fn one_to_one_needs_full_rank() {
        let id = IndexPattern::Affine(vec![aff(&[1, 0], 0), aff(&[0, 1], 0)]);
        let transposed = IndexPattern::Affine(vec![aff(&[0, 1], 0), aff(&[1, 0], 0)]);
        let broadcast = IndexPattern::Affine(vec![aff(&[0, 1], 0)]);
        let sheared = IndexPattern::Affine(vec![aff(&[1, 1], 0), aff(&[0, 1], 2)]);
        assert!(id.is_one_to_one(&[4, 5]));
        assert!(transposed.is_one_to_one(&[4, 5]));
        assert!(sheared.is_one_to_one(&[4, 5]));
        assert!(!broadcast.is_one_to_one(&[4, 5]));
        // An axis of extent 1 does not need to be distinguished.
        assert!(broadcast.is_one_to_one(&[1, 5]));
    }

    #[test]
    fn bounds_and_shifts() {
        let p = IndexPattern::Affine(vec![aff(&[1], 0)]);
        let p1 = IndexPattern::Affine(vec![aff(&[1], 1)]);
        assert!(p.in_bounds(&[5], &[5]));
        assert!(!p1.in_bounds(&[5], &[5]));
        assert!(p1.in_bounds(&[5], &[6]));
        assert!(p1.is_shift_of(&p) && !p1.matches(&p));
        let opaque = IndexPattern::Opaque { why: "x".into() };
        assert!(!opaque.matches(&opaque));
    }
}

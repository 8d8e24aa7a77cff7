//! A small interval analysis of integer values, used to prove tensor indices in bounds so that
//! the generated code needs no check (and vectorizes) where the proof succeeds.

use ovl_ir::DType;

/// A closed interval `[lo, hi]` of integer values (i128 holds every integer dtype exactly).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Interval {
    pub lo: i128,
    pub hi: i128,
}

impl Interval {
    pub fn new(lo: i128, hi: i128) -> Interval {
        Interval { lo, hi }
    }

    pub fn point(v: i128) -> Interval {
        Interval { lo: v, hi: v }
    }

    /// Every value of an integer dtype (bool: 0 and 1); `None` for floats.
    pub fn of_dtype(d: DType) -> Option<Interval> {
        Some(match d {
            DType::I8 => Interval::new(i8::MIN as i128, i8::MAX as i128),
            DType::I16 => Interval::new(i16::MIN as i128, i16::MAX as i128),
            DType::I32 => Interval::new(i32::MIN as i128, i32::MAX as i128),
            DType::I64 => Interval::new(i64::MIN as i128, i64::MAX as i128),
            DType::U8 => Interval::new(0, u8::MAX as i128),
            DType::U16 => Interval::new(0, u16::MAX as i128),
            DType::U32 => Interval::new(0, u32::MAX as i128),
            DType::U64 => Interval::new(0, u64::MAX as i128),
            DType::Bool => Interval::new(0, 1),
            DType::F32 | DType::F64 => return None,
        })
    }

    fn within(self, outer: Interval) -> bool {
        self.lo >= outer.lo && self.hi <= outer.hi
    }

    /// The interval if every value is representable in `d`, else all of `d` (the arithmetic
    /// wrapped).
    pub fn fit(self, d: DType) -> Option<Interval> {
        let all = Interval::of_dtype(d)?;
        Some(if self.within(all) { self } else { all })
    }

    /// Whether every value is a valid index of a dimension of size `size`.
    pub fn inside(self, size: u64) -> bool {
        self.lo >= 0 && self.hi < size as i128
    }

    fn from_corners(c: [Option<i128>; 4]) -> Option<Interval> {
        let mut lo = i128::MAX;
        let mut hi = i128::MIN;
        for v in c {
            let v = v?;
            lo = lo.min(v);
            hi = hi.max(v);
        }
        Some(Interval::new(lo, hi))
    }

    pub fn add(self, o: Interval) -> Option<Interval> {
        Some(Interval::new(
            self.lo.checked_add(o.lo)?,
            self.hi.checked_add(o.hi)?,
        ))
    }

    pub fn sub(self, o: Interval) -> Option<Interval> {
        Some(Interval::new(
            self.lo.checked_sub(o.hi)?,
            self.hi.checked_sub(o.lo)?,
        ))
    }

    pub fn mul(self, o: Interval) -> Option<Interval> {
        Interval::from_corners([
            self.lo.checked_mul(o.lo),
            self.lo.checked_mul(o.hi),
            self.hi.checked_mul(o.lo),
            self.hi.checked_mul(o.hi),
        ])
    }

    /// Truncating division by a strictly positive divisor interval.
    pub fn div(self, o: Interval) -> Option<Interval> {
        if o.lo <= 0 {
            return None;
        }
        Interval::from_corners([
            Some(self.lo / o.lo),
            Some(self.lo / o.hi),
            Some(self.hi / o.lo),
            Some(self.hi / o.hi),
        ])
    }

    /// Remainder of a non-negative dividend by a strictly positive divisor interval.
    pub fn rem(self, o: Interval) -> Option<Interval> {
        if o.lo <= 0 || self.lo < 0 {
            return None;
        }
        Some(Interval::new(0, self.hi.min(o.hi - 1)))
    }

    pub fn min(self, o: Interval) -> Interval {
        Interval::new(self.lo.min(o.lo), self.hi.min(o.hi))
    }

    pub fn max(self, o: Interval) -> Interval {
        Interval::new(self.lo.max(o.lo), self.hi.max(o.hi))
    }

    pub fn union(self, o: Interval) -> Interval {
        Interval::new(self.lo.min(o.lo), self.hi.max(o.hi))
    }
}

/// A bound of an integer value by a symbol value: `v <= scale * S[symbol] + c`, for every
/// value `S >= 0` of the symbol (`scale >= 0`). With `v >= 0` (its interval) it proves `v` a
/// valid index of a dimension sized at run time ([`SymBound::below`]), where intervals know
/// nothing. Sources: OP_SYMBOL, `position` on a workgroup axis sized at run time, a RANGE
/// loop's index under its end; it survives adding or subtracting a bounded value, multiplying by
/// a positive constant, and casts, while the arithmetic provably does not wrap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SymBound {
    pub symbol: u32,
    pub scale: i128,
    pub c: i128,
}

impl SymBound {
    /// `v <= scale * S[symbol] + c`.
    pub fn new(symbol: u32, scale: i64, c: i128) -> SymBound {
        SymBound {
            symbol,
            scale: scale as i128,
            c,
        }
    }

    /// Whether a non-negative value with this bound is below `scale * S[symbol] + offset` for
    /// every `S >= 0`: same symbol, a scale no larger (so `self.scale * S <= scale * S`) and
    /// `c <= offset - 1`.
    pub fn below(self, symbol: u32, scale: i64, offset: i64) -> bool {
        self.symbol == symbol && self.scale <= scale as i128 && self.c < offset as i128
    }

    /// The bound of `v + k` for every `k <= hi`.
    pub fn shift(self, hi: i128) -> Option<SymBound> {
        Some(SymBound {
            c: self.c.checked_add(hi)?,
            ..self
        })
    }

    /// The bound of `m * v` for a constant `m > 0`.
    pub fn times(self, m: i128) -> Option<SymBound> {
        (m > 0).then_some(())?;
        Some(SymBound {
            symbol: self.symbol,
            scale: self.scale.checked_mul(m)?,
            c: self.c.checked_mul(m)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symbolic_bounds() {
        // position on an axis of size S0 + 1: p <= S0 + 0.
        let p = SymBound::new(0, 1, 0);
        assert!(p.below(0, 1, 1));
        assert!(!p.below(0, 1, 0));
        assert!(!p.below(1, 1, 1));
        assert!(p.below(0, 2, 1)); // S0 <= 2 * S0
        assert!(!SymBound::new(0, 2, -1).below(0, 1, 0));
        assert_eq!(p.shift(-1), Some(SymBound::new(0, 1, -1)));
        assert_eq!(p.times(3), Some(SymBound::new(0, 3, 0)));
        assert_eq!(p.times(0), None);
    }

    #[test]
    fn arithmetic() {
        let p = Interval::new(0, 9);
        assert_eq!(p.mul(Interval::point(4)).unwrap(), Interval::new(0, 36));
        assert_eq!(p.add(Interval::point(-1)).unwrap(), Interval::new(-1, 8));
        assert_eq!(p.sub(Interval::new(0, 2)).unwrap(), Interval::new(-2, 9));
        assert_eq!(p.div(Interval::point(2)).unwrap(), Interval::new(0, 4));
        assert_eq!(p.rem(Interval::point(4)).unwrap(), Interval::new(0, 3));
        assert!(p.rem(Interval::new(0, 4)).is_none());
        assert!(Interval::new(0, 9).inside(10));
        assert!(!Interval::new(0, 10).inside(10));
        assert!(!Interval::new(-1, 3).inside(10));
        // Wrapping makes the result the whole dtype.
        let big = Interval::new(0, 200).add(Interval::point(100)).unwrap();
        assert_eq!(big.fit(DType::U8).unwrap(), Interval::new(0, 255));
        assert_eq!(
            Interval::new(0, 5).fit(DType::U8).unwrap(),
            Interval::new(0, 5)
        );
        let huge = Interval::of_dtype(DType::U64).unwrap();
        assert!(huge.mul(huge).is_none());
    }
}

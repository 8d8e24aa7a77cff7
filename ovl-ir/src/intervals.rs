//! Integer value ranges of an operator's expressions, for every worker of its workgroup: the one
//! interval analysis of ovl. The code generators use it to drop index checks it proves
//! unnecessary (so the code vectorizes); fusion uses it to prove that a recomputed producer
//! cannot fault and that a read lands on an element the producer writes, and its trip counts
//! in the cost model.
//!
//! One pass in program order over a validated operator. A position component lies in
//! `0..extent`, a RANGE's index in `start..end`, arithmetic follows interval rules (a result that
//! may leave its dtype wraps, so it gets the dtype's whole range), and anything else integer
//! (data, variables) gets its dtype's range. Inside an IF whose condition is a comparison (or a
//! conjunction of comparisons) of an immutable integer value with a constant, that value's
//! range is narrowed for the branch taken when the condition holds (`if i > 0 { x[i - 1] }` and
//! `if i < n { x[i] }` read in bounds): [`Intervals::operand`] gives an operand's range as its
//! user sees it. A dimension sized at run time has no useful interval; a [`SymBound`] bounds
//! values by the symbol instead. The ranges are sound over-approximations: a check that passes
//! holds for every worker.

use crate::dtype::{DType, Literal};
use crate::ir::{self, Op, TensorKind};
use crate::typed::{Dim, Inst, Kernel, ValueId};

/// A closed interval `[lo, hi]` of integer values (i128 holds every integer dtype exactly).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interval {
    /// The least value.
    pub lo: i128,
    /// The greatest value.
    pub hi: i128,
}

impl Interval {
    /// `[lo, hi]`.
    pub fn new(lo: i128, hi: i128) -> Interval {
        Interval { lo, hi }
    }

    /// The one value `v`.
    pub fn point(v: i128) -> Interval {
        Interval { lo: v, hi: v }
    }

    /// Every value of an integer dtype (bool: 0 and 1); `None` for floats.
    pub fn of_dtype(d: DType) -> Option<Interval> {
        d.int_range().map(|(lo, hi)| Interval::new(lo, hi))
    }

    /// The value, if the interval holds one value only.
    pub fn constant(self) -> Option<i128> {
        (self.lo == self.hi).then_some(self.lo)
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

    /// `a + b` for every `a` in `self` and `b` in `o` (`None` past i128).
    pub fn plus(self, o: Interval) -> Option<Interval> {
        Some(Interval::new(
            self.lo.checked_add(o.lo)?,
            self.hi.checked_add(o.hi)?,
        ))
    }

    /// `a - b`.
    pub fn minus(self, o: Interval) -> Option<Interval> {
        Some(Interval::new(
            self.lo.checked_sub(o.hi)?,
            self.hi.checked_sub(o.lo)?,
        ))
    }

    /// `a * b`.
    pub fn times(self, o: Interval) -> Option<Interval> {
        Interval::from_corners([
            self.lo.checked_mul(o.lo),
            self.lo.checked_mul(o.hi),
            self.hi.checked_mul(o.lo),
            self.hi.checked_mul(o.hi),
        ])
    }

    /// Truncating division by a strictly positive divisor interval.
    pub fn divided_by(self, o: Interval) -> Option<Interval> {
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
    pub fn remainder(self, o: Interval) -> Option<Interval> {
        if o.lo <= 0 || self.lo < 0 {
            return None;
        }
        Some(Interval::new(0, self.hi.min(o.hi - 1)))
    }

    /// `min(a, b)`.
    pub fn min(self, o: Interval) -> Interval {
        Interval::new(self.lo.min(o.lo), self.hi.min(o.hi))
    }

    /// `max(a, b)`.
    pub fn max(self, o: Interval) -> Interval {
        Interval::new(self.lo.max(o.lo), self.hi.max(o.hi))
    }

    /// Every value of either.
    pub fn union(self, o: Interval) -> Interval {
        Interval::new(self.lo.min(o.lo), self.hi.max(o.hi))
    }

    /// The values of `self` that lie in `o` (`self` unchanged when none do: the branch that
    /// narrows is then never taken, and any range is sound for it).
    fn narrow(self, o: Interval) -> Interval {
        let lo = self.lo.max(o.lo);
        Interval::new(lo, self.hi.min(o.hi).max(lo))
    }
}

/// A bound of an integer value by a symbol value: `v <= scale * S[symbol] + c`, for every
/// value `S >= 0` of the symbol (`scale >= 0`). With `v >= 0` (its interval) it proves `v` a
/// valid index of a dimension sized at run time ([`SymBound::below`]), where intervals know
/// nothing. Sources: OP_SYMBOL, `position` on a workgroup axis sized at run time, a RANGE
/// loop's index under its end; it survives adding or subtracting a bounded value, multiplying by
/// a positive constant, and casts, while the arithmetic provably does not wrap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SymBound {
    /// The symbol.
    pub symbol: u32,
    /// Its coefficient (>= 0).
    pub scale: i128,
    /// The constant term.
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

/// The ranges of one operator (see the module's documentation).
#[derive(Clone, Debug)]
pub struct Intervals {
    /// Per expression: its range where it is defined; `None` when it is not an integer or bool
    /// value (floats, statements).
    of: Vec<Option<Interval>>,
    /// Per expression: its symbolic bound, if any.
    sym: Vec<Option<SymBound>>,
    /// Per RANGE expression: an upper bound of its trip count (`None`: unbounded or unknown).
    trips: Vec<Option<u128>>,
    /// The ranges of every expression's operands as that expression sees them (narrowed by
    /// the guards around it): operand `j` of expression `k` is `at[start[k] + j]`.
    at: Vec<Option<Interval>>,
    start: Vec<usize>,
}

/// The integer value of a literal (`bool`: 0 or 1); `None` for floats.
fn literal_value(lit: Literal) -> Option<i128> {
    match lit {
        Literal::Int(v) => Some(v.into()),
        Literal::UInt(v) => Some(v.into()),
        Literal::Bool(b) => Some(b.into()),
        Literal::Float(_) => None,
    }
}

/// A constraint `lo <= value(id) <= hi` that holds inside a branch.
type Constraint = (usize, Interval);

impl Intervals {
    /// The ranges of `dag`'s expressions over its whole workgroup. `dag` has passed
    /// [`crate::validate::validate`] (symbolic sizes allowed).
    pub fn analyse(dag: &ir::ExpressionDag) -> Intervals {
        Intervals::of(&Kernel::from_validated(dag))
    }

    /// The ranges of `kernel`'s expressions over its whole workgroup.
    pub fn of(kernel: &Kernel) -> Intervals {
        let n = kernel.exprs.len();
        let mut of: Vec<Option<Interval>> = Vec::with_capacity(n);
        let mut sym: Vec<Option<SymBound>> = vec![None; n];
        let mut trips: Vec<Option<u128>> = vec![None; n];
        let mut at = Vec::new();
        let mut start = Vec::with_capacity(n);
        // Saved ranges to restore when a block ends: one frame per open block.
        let mut frames: Vec<Vec<(usize, Option<Interval>)>> = Vec::new();
        for (i, x) in kernel.exprs.iter().enumerate() {
            start.push(at.len());
            at.extend(
                kernel
                    .operands(i)
                    .map(|o| of.get(o as usize).copied().flatten()),
            );
            let get = |k: usize| -> Option<Interval> { at.get(start[i] + k).copied().flatten() };
            let bound = |o: ValueId| sym.get(o as usize).copied().flatten();
            let dtype = x.dtype;
            let full = dtype.and_then(Interval::of_dtype);
            let fit = |v: Option<Interval>| v.zip(dtype).and_then(|(v, d)| v.fit(d)).or(full);
            let value = match x.inst {
                Inst::Const(lit) => literal_value(lit).map(Interval::point),
                Inst::Position { axis } => match kernel.workgroup.get(axis as usize) {
                    Some(&Dim::Symbolic {
                        symbol,
                        scale,
                        offset,
                    }) => {
                        sym[i] = Some(SymBound::new(symbol, scale, offset as i128 - 1));
                        // A workgroup has at most i64::MAX workers.
                        Some(Interval::new(0, i64::MAX as i128 - 1))
                    }
                    Some(&Dim::Known(d)) => Some(Interval::new(0, d as i128 - 1)),
                    None => full,
                },
                Inst::Symbol { symbol } => {
                    sym[i] = Some(SymBound::new(symbol, 1, 0));
                    Some(Interval::new(0, i64::MAX as i128))
                }
                Inst::Range { end, .. } => {
                    let (s, en, st) = (get(0), get(1), get(2));
                    if let (Some(s), Some(en), Some(st)) = (s, en, st) {
                        if st.lo > 0 {
                            let span = (en.hi - s.lo).max(0) as u128;
                            trips[i] = Some(span.div_ceil(st.lo as u128));
                        }
                    }
                    // The index stays below the end (a loop whose step is not positive runs
                    // no iteration).
                    sym[i] = bound(end).and_then(|x| x.shift(-1));
                    match (s, en) {
                        (Some(s), Some(en)) => {
                            fit(Some(Interval::new(s.lo, (en.hi - 1).max(s.lo))))
                        }
                        _ => full,
                    }
                }
                Inst::Binary {
                    op: o @ (Op::Add | Op::Sub | Op::Mul | Op::Div | Op::Mod | Op::Min | Op::Max),
                    a,
                    b,
                } if dtype.is_some_and(DType::is_int) => match (get(0), get(1)) {
                    (Some(p), Some(q)) => {
                        let raw = match o {
                            Op::Add => p.plus(q),
                            Op::Sub => p.minus(q),
                            Op::Mul => p.times(q),
                            Op::Div => p.divided_by(q),
                            Op::Mod => p.remainder(q),
                            Op::Min => Some(p.min(q)),
                            _ => Some(p.max(q)),
                        };
                        let fitted = fit(raw);
                        if raw.is_some() && fitted == raw {
                            // No wrap-around: a symbolic bound carries over.
                            sym[i] = binary_bound(o, (bound(a), p), (bound(b), q));
                        }
                        fitted
                    }
                    _ => full,
                },
                Inst::Unary { op: Op::Neg, .. } => {
                    fit(get(0).and_then(|a| Interval::point(0).minus(a)))
                }
                Inst::Select { .. } => fit(get(1).zip(get(2)).map(|(a, b)| a.union(b))),
                // An integer cast keeps the value when it fits the target (else it wraps).
                Inst::Cast { value } => {
                    let before = get(0);
                    let after = fit(before);
                    if dtype != Some(DType::Bool) && before.is_some() && after == before {
                        // The value is unchanged: so is its bound.
                        sym[i] = bound(value);
                    }
                    after
                }
                _ => full,
            };
            of.push(value);
            match x.inst {
                Inst::If { condition, .. } => {
                    let mut saved = Vec::new();
                    let mut found = Vec::new();
                    constraints(kernel, &of, condition as usize, &mut found, 0);
                    for (id, span) in found {
                        let Some(old) = of[id] else { continue };
                        saved.push((id, of[id]));
                        of[id] = Some(old.narrow(span));
                    }
                    frames.push(saved);
                }
                Inst::Range { .. } | Inst::WhileBegin { .. } => frames.push(Vec::new()),
                Inst::Else { .. } => {
                    if let Some(frame) = frames.last_mut() {
                        for (id, old) in frame.drain(..).rev() {
                            of[id] = old;
                        }
                    }
                }
                Inst::EndIf { .. } | Inst::EndRange { .. } | Inst::WhileEnd { .. } => {
                    for (id, old) in frames.pop().unwrap_or_default().into_iter().rev() {
                        of[id] = old;
                    }
                }
                _ => {}
            }
        }
        // Outside every block, each value has its range from where it is defined.
        Intervals {
            of,
            sym,
            trips,
            at,
            start,
        }
    }

    /// The range of expression `k`'s value over the whole operator (`None`: not an integer or
    /// bool value).
    pub fn value(&self, k: usize) -> Option<Interval> {
        self.of.get(k).copied().flatten()
    }

    /// The range of operand `j` of expression `k` as `k` sees it: narrowed by the guards
    /// around `k`.
    pub fn operand(&self, k: usize, j: usize) -> Option<Interval> {
        let s = *self.start.get(k)?;
        let end = self.start.get(k + 1).copied().unwrap_or(self.at.len());
        (s + j < end).then(|| self.at[s + j]).flatten()
    }

    /// The symbolic bound of expression `k`'s value, if it has one.
    pub fn sym_bound(&self, k: usize) -> Option<SymBound> {
        self.sym.get(k).copied().flatten()
    }

    /// An upper bound of the trip count of RANGE expression `k` (`None`: unbounded or unknown).
    pub fn trips(&self, k: usize) -> Option<u128> {
        self.trips.get(k).copied().flatten()
    }

    /// The first thing in `dag` that could fault for some worker, in words: an access whose
    /// index may leave its tensor, a RANGE whose step may be <= 0, or a while loop (which
    /// may not end). `None` when no worker can fault. Only for operators without symbolic
    /// sizes.
    pub fn first_possible_fault(&self, dag: &ir::ExpressionDag) -> Option<String> {
        for (i, e) in dag.expressions.iter().enumerate() {
            match Op::try_from(e.code) {
                Ok(Op::Read | Op::Write) => {
                    let Some(t) = &e.tensor else { continue };
                    let shape = match TensorKind::try_from(t.kind) {
                        Ok(TensorKind::Input) => dag.inputs.get(t.index as usize),
                        Ok(TensorKind::Output) => dag.outputs.get(t.index as usize),
                        Ok(TensorKind::Local) => dag.locals.get(t.index as usize),
                        _ => None,
                    }
                    .map(|t| t.shape.as_slice())
                    .unwrap_or_default();
                    for (axis, &size) in shape.iter().enumerate() {
                        let ok = self.operand(i, axis).is_some_and(|iv| iv.inside(size));
                        if !ok {
                            return Some(format!(
                                "its access %{i} may index axis {axis} outside its size {size}"
                            ));
                        }
                    }
                }
                Ok(Op::Range) if self.operand(i, 2).is_none_or(|step| step.lo <= 0) => {
                    return Some(format!("its loop %{i} may have a step <= 0"));
                }
                Ok(Op::WhileBegin) => {
                    return Some(format!("its while loop %{i} may not end"));
                }
                _ => {}
            }
        }
        None
    }
}

/// The symbolic bound of `a op b` (operands with bounds `ba`, `bb` and intervals `p`, `q`),
/// where the arithmetic does not wrap.
fn binary_bound(
    op: Op,
    (ba, p): (Option<SymBound>, Interval),
    (bb, q): (Option<SymBound>, Interval),
) -> Option<SymBound> {
    match op {
        Op::Add => ba
            .and_then(|x| x.shift(q.hi))
            .or_else(|| bb.and_then(|x| x.shift(p.hi))),
        Op::Sub => ba.and_then(|x| x.shift(-q.lo)),
        Op::Mul => ba
            .zip(q.constant())
            .and_then(|(x, m)| x.times(m))
            .or_else(|| bb.zip(p.constant()).and_then(|(x, m)| x.times(m))),
        Op::Min => ba.or(bb),
        _ => None,
    }
}

/// Collects the constraints that hold when the bool expression `cond` is true.
fn constraints(
    kernel: &Kernel,
    of: &[Option<Interval>],
    cond: usize,
    out: &mut Vec<Constraint>,
    depth: usize,
) {
    let Some(Inst::Compare { op, a, b }) = kernel.exprs.get(cond).map(|x| &x.inst) else {
        return;
    };
    if depth > 16 {
        return;
    }
    let (a, b) = (*a as usize, *b as usize);
    // Operands precede their user (validated IR); anything else is not narrowed.
    if a >= of.len() || b >= of.len() {
        return;
    }
    if *op == Op::And {
        constraints(kernel, of, a, out, depth + 1);
        constraints(kernel, of, b, out, depth + 1);
        return;
    }
    let constant = |id: usize| of[id].and_then(Interval::constant);
    let is_int = |id: usize| kernel.exprs[id].dtype.is_some_and(DType::is_int);
    // A variable or an accumulator names a value that may change inside the branch: only
    // immutable values are narrowed.
    let mutable = |id: usize| {
        matches!(
            kernel.exprs[id].inst,
            Inst::Variable { .. } | Inst::Accumulator { .. }
        )
    };
    if !is_int(a) || !is_int(b) || mutable(a) || mutable(b) {
        return;
    }
    // Normalise to `x OP c`.
    let (x, c, op) = match (constant(a), constant(b)) {
        (None, Some(c)) => (a, c, *op),
        (Some(c), None) => (
            b,
            c,
            match op {
                Op::Lt => Op::Gt,
                Op::Le => Op::Ge,
                Op::Gt => Op::Lt,
                Op::Ge => Op::Le,
                other => *other,
            },
        ),
        _ => return,
    };
    let span = match op {
        Op::Lt => Interval::new(i128::MIN, c - 1),
        Op::Le => Interval::new(i128::MIN, c),
        Op::Gt => Interval::new(c + 1, i128::MAX),
        Op::Ge => Interval::new(c, i128::MAX),
        Op::Eq => Interval::point(c),
        _ => return,
    };
    out.push((x, span));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::Builder;

    #[test]
    fn positions_loops_and_guarded_neighbours() {
        // out[i] = x[i - 1] when i > 0, x[i] when i < 8 (of 10), for i in 0..10; and a loop
        // k in 0..3 reading x[k + i].
        let mut b = Builder::new("t", &[10]);
        let x = b.input(DType::F32, &[12]);
        let out = b.output(DType::F32, &[10]);
        let i = b.position(0);
        let one = b.i64(1);
        let zero = b.i64(0);
        let eight = b.i64(8);
        let left = b.op(Op::Sub, &[i, one]);
        let cond = b.op(Op::Gt, &[i, zero]);
        b.if_(cond);
        let inside = b.op(Op::Sub, &[i, one]);
        let v = b.read(TensorKind::Input, x, &[inside]);
        b.write(TensorKind::Output, out, &[i], v);
        b.end_if();
        let below = b.op(Op::Lt, &[i, eight]);
        b.if_(below);
        let direct = b.read(TensorKind::Input, x, &[i]);
        b.end_if();
        let three = b.i64(3);
        let k = b.range(zero, three, one);
        let at = b.op(Op::Add, &[k, i]);
        b.read(TensorKind::Input, x, &[at]);
        b.end_range();
        let dag = b.build();
        crate::validate::validate(&dag).unwrap();
        let iv = Intervals::analyse(&dag);
        assert_eq!(iv.value(i as usize), Some(Interval::new(0, 9)));
        assert_eq!(iv.value(left as usize), Some(Interval::new(-1, 8)));
        assert_eq!(iv.value(inside as usize), Some(Interval::new(0, 8)));
        // The guard narrows the index as the read sees it, not the value everywhere.
        assert_eq!(iv.operand(direct as usize, 0), Some(Interval::new(0, 7)));
        assert_eq!(iv.value(i as usize), Some(Interval::new(0, 9)));
        assert_eq!(iv.value(k as usize), Some(Interval::new(0, 2)));
        assert_eq!(iv.value(at as usize), Some(Interval::new(0, 11)));
        assert_eq!(iv.trips(k as usize), Some(3));
        assert_eq!(iv.first_possible_fault(&dag), None);
        assert_eq!(DType::U8.int_range(), Some((0, 255)));
    }

    #[test]
    fn a_variable_is_never_narrowed() {
        // v = x-independent 0; if v >= 0 && v < 5 { v = v + 10; read x[v] }: v may be 14.
        let mut b = Builder::new("t", &[1]);
        let x = b.input(DType::F32, &[8]);
        let zero = b.i64(0);
        let five = b.i64(5);
        let ten = b.i64(10);
        let v = b.var(zero);
        let lo = b.op(Op::Ge, &[v, zero]);
        let hi = b.op(Op::Lt, &[v, five]);
        let both = b.op(Op::And, &[lo, hi]);
        b.if_(both);
        let up = b.op(Op::Add, &[v, ten]);
        b.assign(v, up);
        b.read(TensorKind::Input, x, &[v]);
        b.end_if();
        let dag = b.build();
        let iv = Intervals::analyse(&dag);
        assert!(iv.first_possible_fault(&dag).is_some());
    }

    /// On IR that did not pass validation the ranges mean nothing, but nothing panics.
    #[test]
    fn damaged_ir_does_not_panic() {
        for f in crate::fixtures::all() {
            let mut dag = f.dag;
            for (k, e) in dag.expressions.iter_mut().enumerate() {
                for o in e.operands.iter_mut() {
                    *o = (*o).wrapping_mul(7).wrapping_add(k as u32 * 1000);
                }
            }
            let iv = Intervals::analyse(&dag);
            let _ = iv.first_possible_fault(&dag);
            let _ = crate::cost::WorkerCost::of(&dag).at(&[]);
        }
    }

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
        assert_eq!(p.times(Interval::point(4)).unwrap(), Interval::new(0, 36));
        assert_eq!(p.plus(Interval::point(-1)).unwrap(), Interval::new(-1, 8));
        assert_eq!(p.minus(Interval::new(0, 2)).unwrap(), Interval::new(-2, 9));
        assert_eq!(
            p.divided_by(Interval::point(2)).unwrap(),
            Interval::new(0, 4)
        );
        assert_eq!(
            p.remainder(Interval::point(4)).unwrap(),
            Interval::new(0, 3)
        );
        assert!(p.remainder(Interval::new(0, 4)).is_none());
        assert!(Interval::new(0, 9).inside(10));
        assert!(!Interval::new(0, 10).inside(10));
        assert!(!Interval::new(-1, 3).inside(10));
        // Wrapping makes the result the whole dtype.
        let big = Interval::new(0, 200).plus(Interval::point(100)).unwrap();
        assert_eq!(big.fit(DType::U8).unwrap(), Interval::new(0, 255));
        assert_eq!(
            Interval::new(0, 5).fit(DType::U8).unwrap(),
            Interval::new(0, 5)
        );
        let huge = Interval::of_dtype(DType::U64).unwrap();
        assert!(huge.times(huge).is_none());
    }
}

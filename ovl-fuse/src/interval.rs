//! Integer value ranges of an operator's expressions, for every worker of its workgroup: what
//! index substitution needs to prove that a recomputed producer cannot fault and that a read
//! lands on an element the producer writes.
//!
//! One pass in program order. A position component lies in `0..extent`, a RANGE's index in
//! `start..end`, arithmetic follows interval rules (a result that may leave its dtype wraps, so
//! it gets the dtype's whole range), and anything else integer (data, variables) gets its
//! dtype's range. Inside an IF whose condition is a comparison (or a conjunction of
//! comparisons) of an expression with a constant, that expression's range is narrowed for the
//! branch taken when the condition holds (`if i > 0 { x[i - 1] }` reads in bounds). The ranges
//! are sound over-approximations: a check that passes holds for every worker.

use ovl_ir::ir::{self, Op, TensorKind};
use ovl_ir::DType;

/// An inclusive range of integer values.
pub(crate) type Span = (i128, i128);

/// The ranges of one operator.
pub(crate) struct Intervals {
    /// Per expression: its range, `None` when it is not an integer value (floats, bools,
    /// statements).
    pub of: Vec<Option<Span>>,
    /// Per RANGE expression: an upper bound of its trip count (`None`: unbounded or unknown).
    pub trips: Vec<Option<u128>>,
}

/// The inclusive value range of an integer dtype.
pub(crate) fn dtype_span(d: Option<DType>) -> Option<Span> {
    Some(match d? {
        DType::I8 => (i8::MIN as i128, i8::MAX as i128),
        DType::I16 => (i16::MIN as i128, i16::MAX as i128),
        DType::I32 => (i32::MIN as i128, i32::MAX as i128),
        DType::I64 => (i64::MIN as i128, i64::MAX as i128),
        DType::U8 => (0, u8::MAX as i128),
        DType::U16 => (0, u16::MAX as i128),
        DType::U32 => (0, u32::MAX as i128),
        DType::U64 => (0, u64::MAX as i128),
        DType::Bool => (0, 1),
        _ => return None,
    })
}

fn within(s: Span, d: Span) -> bool {
    s.0 >= d.0 && s.1 <= d.1
}

/// A constraint `lo <= value(id) <= hi` that holds inside a branch.
type Constraint = (usize, Span);

impl Intervals {
    /// The ranges of `dag`'s expressions over its whole workgroup.
    pub fn analyse(dag: &ir::ExpressionDag) -> Intervals {
        let n = dag.expressions.len();
        let mut of: Vec<Option<Span>> = vec![None; n];
        let mut trips: Vec<Option<u128>> = vec![None; n];
        // Saved ranges to restore when a branch ends: one frame per open block.
        let mut frames: Vec<Vec<(usize, Option<Span>)>> = Vec::new();
        for (i, e) in dag.expressions.iter().enumerate() {
            let op = Op::try_from(e.code).ok();
            let dtype = DType::from_ir(e.dtype);
            let full = dtype_span(dtype).filter(|_| dtype != Some(DType::Bool));
            let get =
                |k: usize| -> Option<Span> { e.operands.get(k).and_then(|&o| of[o as usize]) };
            let fit = |s: Option<Span>| -> Option<Span> {
                match (s, full) {
                    (Some(s), Some(f)) if within(s, f) => Some(s),
                    _ => full,
                }
            };
            let value = match op {
                Some(Op::Const) => match dtype {
                    Some(d) if d.is_signed_int() => {
                        Some((e.int_value as i128, e.int_value as i128))
                    }
                    Some(d) if d.is_unsigned_int() => {
                        Some((e.uint_value as i128, e.uint_value as i128))
                    }
                    _ => None,
                },
                Some(Op::Position) => dag
                    .workgroup_shape
                    .get(e.axis as usize)
                    .map(|&d| (0, d as i128 - 1)),
                Some(Op::Range) => {
                    let (s, en, st) = (get(0), get(1), get(2));
                    if let (Some(s), Some(en), Some(st)) = (s, en, st) {
                        if st.0 > 0 {
                            let span = (en.1 - s.0).max(0) as u128;
                            trips[i] = Some(span.div_ceil(st.0 as u128));
                        }
                    }
                    match (s, en) {
                        (Some(s), Some(en)) => fit(Some((s.0, (en.1 - 1).max(s.0)))),
                        _ => full,
                    }
                }
                Some(Op::Add) => fit(get(0).zip(get(1)).map(|(a, b)| (a.0 + b.0, a.1 + b.1))),
                Some(Op::Sub) => fit(get(0).zip(get(1)).map(|(a, b)| (a.0 - b.1, a.1 - b.0))),
                Some(Op::Neg) => fit(get(0).map(|a| (-a.1, -a.0))),
                Some(Op::Mul) => fit(get(0).zip(get(1)).and_then(|(a, b)| {
                    let c = [
                        a.0.checked_mul(b.0)?,
                        a.0.checked_mul(b.1)?,
                        a.1.checked_mul(b.0)?,
                        a.1.checked_mul(b.1)?,
                    ];
                    Some((*c.iter().min()?, *c.iter().max()?))
                })),
                Some(Op::Min) => fit(get(0)
                    .zip(get(1))
                    .map(|(a, b)| (a.0.min(b.0), a.1.min(b.1)))),
                Some(Op::Max) => fit(get(0)
                    .zip(get(1))
                    .map(|(a, b)| (a.0.max(b.0), a.1.max(b.1)))),
                Some(Op::Select) => fit(get(1)
                    .zip(get(2))
                    .map(|(a, b)| (a.0.min(b.0), a.1.max(b.1)))),
                // An integer cast keeps the value when it fits the target (else it wraps).
                Some(Op::Cast) => fit(get(0)),
                _ => full,
            };
            of[i] = value;
            match op {
                Some(Op::If) => {
                    let mut saved = Vec::new();
                    if let Some(&c) = e.operands.first() {
                        let mut found = Vec::new();
                        constraints(dag, &of, c as usize, &mut found, 0);
                        for (id, (lo, hi)) in found {
                            let Some(old) = of[id] else { continue };
                            saved.push((id, of[id]));
                            of[id] = Some((old.0.max(lo), old.1.min(hi).max(old.0.max(lo))));
                        }
                    }
                    frames.push(saved);
                }
                Some(Op::Range | Op::WhileBegin) => frames.push(Vec::new()),
                Some(Op::Else) => {
                    if let Some(frame) = frames.last_mut() {
                        for (id, old) in frame.drain(..).rev() {
                            of[id] = old;
                        }
                    }
                }
                Some(Op::EndIf | Op::EndRange | Op::WhileEnd) => {
                    for (id, old) in frames.pop().unwrap_or_default().into_iter().rev() {
                        of[id] = old;
                    }
                }
                _ => {}
            }
        }
        Intervals { of, trips }
    }

    /// The first thing in `dag` that could fault for some worker, in words: an access whose
    /// index may leave its tensor, a RANGE whose step may be <= 0, or a while loop (which
    /// may not end). `None` when no worker can fault.
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
                    for (axis, (&ix, &size)) in e.operands.iter().zip(shape).enumerate() {
                        let ok = self.of[ix as usize]
                            .is_some_and(|(lo, hi)| lo >= 0 && hi < size as i128);
                        if !ok {
                            return Some(format!(
                                "its access %{i} may index axis {axis} outside its size {size}"
                            ));
                        }
                    }
                }
                Ok(Op::Range) => {
                    let step = e.operands.get(2).and_then(|&s| self.of[s as usize]);
                    if step.is_none_or(|(lo, _)| lo <= 0) {
                        return Some(format!("its loop %{i} may have a step <= 0"));
                    }
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

/// Collects the constraints that hold when the bool expression `cond` is true.
fn constraints(
    dag: &ir::ExpressionDag,
    of: &[Option<Span>],
    cond: usize,
    out: &mut Vec<Constraint>,
    depth: usize,
) {
    let Some(e) = dag.expressions.get(cond) else {
        return;
    };
    if depth > 16 || e.operands.len() != 2 {
        return;
    }
    let (a, b) = (e.operands[0] as usize, e.operands[1] as usize);
    let constant = |id: usize| of[id].filter(|(lo, hi)| lo == hi).map(|s| s.0);
    let is_int = |id: usize| {
        dag.expressions
            .get(id)
            .and_then(|x| DType::from_ir(x.dtype))
            .is_some_and(|d| d.is_int())
    };
    let op = Op::try_from(e.code).ok();
    if op == Some(Op::And) {
        constraints(dag, of, a, out, depth + 1);
        constraints(dag, of, b, out, depth + 1);
        return;
    }
    // A variable or an accumulator names a value that may change inside the branch: only
    // immutable values are narrowed.
    let mutable = |id: usize| {
        dag.expressions
            .get(id)
            .is_some_and(|x| x.code == Op::Variable as i32 || x.code == Op::Accumulator as i32)
    };
    if !is_int(a) || !is_int(b) || mutable(a) || mutable(b) {
        return;
    }
    // Normalise to `x OP c`.
    let (x, c, op) = match (constant(a), constant(b)) {
        (None, Some(c)) => (a, c, op),
        (Some(c), None) => (
            b,
            c,
            match op {
                Some(Op::Lt) => Some(Op::Gt),
                Some(Op::Le) => Some(Op::Ge),
                Some(Op::Gt) => Some(Op::Lt),
                Some(Op::Ge) => Some(Op::Le),
                other => other,
            },
        ),
        _ => return,
    };
    let span = match op {
        Some(Op::Lt) => (i128::MIN, c - 1),
        Some(Op::Le) => (i128::MIN, c),
        Some(Op::Gt) => (c + 1, i128::MAX),
        Some(Op::Ge) => (c, i128::MAX),
        Some(Op::Eq) => (c, c),
        _ => return,
    };
    out.push((x, span));
}

#[cfg(test)]
mod tests {
    use super::*;
    use ovl_ir::builder::Builder;

    #[test]
    fn positions_loops_and_guarded_neighbours() {
        // out[i] = x[i - 1] when i > 0, for i in 0..5; and a loop k in 0..3 reading x[k + i].
        let mut b = Builder::new("t", &[5]);
        let x = b.input(DType::F32, &[8]);
        let out = b.output(DType::F32, &[5]);
        let i = b.position(0);
        let one = b.i64(1);
        let zero = b.i64(0);
        let left = b.op(Op::Sub, &[i, one]);
        let cond = b.op(Op::Gt, &[i, zero]);
        b.if_(cond);
        let inside = b.op(Op::Sub, &[i, one]);
        let v = b.read(TensorKind::Input, x, &[inside]);
        b.write(TensorKind::Output, out, &[i], v);
        b.end_if();
        let three = b.i64(3);
        let k = b.range(zero, three, one);
        let at = b.op(Op::Add, &[k, i]);
        b.read(TensorKind::Input, x, &[at]);
        b.end_range();
        let dag = b.build();
        let iv = Intervals::analyse(&dag);
        assert_eq!(iv.of[i as usize], Some((0, 4)));
        assert_eq!(iv.of[left as usize], Some((-1, 3)));
        assert_eq!(iv.of[inside as usize], Some((0, 3)));
        assert_eq!(iv.of[k as usize], Some((0, 2)));
        assert_eq!(iv.of[at as usize], Some((0, 6)));
        assert_eq!(iv.trips[k as usize], Some(3));
        assert_eq!(iv.first_possible_fault(&dag), None);
        assert_eq!(dtype_span(Some(DType::U8)), Some((0, 255)));
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
}

//! How index expressions move: by how much a value changes when a loop's index or a position
//! of the workgroup steps by one. One analysis for the questions the optimizer and the code
//! generators ask about memory access: whether neighbouring workers read neighbouring
//! elements (`lockstep`, fusion's cost model), whether a loop walks a row or a column, whether
//! every worker along an axis reads the same element.

use crate::ir::Op;
use crate::typed::{Inst, Kernel, ValueId};
use crate::Literal;
use std::collections::HashMap;

/// What an index moves with, by how much.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Coefficient {
    /// It does not move.
    Fixed,
    /// It moves by this much per step.
    By(i64),
    /// It moves in a way the analysis does not follow.
    Unknown,
}

/// The variable an index may move with: a loop's index or a position axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Var {
    /// The index of the RANGE loop with this value id.
    Loop(ValueId),
    /// The position along this workgroup axis.
    Position(usize),
}

/// How the values of a kernel move with its loops' indices and its positions (memoized).
pub struct Motion<'a> {
    kernel: &'a Kernel,
    memo: HashMap<(ValueId, Var), Coefficient>,
}

impl<'a> Motion<'a> {
    /// The analysis of `kernel`; values are analysed when first asked about.
    pub fn new(kernel: &'a Kernel) -> Motion<'a> {
        Motion {
            kernel,
            memo: HashMap::new(),
        }
    }

    /// Whether an access at `indices` walks memory one element at a time as `var` steps: its
    /// last index moves by ±1 and no other index moves.
    pub fn follows(&mut self, indices: &[ValueId], var: Var) -> bool {
        let Some((&last, others)) = indices.split_last() else {
            return false;
        };
        matches!(self.coefficient(last, var), Coefficient::By(1 | -1))
            && others
                .iter()
                .all(|&o| self.coefficient(o, var) == Coefficient::Fixed)
    }

    /// Whether no index of `indices` moves with `var`.
    pub fn fixed(&mut self, indices: &[ValueId], var: Var) -> bool {
        indices
            .iter()
            .all(|&o| self.coefficient(o, var) == Coefficient::Fixed)
    }

    /// How value `v` moves with `var`.
    pub fn coefficient(&mut self, v: ValueId, var: Var) -> Coefficient {
        if let Some(&c) = self.memo.get(&(v, var)) {
            return c;
        }
        let c = self.compute(v, var);
        self.memo.insert((v, var), c);
        c
    }

    fn compute(&mut self, v: ValueId, var: Var) -> Coefficient {
        use Coefficient::{By, Fixed, Unknown};
        let x = &self.kernel.exprs[v as usize];
        match x.inst {
            Inst::Const(_) | Inst::Symbol { .. } => Fixed,
            Inst::Position { axis } => {
                if var == Var::Position(axis as usize) {
                    By(1)
                } else {
                    Fixed
                }
            }
            Inst::Range { .. } => {
                if var == Var::Loop(v) {
                    By(1)
                } else {
                    Fixed
                }
            }
            Inst::Cast { value } if x.dtype.is_some_and(|d| d.is_int()) => {
                self.coefficient(value, var)
            }
            Inst::Binary {
                op: op @ (Op::Add | Op::Sub),
                a,
                b,
            } => {
                let sign = if op == Op::Add { 1 } else { -1 };
                match (self.coefficient(a, var), self.coefficient(b, var)) {
                    (Fixed, Fixed) => Fixed,
                    (By(p), Fixed) => By(p),
                    (Fixed, By(q)) => By(sign * q),
                    (By(p), By(q)) => match p.checked_add(sign * q) {
                        Some(0) => Fixed,
                        Some(r) => By(r),
                        None => Unknown,
                    },
                    _ => Unknown,
                }
            }
            // An index divided by 1, or taken modulo a constant (the broadcasts and reshapes
            // of an index substitution write `(k / 1) % n`), moves with its operand: the
            // modulo wraps at most once every `n` steps.
            Inst::Binary {
                op: op @ (Op::Div | Op::Mod),
                a,
                b,
            } if x.dtype.is_some_and(|d| d.is_int()) => {
                let divisor = match self.kernel.exprs[b as usize].inst {
                    Inst::Const(Literal::Int(n)) => Some(n),
                    Inst::Const(Literal::UInt(n)) => i64::try_from(n).ok(),
                    _ => None,
                };
                match (self.coefficient(a, var), self.coefficient(b, var), divisor) {
                    (Fixed, Fixed, _) => Fixed,
                    (c, Fixed, Some(1)) if op == Op::Div => c,
                    (c @ By(_), Fixed, Some(n)) if op == Op::Mod && n > 0 => c,
                    _ => Unknown,
                }
            }
            Inst::Binary { op: Op::Mul, a, b } => {
                let constant = |w: ValueId| match self.kernel.exprs[w as usize].inst {
                    Inst::Const(Literal::Int(n)) => Some(n),
                    Inst::Const(Literal::UInt(n)) => i64::try_from(n).ok(),
                    _ => None,
                };
                match (self.coefficient(a, var), self.coefficient(b, var)) {
                    (Fixed, Fixed) => Fixed,
                    (By(p), Fixed) => constant(b)
                        .and_then(|c| p.checked_mul(c))
                        .map_or(Unknown, By),
                    (Fixed, By(q)) => constant(a)
                        .and_then(|c| q.checked_mul(c))
                        .map_or(Unknown, By),
                    _ => Unknown,
                }
            }
            // A variable or an accumulator changes as the program runs: whether it moves with
            // `var` is not followed.
            Inst::Variable { .. } | Inst::Accumulator { .. } => Unknown,
            _ => {
                let operands: Vec<ValueId> = self.kernel.operands(v as usize).collect();
                if operands
                    .into_iter()
                    .all(|o| self.coefficient(o, var) == Fixed)
                {
                    Fixed
                } else {
                    Unknown
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    #[test]
    fn a_broadcast_substituted_index_moves_with_its_loop() {
        // `x[p0, (k / 1) % 300]` in a loop over k, as index substitution writes the inverse of
        // a broadcast; `x[p0, k / 2]` does not walk element by element.
        use crate::builder::Builder;
        use crate::dtype::DType;
        use crate::ir::TensorKind;
        let mut b = Builder::new("spread", &[16, 1]);
        let x = b.input(DType::F32, &[16, 300]);
        let out = b.output(DType::F32, &[16, 1]);
        let p0 = b.position(0);
        let zero = b.i64(0);
        let one = b.i64(1);
        let two = b.i64(2);
        let n = b.i64(300);
        let k = b.range(zero, n, one);
        let q = b.push(Op::Div, Some(DType::I64), &[k, one]);
        let r = b.push(Op::Mod, Some(DType::I64), &[q, n]);
        let v = b.read(TensorKind::Input, x, &[p0, r]);
        let half = b.push(Op::Div, Some(DType::I64), &[k, two]);
        let w = b.read(TensorKind::Input, x, &[p0, half]);
        let s = b.push(Op::Add, Some(DType::F32), &[v, w]);
        b.end_range();
        let _ = (out, s);
        let dag = b.build();
        let kernel = Kernel::from_validated(&dag);
        let mut motion = Motion::new(&kernel);
        assert!(motion.follows(&[p0, r], Var::Loop(k)));
        assert!(!motion.follows(&[p0, half], Var::Loop(k)));
        assert_eq!(motion.coefficient(half, Var::Loop(k)), Coefficient::Unknown);
    }

    #[test]
    fn a_product_reads_along_its_loop_and_across_its_workers() {
        // `matmul`: worker (i, j) reads a[i, q] and b[q, j] in its loop over q.
        let dag = fixtures::matmul(3, 4, 5);
        let kernel = Kernel::decode(&dag).unwrap();
        let mut motion = Motion::new(&kernel);
        let mut reads = kernel
            .exprs
            .iter()
            .enumerate()
            .filter_map(|(i, x)| match &x.inst {
                Inst::Read { indices, .. } => Some((i, indices.clone())),
                _ => None,
            });
        let (ia, a) = reads.next().unwrap();
        let (_, b) = reads.next().unwrap();
        let q = kernel.enclosing_loops(ia).next().unwrap();
        assert!(motion.follows(&a, Var::Loop(q)));
        assert!(motion.fixed(&a, Var::Position(1)));
        assert!(!motion.follows(&b, Var::Loop(q)));
        assert!(motion.follows(&b, Var::Position(1)));
        assert!(motion.fixed(&b, Var::Position(0)));
        assert_eq!(motion.coefficient(b[0], Var::Loop(q)), Coefficient::By(1));
    }
}

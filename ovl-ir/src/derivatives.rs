//! The derivative rules of the op table: for each opcode of [`crate::ops::TABLE`] that computes
//! a float from floats, the partial derivative of its result with respect to each operand,
//! written once as a small expression over the operands and the result. The gradient pass
//! ([`crate::grad`]) reads this table and nothing else to differentiate an operation; a new op
//! states its rule here (the match is exhaustive over `Op`, so a new opcode does not compile
//! without one).
//!
//! ```
//! use ovl_ir::derivatives::{rule, Partial, Rule};
//! use ovl_ir::ir::Op;
//!
//! // d/da exp(a) = exp(a): the result itself.
//! assert_eq!(rule(Op::Exp), Rule::Partials(&[Partial::R]));
//! // Comparisons give a bool: no gradient flows through them.
//! assert_eq!(rule(Op::Lt), Rule::NoFloatResult);
//! ```

use crate::ir::Op;

/// A partial derivative as an expression of the operation's operands and result, evaluated in
/// the operation's float dtype.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Partial {
    /// Operand 0.
    A,
    /// Operand 1.
    B,
    /// Operand 2.
    C,
    /// The operation's result.
    R,
    /// A literal.
    K(f64),
    /// A unary op of the table applied to a partial.
    Un(Op, &'static Partial),
    /// A binary op of the table (arithmetic) applied to two partials.
    Bin(Op, &'static Partial, &'static Partial),
    /// `if cond { t } else { f }`, where `cond` is a comparison (a [`Partial::Cmp`]) or a test.
    Sel(&'static Partial, &'static Partial, &'static Partial),
    /// A comparison or a logical op of the table: a bool, only as a [`Partial::Sel`] condition.
    Cmp(Op, &'static Partial, &'static Partial),
}

/// How an opcode's result depends on its operands, for the gradient pass.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Rule {
    /// Differentiable: one partial per operand (the adjoint of operand `i` grows by the result's
    /// adjoint times `partials[i]`).
    Partials(&'static [Partial]),
    /// Piecewise constant (`floor`, `ceil`, `round`): the derivative is zero wherever it exists,
    /// so no gradient flows through it (as in the other frameworks).
    Zero,
    /// `select(c, t, f)`: the adjoint goes to `t` where `c` holds and to `f` elsewhere (routed,
    /// not multiplied by 0 or 1, so an infinite adjoint does not become NaN in the other branch).
    Route,
    /// The result is a bool or an integer on every dtype this op accepts as a float (a test, a
    /// comparison, a logical op): nothing flows.
    NoFloatResult,
    /// Not an elementwise operation (control flow, tensor access, variables, reductions): the
    /// pass handles it structurally or reports it.
    Structural,
}

use Op::*;
use Partial::{Bin, Cmp, Sel, Un, A, B, K, R};

const LN2: f64 = std::f64::consts::LN_2;
const LN10: f64 = std::f64::consts::LN_10;
/// 2 / sqrt(pi), the factor of erf's derivative.
const TWO_OVER_SQRT_PI: f64 = std::f64::consts::FRAC_2_SQRT_PI;

/// `a * a`.
const A2: Partial = Bin(Mul, &A, &A);
/// `1 - a * a`.
const ONE_MINUS_A2: Partial = Bin(Sub, &K(1.0), &A2);

/// The derivative rule of `op`.
pub fn rule(op: Op) -> Rule {
    match op {
        Neg => Rule::Partials(&[K(-1.0)]),
        // sign(a), 0 at 0 (NaN stays NaN through the product).
        Abs => Rule::Partials(&[Sel(
            &Cmp(Lt, &A, &K(0.0)),
            &K(-1.0),
            &Sel(&Cmp(Gt, &A, &K(0.0)), &K(1.0), &K(0.0)),
        )]),
        // 1 / (2 sqrt(a)).
        Sqrt => Rule::Partials(&[Bin(Div, &K(0.5), &R)]),
        // -1/2 a^-3/2 = -0.5 * r / a.
        Rsqrt => Rule::Partials(&[Bin(Div, &Bin(Mul, &K(-0.5), &R), &A)]),
        Exp => Rule::Partials(&[R]),
        Exp2 => Rule::Partials(&[Bin(Mul, &R, &K(LN2))]),
        Expm1 => Rule::Partials(&[Bin(Add, &R, &K(1.0))]),
        Log => Rule::Partials(&[Bin(Div, &K(1.0), &A)]),
        Log2 => Rule::Partials(&[Bin(Div, &K(1.0), &Bin(Mul, &A, &K(LN2)))]),
        Log10 => Rule::Partials(&[Bin(Div, &K(1.0), &Bin(Mul, &A, &K(LN10)))]),
        Log1p => Rule::Partials(&[Bin(Div, &K(1.0), &Bin(Add, &A, &K(1.0)))]),
        Sin => Rule::Partials(&[Un(Cos, &A)]),
        Cos => Rule::Partials(&[Un(Neg, &Un(Sin, &A))]),
        Tan => Rule::Partials(&[Bin(Add, &K(1.0), &Bin(Mul, &R, &R))]),
        Asin => Rule::Partials(&[Un(Rsqrt, &ONE_MINUS_A2)]),
        Acos => Rule::Partials(&[Un(Neg, &Un(Rsqrt, &ONE_MINUS_A2))]),
        Atan => Rule::Partials(&[Bin(Div, &K(1.0), &Bin(Add, &K(1.0), &A2))]),
        Sinh => Rule::Partials(&[Un(Cosh, &A)]),
        Cosh => Rule::Partials(&[Un(Sinh, &A)]),
        Tanh => Rule::Partials(&[Bin(Sub, &K(1.0), &Bin(Mul, &R, &R))]),
        Sigmoid => Rule::Partials(&[Bin(Mul, &R, &Bin(Sub, &K(1.0), &R))]),
        Erf => Rule::Partials(&[Bin(Mul, &K(TWO_OVER_SQRT_PI), &Un(Exp, &Un(Neg, &A2)))]),
        Ceil | Floor | Round => Rule::Zero,
        Isinf | Isfinite | Isnan | Not => Rule::NoFloatResult,
        Add => Rule::Partials(&[K(1.0), K(1.0)]),
        Sub => Rule::Partials(&[K(1.0), K(-1.0)]),
        Mul => Rule::Partials(&[B, A]),
        // d/db (a / b) = -(a / b) / b.
        Div => Rule::Partials(&[Bin(Div, &K(1.0), &B), Un(Neg, &Bin(Div, &R, &B))]),
        // fmod(a, b) = a - trunc(a / b) * b: 1, and -trunc(a / b) = -(a - r) / b.
        Mod => Rule::Partials(&[K(1.0), Un(Neg, &Bin(Div, &Bin(Sub, &A, &R), &B))]),
        // The operand that is the result gets the gradient; on a tie the first (`a`). fmin and
        // fmax ignore a NaN operand, so a NaN `b` sends it to `a` and a NaN `a` to `b`.
        Min => Rule::Partials(&[
            Sel(&Cmp(Or, &Cmp(Le, &A, &B), &Un(Isnan, &B)), &K(1.0), &K(0.0)),
            Sel(&Cmp(Or, &Cmp(Le, &A, &B), &Un(Isnan, &B)), &K(0.0), &K(1.0)),
        ]),
        Max => Rule::Partials(&[
            Sel(&Cmp(Or, &Cmp(Ge, &A, &B), &Un(Isnan, &B)), &K(1.0), &K(0.0)),
            Sel(&Cmp(Or, &Cmp(Ge, &A, &B), &Un(Isnan, &B)), &K(0.0), &K(1.0)),
        ]),
        // b * a^(b-1); r * ln(a) where a > 0, else 0 (the limit the other frameworks take).
        Pow => Rule::Partials(&[
            Bin(Mul, &B, &Bin(Pow, &A, &Bin(Sub, &B, &K(1.0)))),
            Sel(&Cmp(Gt, &A, &K(0.0)), &Bin(Mul, &R, &Un(Log, &A)), &K(0.0)),
        ]),
        // atan2(y = a, x = b): (b, -a) / (a^2 + b^2).
        Atan2 => Rule::Partials(&[
            Bin(Div, &B, &Bin(Add, &A2, &Bin(Mul, &B, &B))),
            Un(Neg, &Bin(Div, &A, &Bin(Add, &A2, &Bin(Mul, &B, &B)))),
        ]),
        Lt | Le | Gt | Ge | Eq | Ne | And | Or => Rule::NoFloatResult,
        BitAnd | BitOr | BitXor | Shl | Shr => Rule::NoFloatResult,
        Select => Rule::Route,
        Fma => Rule::Partials(&[B, A, K(1.0)]),
        Unspecified | Const | Position | Read | Write | Variable | Assign | LocalTensor | Cast
        | Symbol | If | Else | EndIf | Range | EndRange | WhileBegin | WhileCond | WhileEnd
        | Accumulator | Accumulate => Rule::Structural,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{Category, TABLE};

    /// Every elementwise row that accepts floats and gives a float has a rule that fits its
    /// arity; those giving a bool have none.
    #[test]
    fn every_float_op_of_the_table_has_a_rule() {
        for row in &TABLE {
            let r = rule(row.op);
            match row.category {
                Category::Unary | Category::Binary | Category::Ternary => {
                    if !row.operands.accepts(crate::DType::F64) {
                        assert_eq!(r, Rule::NoFloatResult, "{}", row.name);
                        continue;
                    }
                    if row.result == crate::ops::ResultRule::Bool {
                        assert_eq!(r, Rule::NoFloatResult, "{}", row.name);
                        continue;
                    }
                    match r {
                        Rule::Partials(p) => assert_eq!(Some(p.len()), row.arity, "{}", row.name),
                        Rule::Zero | Rule::Route => {}
                        other => panic!("{}: {other:?}", row.name),
                    }
                }
                Category::Compare => assert_eq!(r, Rule::NoFloatResult, "{}", row.name),
                _ => assert_eq!(r, Rule::Structural, "{}", row.name),
            }
        }
    }

    /// The partials use only what the op has: no `C` in a binary op, no `B` in a unary one.
    #[test]
    fn partials_name_only_existing_operands() {
        fn uses(p: &Partial, n: usize) -> bool {
            match p {
                A => n >= 1,
                B => n >= 2,
                Partial::C => n >= 3,
                R | K(_) => true,
                Un(_, x) => uses(x, n),
                Bin(_, x, y) | Cmp(_, x, y) => uses(x, n) && uses(y, n),
                Sel(c, t, f) => uses(c, n) && uses(t, n) && uses(f, n),
            }
        }
        for row in &TABLE {
            if let Rule::Partials(ps) = rule(row.op) {
                for p in ps {
                    assert!(uses(p, row.arity.unwrap_or(0)), "{}", row.name);
                }
            }
        }
    }
}

//! Control flow that dispatches on its condition's type: a trace-time `bool` keeps Rust's
//! meaning, a staged `Expr<bool>` emits IF / RANGE / WHILE. The `#[operator]` rewrite calls these.

use super::expr::{Expr, Var};
use super::state::{self, RegionKind};
use crate::dtype::{DType, Literal};
use crate::host::Scalar;
use crate::ir;
use std::panic::Location;

/// A condition: a trace-time `bool` or a staged `Expr<bool>`/`Var<bool>`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be used as a condition",
    note = "conditions are `bool` (trace time) or `Expr<bool>` (staged): compare with `<`, `==`, ... or use `isnan(..)`"
)]
pub trait Condition {
    #[track_caller]
    fn into_cond(self) -> Cond;
}

/// An evaluated condition.
#[derive(Clone, Copy, Debug)]
pub enum Cond {
    Plain(bool),
    Staged(Expr<bool>),
}

impl Condition for bool {
    fn into_cond(self) -> Cond {
        Cond::Plain(self)
    }
}
impl Condition for Expr<bool> {
    fn into_cond(self) -> Cond {
        Cond::Staged(self)
    }
}
impl Condition for Var<bool> {
    #[track_caller]
    fn into_cond(self) -> Cond {
        Cond::Staged(self.get())
    }
}

/// An `if` being traced: `then_branch`, optionally `else_branch`, then `end`.
#[derive(Debug)]
pub struct IfGuard {
    cond: Cond,
    /// Where the `if` is, for the error if its staged branch is left early.
    at: &'static Location<'static>,
    /// A staged branch is open: set by `then_branch`, cleared by `end`.
    open: std::cell::Cell<bool>,
}

/// Starts an `if` statement on `c`.
#[track_caller]
pub fn cond(c: impl Condition) -> IfGuard {
    IfGuard {
        cond: c.into_cond(),
        at: Location::caller(),
        open: std::cell::Cell::new(false),
    }
}

/// A staged `if` dropped without `end`: a `break`, `continue` or `return` jumped out of its
/// branch (possible only from a trace-time loop or function; the macro rejects those jumps out
/// of staged loops). Records the mistake and closes the branch so the IR stays well formed.
impl Drop for IfGuard {
    fn drop(&mut self) {
        if !self.open.get() || std::thread::panicking() {
            return;
        }
        let at = self.at;
        state::with(|s| {
            s.error(
                at,
                "a `break`, `continue` or `return` leaves this staged `if` early, but a staged \
                 branch always runs to its end (the IR has no jumps): set a `variable(..)` flag \
                 in the branch and test it afterwards (in a `while` condition or a following `if`)",
            );
            s.close_region(&[RegionKind::If, RegionKind::Else]);
            s.push_op(ir::Op::EndIf, None, vec![]);
        });
    }
}

impl IfGuard {
    /// Whether to run the `then` block (always, when staged: it emits IF first).
    #[track_caller]
    pub fn then_branch(&self) -> bool {
        match self.cond {
            Cond::Plain(b) => b,
            Cond::Staged(c) => {
                let loc = Location::caller();
                state::with(|s| {
                    let c = s.operand(loc, c.trace, c.id);
                    s.push_op(ir::Op::If, None, vec![c]);
                    s.open_region(RegionKind::If);
                });
                self.open.set(true);
                true
            }
        }
    }

    /// Whether to run the `else` block (always, when staged: it emits ELSE first).
    #[track_caller]
    pub fn else_branch(&self) -> bool {
        match self.cond {
            Cond::Plain(b) => !b,
            Cond::Staged(_) => {
                state::with(|s| {
                    s.close_region(&[RegionKind::If]);
                    s.push_op(ir::Op::Else, None, vec![]);
                    s.open_region(RegionKind::Else);
                });
                true
            }
        }
    }

    /// Ends the statement (emits END_IF when staged).
    #[track_caller]
    pub fn end(self) {
        if let Cond::Staged(_) = self.cond {
            state::with(|s| {
                s.close_region(&[RegionKind::If, RegionKind::Else]);
                s.push_op(ir::Op::EndIf, None, vec![]);
            });
        }
        self.open.set(false);
    }
}

/// The condition of an `if` used as a value: it must be a trace-time `bool`.
#[diagnostic::on_unimplemented(
    message = "this `if` produces a value, so its condition must be a trace-time `bool`, not `{Self}`",
    note = "for a staged condition use `select(cond, a, b)`, or declare `let mut v = variable(..)` and assign it in each branch"
)]
pub trait PlainCond {
    fn plain(self) -> bool;
}
impl PlainCond for bool {
    fn plain(self) -> bool {
        self
    }
}

/// The condition of a value-producing `if`.
pub fn plain_cond(c: impl PlainCond) -> bool {
    c.plain()
}

/// A loop bound or step: a trace-time integer or a staged integer.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a loop bound",
    note = "loop bounds are integers, trace-time (`usize`, `i32`, ...) or staged (`Expr<i64>`, ...)"
)]
pub trait Bound {
    #[track_caller]
    fn to_bound(self) -> BoundValue;
}

/// A loop bound, evaluated.
#[derive(Clone, Copy, Debug)]
pub enum BoundValue {
    Plain(i128),
    Staged(u32, u32),
}

macro_rules! plain_bound {
    ($($t:ty),*) => {$(
        impl Bound for $t {
            #[allow(clippy::unnecessary_cast)]
            fn to_bound(self) -> BoundValue { BoundValue::Plain(self as i128) }
        }
    )*};
}
plain_bound!(i8, i16, i32, i64, isize, u8, u16, u32, u64, usize);

macro_rules! staged_bound {
    ($($t:ty),*) => {$(
        impl Bound for Expr<$t> {
            fn to_bound(self) -> BoundValue { BoundValue::Staged(self.trace, self.id) }
        }
        impl Bound for Var<$t> {
            #[track_caller]
            fn to_bound(self) -> BoundValue { self.get().to_bound() }
        }
    )*};
}
staged_bound!(i8, i16, i32, i64, u8, u16, u32, u64);

/// A staged `for` loop being traced.
#[derive(Debug)]
pub struct RangeGuard {
    index: Expr<i64>,
}

/// `for i in start..end` with a step: emits RANGE; the body is traced once.
#[track_caller]
pub fn range(start: impl Bound, end: impl Bound, step: impl Bound) -> RangeGuard {
    open_range(start.to_bound(), end.to_bound(), step.to_bound(), false)
}

/// `for i in start..=end` with a step.
#[track_caller]
pub fn range_inclusive(start: impl Bound, end: impl Bound, step: impl Bound) -> RangeGuard {
    open_range(start.to_bound(), end.to_bound(), step.to_bound(), true)
}

#[track_caller]
fn open_range(start: BoundValue, end: BoundValue, step: BoundValue, inclusive: bool) -> RangeGuard {
    let loc = Location::caller();
    state::with(|s| {
        if let BoundValue::Plain(v) = step {
            if v <= 0 {
                s.error(loc, format!("the loop step must be positive, got {v}"));
            }
        }
        let mut as_i64 = |b: BoundValue, what: &str| -> u32 {
            match b {
                BoundValue::Plain(v) => {
                    let v = match i64::try_from(v) {
                        Ok(v) => v,
                        Err(_) => {
                            s.error(loc, format!("the loop {what} {v} does not fit in i64"));
                            0
                        }
                    };
                    s.push_const(DType::I64, Literal::Int(v))
                }
                BoundValue::Staged(trace, id) => {
                    let id = s.operand(loc, trace, id);
                    if s.dtype_of(id) == Some(DType::I64) {
                        id
                    } else {
                        s.push_op(ir::Op::Cast, Some(DType::I64), vec![id])
                    }
                }
            }
        };
        let start = as_i64(start, "start");
        let mut end = as_i64(end, "end");
        let step = as_i64(step, "step");
        if inclusive {
            let one = s.push_const(DType::I64, Literal::Int(1));
            end = s.push_op(ir::Op::Add, Some(DType::I64), vec![end, one]);
        }
        let id = s.push_op(ir::Op::Range, Some(DType::I64), vec![start, end, step]);
        s.open_region(RegionKind::Range);
        RangeGuard {
            index: Expr::from_id(s.id, id),
        }
    })
}

/// `for i in (start..end).step_by(step).rev()`: the elements of the ascending range, last
/// first. Lowered onto an ascending RANGE over a counter `k` in `0..count`, with
/// `i = last - k * step`, so that every backend runs it unchanged.
#[track_caller]
pub fn range_rev(start: impl Bound, end: impl Bound, step: impl Bound) -> RangeGuard {
    open_descending(start.to_bound(), end.to_bound(), step.to_bound(), false)
}

/// `for i in (start..=end).step_by(step).rev()`.
#[track_caller]
pub fn range_inclusive_rev(start: impl Bound, end: impl Bound, step: impl Bound) -> RangeGuard {
    open_descending(start.to_bound(), end.to_bound(), step.to_bound(), true)
}

/// `for i in arange(start, stop, step)`: `start, start + step, ...` while below `stop` for a
/// positive step, above `stop` for a negative one (numpy's `arange`, Python's `range`). A zero
/// step is a trace error when it is a trace-time value, and a run-time fault when staged (as for
/// a RANGE whose step is not positive). Lowered like [`range_rev`].
#[track_caller]
pub fn arange(start: impl Bound, stop: impl Bound, step: impl Bound) -> RangeGuard {
    let (start, stop, step) = (start.to_bound(), stop.to_bound(), step.to_bound());
    let loc = Location::caller();
    if let (BoundValue::Plain(a), BoundValue::Plain(b), BoundValue::Plain(s)) = (start, stop, step)
    {
        if s == 0 {
            state::with(|st| st.error(loc, "the step of `arange` must not be zero"));
            return counted(
                Counted::Plain {
                    first: a,
                    stride: 1,
                    count: 0,
                },
                loc,
            );
        }
        let count = if s > 0 {
            ceil_div(b - a, s)
        } else {
            ceil_div(a - b, -s)
        };
        return counted(
            Counted::Plain {
                first: a,
                stride: s,
                count,
            },
            loc,
        );
    }
    state::with(|s| {
        let a = bound_i64(s, loc, start, "start");
        let b = bound_i64(s, loc, stop, "end");
        let st = bound_i64(s, loc, step, "step");
        let zero = s.push_const(DType::I64, Literal::Int(0));
        let one = s.push_const(DType::I64, Literal::Int(1));
        let positive = s.push_op(ir::Op::Gt, Some(DType::Bool), vec![st, zero]);
        let up = s.push_op(ir::Op::Sub, Some(DType::I64), vec![b, a]);
        let down = s.push_op(ir::Op::Sub, Some(DType::I64), vec![a, b]);
        let dist = s.push_op(ir::Op::Select, Some(DType::I64), vec![positive, up, down]);
        let abs = s.push_op(ir::Op::Abs, Some(DType::I64), vec![st]);
        // A zero step: divide by one (never by zero), and let the RANGE fault on step 0.
        let nonzero = s.push_op(ir::Op::Ne, Some(DType::Bool), vec![st, zero]);
        let divisor = s.push_op(ir::Op::Max, Some(DType::I64), vec![abs, one]);
        let count = staged_ceil_div(s, dist, divisor);
        let loop_step = s.push_op(ir::Op::Select, Some(DType::I64), vec![nonzero, one, zero]);
        Counted::Staged {
            first: a,
            stride: st,
            count,
            loop_step,
        }
    })
    .open(loc)
}

/// `ceil(n / d)` for `d > 0`, and 0 when `n <= 0`.
fn ceil_div(n: i128, d: i128) -> i128 {
    if n <= 0 {
        0
    } else {
        (n + d - 1) / d
    }
}

/// [`ceil_div`] in the IR (`d > 0`); `n` is clamped at 0 first, so nothing overflows for the
/// bounds of a loop.
fn staged_ceil_div(s: &mut state::TraceState, n: u32, d: u32) -> u32 {
    let zero = s.push_const(DType::I64, Literal::Int(0));
    let one = s.push_const(DType::I64, Literal::Int(1));
    let n = s.push_op(ir::Op::Max, Some(DType::I64), vec![n, zero]);
    let dm1 = s.push_op(ir::Op::Sub, Some(DType::I64), vec![d, one]);
    let sum = s.push_op(ir::Op::Add, Some(DType::I64), vec![n, dm1]);
    s.push_op(ir::Op::Div, Some(DType::I64), vec![sum, d])
}

/// A loop lowered onto a counter: `i = first + k * stride` for `k` in `0..count`.
enum Counted {
    Plain {
        first: i128,
        stride: i128,
        count: i128,
    },
    /// Expression ids; `loop_step` is the RANGE's step (1, or 0 to fault).
    Staged {
        first: u32,
        stride: u32,
        count: u32,
        loop_step: u32,
    },
}

impl Counted {
    #[track_caller]
    fn open(self, loc: &'static Location<'static>) -> RangeGuard {
        counted(self, loc)
    }
}

fn counted(c: Counted, loc: &'static Location<'static>) -> RangeGuard {
    state::with(|s| {
        let int = |s: &mut state::TraceState, v: i128, what: &str| -> u32 {
            let v = i64::try_from(v).unwrap_or_else(|_| {
                s.error(loc, format!("the loop {what} {v} does not fit in i64"));
                0
            });
            s.push_const(DType::I64, Literal::Int(v))
        };
        let (first, stride, count, loop_step) = match c {
            Counted::Plain {
                first,
                stride,
                count,
            } => {
                let f = int(s, first, "start");
                let st = int(s, stride, "step");
                let n = int(s, count, "trip count");
                let one = s.push_const(DType::I64, Literal::Int(1));
                (f, st, n, one)
            }
            Counted::Staged {
                first,
                stride,
                count,
                loop_step,
            } => (first, stride, count, loop_step),
        };
        let zero = s.push_const(DType::I64, Literal::Int(0));
        let k = s.push_op(
            ir::Op::Range,
            Some(DType::I64),
            vec![zero, count, loop_step],
        );
        s.open_region(RegionKind::Range);
        let offset = s.push_op(ir::Op::Mul, Some(DType::I64), vec![k, stride]);
        let id = s.push_op(ir::Op::Add, Some(DType::I64), vec![first, offset]);
        RangeGuard {
            index: Expr::from_id(s.id, id),
        }
    })
}

#[track_caller]
fn open_descending(
    start: BoundValue,
    end: BoundValue,
    step: BoundValue,
    inclusive: bool,
) -> RangeGuard {
    let loc = Location::caller();
    if let BoundValue::Plain(v) = step {
        if v <= 0 {
            state::with(|s| s.error(loc, format!("the loop step must be positive, got {v}")));
            return counted(
                Counted::Plain {
                    first: 0,
                    stride: 1,
                    count: 0,
                },
                loc,
            );
        }
    }
    if let (BoundValue::Plain(a), BoundValue::Plain(b), BoundValue::Plain(st)) = (start, end, step)
    {
        let b = if inclusive { b + 1 } else { b };
        let count = ceil_div(b - a, st);
        let first = a + (count - 1).max(0) * st;
        return counted(
            Counted::Plain {
                first,
                stride: -st,
                count,
            },
            loc,
        );
    }
    state::with(|s| {
        let a = bound_i64(s, loc, start, "start");
        let mut b = bound_i64(s, loc, end, "end");
        let st = bound_i64(s, loc, step, "step");
        let zero = s.push_const(DType::I64, Literal::Int(0));
        let one = s.push_const(DType::I64, Literal::Int(1));
        if inclusive {
            b = s.push_op(ir::Op::Add, Some(DType::I64), vec![b, one]);
        }
        // A staged step that is not positive: the RANGE faults (step 0), as an ascending one.
        let positive = s.push_op(ir::Op::Gt, Some(DType::Bool), vec![st, zero]);
        let divisor = s.push_op(ir::Op::Max, Some(DType::I64), vec![st, one]);
        let dist = s.push_op(ir::Op::Sub, Some(DType::I64), vec![b, a]);
        let count = staged_ceil_div(s, dist, divisor);
        let last_k = s.push_op(ir::Op::Sub, Some(DType::I64), vec![count, one]);
        let last_k = s.push_op(ir::Op::Max, Some(DType::I64), vec![last_k, zero]);
        let span = s.push_op(ir::Op::Mul, Some(DType::I64), vec![last_k, divisor]);
        let first = s.push_op(ir::Op::Add, Some(DType::I64), vec![a, span]);
        let stride = s.push_op(ir::Op::Neg, Some(DType::I64), vec![divisor]);
        let loop_step = s.push_op(ir::Op::Select, Some(DType::I64), vec![positive, one, zero]);
        Counted::Staged {
            first,
            stride,
            count,
            loop_step,
        }
    })
    .open(loc)
}

/// A loop bound as an `i64` expression id (a constant, or the staged value cast to `i64`).
fn bound_i64(s: &mut state::TraceState, loc: &Location<'_>, b: BoundValue, what: &str) -> u32 {
    match b {
        BoundValue::Plain(v) => {
            let v = i64::try_from(v).unwrap_or_else(|_| {
                s.error(loc, format!("the loop {what} {v} does not fit in i64"));
                0
            });
            s.push_const(DType::I64, Literal::Int(v))
        }
        BoundValue::Staged(trace, id) => {
            let id = s.operand(loc, trace, id);
            if s.dtype_of(id) == Some(DType::I64) {
                id
            } else {
                s.push_op(ir::Op::Cast, Some(DType::I64), vec![id])
            }
        }
    }
}

impl RangeGuard {
    /// The loop index (a staged `i64`).
    pub fn index(&self) -> Expr<i64> {
        self.index
    }

    /// Ends the loop (emits END_RANGE).
    #[track_caller]
    pub fn end(self) {
        let loc = Location::caller();
        state::with(|s| {
            if !s.close_region(&[RegionKind::Range]) {
                s.error(
                    loc,
                    "internal: a staged `for` loop ended while another block was open",
                );
            }
            s.push_op(ir::Op::EndRange, None, vec![]);
        });
    }
}

/// A `while` loop being traced. A trace-time condition runs the Rust loop; a staged one emits
/// WHILE_BEGIN, the condition, WHILE_COND, the body (traced once) and WHILE_END.
#[derive(Debug)]
pub struct WhileLoop {
    begin: Option<u32>,
    staged: bool,
    decided: bool,
}

impl WhileLoop {
    /// Opens a tentative WHILE_BEGIN (removed again if the condition is a trace-time `bool`).
    #[track_caller]
    pub fn begin() -> WhileLoop {
        let begin = state::with(|s| {
            let id = s.push_op(ir::Op::WhileBegin, None, vec![]);
            s.open_region(RegionKind::While);
            id
        });
        WhileLoop {
            begin: Some(begin),
            staged: false,
            decided: false,
        }
    }

    /// Tests the condition; returns whether to run the body.
    #[track_caller]
    pub fn test(&mut self, c: impl Condition) -> bool {
        let c = c.into_cond();
        if !self.decided {
            self.decided = true;
            match c {
                Cond::Plain(_) => self.cancel(),
                Cond::Staged(e) => {
                    self.staged = true;
                    let loc = Location::caller();
                    state::with(|s| {
                        let e = s.operand(loc, e.trace, e.id);
                        s.push_op(ir::Op::WhileCond, None, vec![e]);
                    });
                }
            }
        }
        match c {
            Cond::Plain(b) => {
                if self.staged {
                    // A loop that became staged keeps running its body exactly once.
                    false
                } else {
                    b
                }
            }
            Cond::Staged(_) => {
                if !self.staged {
                    let loc = Location::caller();
                    state::with(|s| {
                        s.error(
                            loc,
                            "this `while` condition was a trace-time bool on the first test and a \
                             staged value later; make it staged from the start",
                        )
                    });
                    return false;
                }
                true
            }
        }
    }

    /// The tentative WHILE_BEGIN was for a trace-time loop: take it back.
    fn cancel(&mut self) {
        if let Some(begin) = self.begin.take() {
            state::with(|s| {
                s.close_region(&[RegionKind::While]);
                if s.exprs.len() as u32 == begin + 1 {
                    s.exprs.pop();
                    s.expr_region.pop();
                } else {
                    // Expressions were emitted after it: neutralize it as an unused constant.
                    let e = &mut s.exprs[begin as usize];
                    *e = ir::Expression {
                        code: ir::Op::Const as i32,
                        dtype: bool::DTYPE.to_ir() as i32,
                        ..Default::default()
                    };
                }
            });
        }
    }

    /// After the body: for a staged loop emits WHILE_END and returns true (stop the Rust loop).
    #[track_caller]
    pub fn staged_end(&mut self) -> bool {
        if self.staged {
            let loc = Location::caller();
            state::with(|s| {
                if !s.close_region(&[RegionKind::While]) {
                    s.error(
                        loc,
                        "internal: a staged `while` loop ended while another block was open",
                    );
                }
                s.push_op(ir::Op::WhileEnd, None, vec![]);
            });
            true
        } else {
            false
        }
    }

    /// A `break` in the body: only meaningful for a trace-time loop.
    #[track_caller]
    pub fn on_break(&self) {
        self.reject_jump("break");
    }

    /// A `continue` in the body: only meaningful for a trace-time loop.
    #[track_caller]
    pub fn on_continue(&self) {
        self.reject_jump("continue");
    }

    #[track_caller]
    fn reject_jump(&self, what: &str) {
        if self.staged {
            let loc = Location::caller();
            state::with(|s| {
                s.error(
                    loc,
                    format!(
                        "`{what}` inside a `while` on a staged condition is not supported; fold \
                         the exit into the condition (e.g. a `variable(true)` flag)"
                    ),
                )
            });
        }
    }
}

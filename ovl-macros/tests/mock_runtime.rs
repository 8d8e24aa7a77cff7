//! The expansion, compiled and run against a small mock of `::ovl::__rt` with the signatures of
//! the real one (`extern crate self as ovl` makes this test crate answer to `::ovl`).
//!
//! This checks what the snapshot tests cannot: that the expansion type-checks and borrow-checks
//! (e.g. `x = x + 1` on a `Var`), that the generated names resolve, that trace-time values keep
//! their Rust meaning while staged ones are recorded, and that `#[track_caller]` runtime
//! functions see the user's line. `cargo clippy --all-targets` also lints these expansions.
//!
//! The mock logs every staged operation, with the line it was called from for control flow.

extern crate self as ovl;

use ovl_macros::{helper, operator};
use std::cell::RefCell;
use std::fmt;
use std::marker::PhantomData;

thread_local! {
    static LOG: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
    static NEXT: RefCell<u32> = const { RefCell::new(0) };
}

fn log(entry: String) {
    LOG.with(|l| l.borrow_mut().push(entry));
}

fn take_log() -> Vec<String> {
    NEXT.with(|n| *n.borrow_mut() = 0);
    LOG.with(|l| std::mem::take(&mut *l.borrow_mut()))
}

/// A staged scalar: `%n` in the log.
pub struct Expr<T> {
    id: u32,
    _t: PhantomData<fn() -> T>,
}
impl<T> Clone for Expr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Expr<T> {}
impl<T> fmt::Display for Expr<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}", self.id)
    }
}

fn staged<T>(what: fmt::Arguments<'_>) -> Expr<T> {
    let id = NEXT.with(|n| {
        let mut n = n.borrow_mut();
        *n += 1;
        *n
    });
    log(format!("%{id} = {what}"));
    Expr {
        id,
        _t: PhantomData,
    }
}

/// A staged variable.
pub struct Var<T> {
    e: Expr<T>,
}
impl<T> Clone for Var<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Var<T> {}
impl<T> Var<T> {
    pub fn get(&self) -> Expr<T> {
        staged(format_args!("GET {}", self.e))
    }
}

pub fn variable<T>(init: impl IntoExpr<T>) -> Var<T> {
    let init = init.into_expr();
    Var {
        e: staged(format_args!("VAR {init}")),
    }
}

pub trait IntoExpr<T> {
    fn into_expr(self) -> Expr<T>;
}
impl<T> IntoExpr<T> for Expr<T> {
    fn into_expr(self) -> Expr<T> {
        self
    }
}
impl<T> IntoExpr<T> for Var<T> {
    fn into_expr(self) -> Expr<T> {
        self.get()
    }
}
macro_rules! literal {
    ($($t:ty => $e:ty),*) => {$(
        impl IntoExpr<$e> for $t {
            fn into_expr(self) -> Expr<$e> {
                staged(format_args!("CONST {}", self))
            }
        }
    )*};
}
literal!(f32 => f32, f64 => f32, i64 => i64, i32 => i64, usize => i64, bool => bool);

impl<T, R: IntoExpr<T>> std::ops::Add<R> for Expr<T> {
    type Output = Expr<T>;
    fn add(self, r: R) -> Expr<T> {
        let r = r.into_expr();
        staged(format_args!("ADD {self} {r}"))
    }
}
impl<T, R: IntoExpr<T>> std::ops::Add<R> for Var<T> {
    type Output = Expr<T>;
    fn add(self, r: R) -> Expr<T> {
        self.get() + r
    }
}
impl<T, R: IntoExpr<T>> std::ops::AddAssign<R> for Var<T> {
    fn add_assign(&mut self, r: R) {
        let v = self.get() + r;
        log(format!("ASSIGN {} {v}", self.e));
    }
}
impl std::ops::Not for Expr<bool> {
    type Output = Expr<bool>;
    fn not(self) -> Expr<bool> {
        staged(format_args!("NOT {self}"))
    }
}

/// A tensor inside an operator: a name.
pub struct Tensor<T> {
    name: String,
    _t: PhantomData<T>,
}
impl<T> Clone for Tensor<T> {
    fn clone(&self) -> Self {
        Tensor {
            name: self.name.clone(),
            _t: PhantomData,
        }
    }
}
impl<T> Tensor<T> {
    fn named(name: &str) -> Self {
        Tensor {
            name: name.to_string(),
            _t: PhantomData,
        }
    }
}

pub fn output<T>(name: &str) -> Tensor<T> {
    Tensor::named(name)
}

pub fn position() -> Expr<i64> {
    staged(format_args!("POSITION"))
}

/// What the expansion's prelude-name check glob-imports (the real one exports many more).
pub mod prelude {
    pub use super::{output, variable};
}

/// A lazy handle: the name of the tensor it stands for.
#[derive(Debug, PartialEq)]
pub struct Lazy<T> {
    pub name: String,
    _t: PhantomData<T>,
}

pub mod __rt {
    use super::{log, staged, Expr, IntoExpr, Lazy, Tensor, Var};
    use std::borrow::Borrow;
    use std::marker::PhantomData;
    use std::ops::IndexMut;
    use std::panic::Location;

    #[track_caller]
    fn line() -> u32 {
        Location::caller().line()
    }

    pub trait IntoLazy<T> {
        fn into_lazy(self) -> Lazy<T>;
    }
    impl<T> IntoLazy<T> for &str {
        fn into_lazy(self) -> Lazy<T> {
            Lazy {
                name: self.to_string(),
                _t: PhantomData,
            }
        }
    }

    impl<T> IntoLazy<T> for Lazy<T> {
        fn into_lazy(self) -> Lazy<T> {
            self
        }
    }

    /// The memo key: the mock only checks that every parameter reaches it.
    #[derive(Default)]
    pub struct TraceKey(pub Vec<String>);
    impl TraceKey {
        pub fn new() -> TraceKey {
            TraceKey::default()
        }
        pub fn tensor<T>(&mut self, x: &Lazy<T>) {
            self.0.push(format!("tensor {}", x.name));
        }
        pub fn tensors<T>(&mut self, xs: &[Lazy<T>]) {
            self.0.push(format!("{} tensors", xs.len()));
        }
        pub fn unkeyable(&mut self) {
            self.0.push("unkeyable".into());
        }
    }
    pub struct KeyWrap<'a, T: ?Sized>(pub &'a T);
    pub trait KeyByTraceArg {
        fn __ovl_key(&self, key: &mut TraceKey);
    }
    pub trait KeyByScalar {
        fn __ovl_key(&self, key: &mut TraceKey);
    }
    pub trait KeyNone {
        fn __ovl_key(&self, key: &mut TraceKey);
    }
    impl<T: std::fmt::Debug> KeyByTraceArg for &&KeyWrap<'_, T> {
        fn __ovl_key(&self, key: &mut TraceKey) {
            key.0.push(format!("arg {:?}", self.0));
        }
    }
    impl<T> KeyByScalar for &KeyWrap<'_, T> {
        fn __ovl_key(&self, key: &mut TraceKey) {
            key.0.push("scalar".into());
        }
    }
    impl<T: ?Sized> KeyNone for KeyWrap<'_, T> {
        fn __ovl_key(&self, key: &mut TraceKey) {
            key.unkeyable();
        }
    }

    pub fn trace_operator_keyed<R: Outputs, F: FnOnce(&mut Tracer) -> R>(
        site: OperatorSite,
        key: TraceKey,
        body: F,
    ) -> R::Lazy {
        assert!(
            !key.0.is_empty() || site.name == "with_helper",
            "{key:?}",
            key = key.0
        );
        trace_operator(site, body)
    }

    pub trait Outputs {
        type Lazy;
        fn to_lazy(&self) -> Self::Lazy;
    }
    impl<T> Outputs for Tensor<T> {
        type Lazy = Lazy<T>;
        fn to_lazy(&self) -> Lazy<T> {
            self.name.as_str().into_lazy()
        }
    }
    impl<A: Outputs, B: Outputs> Outputs for (A, B) {
        type Lazy = (A::Lazy, B::Lazy);
        fn to_lazy(&self) -> Self::Lazy {
            (self.0.to_lazy(), self.1.to_lazy())
        }
    }

    #[derive(Debug)]
    pub struct OperatorSite {
        pub name: &'static str,
        pub file: &'static str,
        pub line: u32,
        pub column: u32,
    }

    pub struct Tracer;
    impl Tracer {
        pub fn input<T>(&mut self, x: impl IntoLazy<T>) -> Tensor<T> {
            Tensor::named(&x.into_lazy().name)
        }
        pub fn input_list<T>(&mut self, xs: Vec<Lazy<T>>) -> Vec<Tensor<T>> {
            xs.iter().map(|x| Tensor::named(&x.name)).collect()
        }
    }

    pub fn trace_operator<R: Outputs, F: FnOnce(&mut Tracer) -> R>(
        site: OperatorSite,
        body: F,
    ) -> R::Lazy {
        let file = site.file.rsplit('/').next().unwrap_or(site.file);
        log(format!(
            "operator {} at {file}:{}:{}",
            site.name, site.line, site.column
        ));
        body(&mut Tracer).to_lazy()
    }

    // Control flow.

    pub enum Cond {
        Plain(bool),
        Staged(Expr<bool>),
    }
    pub trait Condition {
        fn into_cond(self) -> Cond;
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

    pub struct IfGuard(Cond);
    #[track_caller]
    pub fn cond(c: impl Condition) -> IfGuard {
        IfGuard(c.into_cond())
    }
    impl IfGuard {
        #[track_caller]
        pub fn then_branch(&self) -> bool {
            match self.0 {
                Cond::Plain(b) => b,
                Cond::Staged(c) => {
                    log(format!("IF {c} @{}", line()));
                    true
                }
            }
        }
        #[track_caller]
        pub fn else_branch(&self) -> bool {
            match self.0 {
                Cond::Plain(b) => !b,
                Cond::Staged(_) => {
                    log(format!("ELSE @{}", line()));
                    true
                }
            }
        }
        #[track_caller]
        pub fn end(self) {
            if let Cond::Staged(_) = self.0 {
                log(format!("END_IF @{}", line()));
            }
        }
    }

    pub trait PlainCond {
        fn plain(self) -> bool;
    }
    impl PlainCond for bool {
        fn plain(self) -> bool {
            self
        }
    }
    pub fn plain_cond(c: impl PlainCond) -> bool {
        c.plain()
    }

    pub trait Bound {
        fn text(self) -> String;
    }
    impl Bound for usize {
        fn text(self) -> String {
            self.to_string()
        }
    }
    impl Bound for i32 {
        fn text(self) -> String {
            self.to_string()
        }
    }
    impl Bound for Expr<i64> {
        fn text(self) -> String {
            self.to_string()
        }
    }

    pub struct RangeGuard(Expr<i64>);
    #[track_caller]
    pub fn range(start: impl Bound, end: impl Bound, step: impl Bound) -> RangeGuard {
        let (s, e, st, l) = (start.text(), end.text(), step.text(), line());
        RangeGuard(staged(format_args!("RANGE {s} {e} {st} @{l}")))
    }
    #[track_caller]
    pub fn range_inclusive(start: impl Bound, end: impl Bound, step: impl Bound) -> RangeGuard {
        let (s, e, st, l) = (start.text(), end.text(), step.text(), line());
        RangeGuard(staged(format_args!("RANGE_INCLUSIVE {s} {e} {st} @{l}")))
    }
    impl RangeGuard {
        pub fn index(&self) -> Expr<i64> {
            self.0
        }
        #[track_caller]
        pub fn end(self) {
            log(format!("END_RANGE @{}", line()));
        }
    }

    pub struct WhileLoop {
        staged: bool,
        decided: bool,
    }
    impl WhileLoop {
        pub fn begin() -> WhileLoop {
            WhileLoop {
                staged: false,
                decided: false,
            }
        }
        #[track_caller]
        pub fn test(&mut self, c: impl Condition) -> bool {
            let c = c.into_cond();
            if !self.decided {
                self.decided = true;
                if let Cond::Staged(e) = c {
                    self.staged = true;
                    log(format!("WHILE {e} @{}", line()));
                }
            }
            match c {
                Cond::Plain(b) => !self.staged && b,
                Cond::Staged(_) => self.staged,
            }
        }
        #[track_caller]
        pub fn staged_end(&mut self) -> bool {
            if self.staged {
                log(format!("END_WHILE @{}", line()));
            }
            self.staged
        }
        #[track_caller]
        pub fn on_break(&self) {
            if self.staged {
                log(format!("ERROR break in a staged while @{}", line()));
            }
        }
        #[track_caller]
        pub fn on_continue(&self) {
            if self.staged {
                log(format!("ERROR continue in a staged while @{}", line()));
            }
        }
    }

    // Comparisons, logic, casts.

    pub trait Compare<R> {
        type Out;
        fn cmp(self, op: &str, r: R) -> Self::Out;
    }
    impl<T, R: IntoExpr<T>> Compare<R> for Expr<T> {
        type Out = Expr<bool>;
        fn cmp(self, op: &str, r: R) -> Expr<bool> {
            let r = r.into_expr();
            staged(format_args!("{op} {self} {r}"))
        }
    }
    impl<T, R: IntoExpr<T>> Compare<R> for Var<T> {
        type Out = Expr<bool>;
        fn cmp(self, op: &str, r: R) -> Expr<bool> {
            self.get().cmp(op, r)
        }
    }
    macro_rules! plain_compare {
        ($($t:ty),*) => {$(
            impl Compare<$t> for $t {
                type Out = bool;
                fn cmp(self, op: &str, r: $t) -> bool {
                    match op {
                        "LT" => self < r,
                        "LE" => self <= r,
                        "GT" => self > r,
                        "GE" => self >= r,
                        "EQ" => self == r,
                        _ => self != r,
                    }
                }
            }
        )*};
    }
    plain_compare!(f32, i32, i64, usize, bool);
    impl Compare<Expr<i64>> for i64 {
        type Out = Expr<bool>;
        fn cmp(self, op: &str, r: Expr<i64>) -> Expr<bool> {
            self.into_expr().cmp(op, r)
        }
    }

    #[track_caller]
    pub fn lt<A: Compare<B>, B>(a: A, b: B) -> A::Out {
        a.cmp("LT", b)
    }
    #[track_caller]
    pub fn le<A: Compare<B>, B>(a: A, b: B) -> A::Out {
        a.cmp("LE", b)
    }
    #[track_caller]
    pub fn gt<A: Compare<B>, B>(a: A, b: B) -> A::Out {
        a.cmp("GT", b)
    }
    #[track_caller]
    pub fn ge<A: Compare<B>, B>(a: A, b: B) -> A::Out {
        a.cmp("GE", b)
    }
    #[track_caller]
    pub fn eq<A: Compare<B>, B>(a: A, b: B) -> A::Out {
        a.cmp("EQ", b)
    }
    #[track_caller]
    pub fn ne<A: Compare<B>, B>(a: A, b: B) -> A::Out {
        a.cmp("NE", b)
    }

    pub trait Logic<B> {
        type Out;
        fn and(self, b: impl FnOnce() -> B) -> Self::Out;
        fn or(self, b: impl FnOnce() -> B) -> Self::Out;
    }
    impl Logic<bool> for bool {
        type Out = bool;
        fn and(self, b: impl FnOnce() -> bool) -> bool {
            self && b()
        }
        fn or(self, b: impl FnOnce() -> bool) -> bool {
            self || b()
        }
    }
    impl<B: IntoExpr<bool>> Logic<B> for Expr<bool> {
        type Out = Expr<bool>;
        fn and(self, b: impl FnOnce() -> B) -> Expr<bool> {
            let b = b().into_expr();
            staged(format_args!("AND {self} {b}"))
        }
        fn or(self, b: impl FnOnce() -> B) -> Expr<bool> {
            let b = b().into_expr();
            staged(format_args!("OR {self} {b}"))
        }
    }
    #[track_caller]
    pub fn and<A: Logic<B>, B>(a: A, b: impl FnOnce() -> B) -> A::Out {
        a.and(b)
    }
    #[track_caller]
    pub fn or<A: Logic<B>, B>(a: A, b: impl FnOnce() -> B) -> A::Out {
        a.or(b)
    }

    pub trait CastTo<T> {
        type Out;
        fn cast_to(self) -> Self::Out;
    }
    impl CastTo<f32> for usize {
        type Out = f32;
        fn cast_to(self) -> f32 {
            self as f32
        }
    }
    impl CastTo<f32> for Expr<i64> {
        type Out = Expr<f32>;
        fn cast_to(self) -> Expr<f32> {
            staged(format_args!("CAST f32 {self}"))
        }
    }
    #[track_caller]
    pub fn cast<T, E: CastTo<T>>(e: E) -> E::Out {
        e.cast_to()
    }

    // Tensors and assignments.

    #[derive(Clone, Debug)]
    pub struct Idx(String);
    pub trait IndexPart {
        fn to_idx(self) -> Idx;
    }
    impl IndexPart for usize {
        fn to_idx(self) -> Idx {
            Idx(self.to_string())
        }
    }
    impl IndexPart for i32 {
        fn to_idx(self) -> Idx {
            Idx(self.to_string())
        }
    }
    impl IndexPart for Expr<i64> {
        fn to_idx(self) -> Idx {
            Idx(self.to_string())
        }
    }
    #[track_caller]
    pub fn ix(i: impl IndexPart) -> Idx {
        i.to_idx()
    }
    fn list<const N: usize>(indices: &[Idx; N]) -> String {
        indices
            .iter()
            .map(|i| i.0.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }

    #[track_caller]
    pub fn read<T, B: Borrow<Tensor<T>> + ?Sized, const N: usize>(
        t: &B,
        indices: [Idx; N],
    ) -> Expr<T> {
        let (name, l) = (&t.borrow().name, line());
        staged(format_args!("READ {name}[{}] @{l}", list(&indices)))
    }
    #[track_caller]
    pub fn write<T, B: Borrow<Tensor<T>> + ?Sized, const N: usize>(
        t: &B,
        indices: [Idx; N],
        value: impl IntoExpr<T>,
    ) {
        let (name, l) = (&t.borrow().name, line());
        let value = value.into_expr();
        log(format!("WRITE {name}[{}] {value} @{l}", list(&indices)));
    }

    pub trait AssignStaged<R> {
        fn __ovl_assign(self, r: R);
    }
    impl<T, R: IntoExpr<T>> AssignStaged<R> for &mut Var<T> {
        fn __ovl_assign(self, r: R) {
            let r = r.into_expr();
            log(format!("ASSIGN {} {r}", self.e));
        }
    }
    impl<T, R: IntoExpr<T>> AssignStaged<R> for &mut Expr<T> {
        fn __ovl_assign(self, r: R) {
            *self = r.into_expr();
        }
    }
    pub trait AssignPlain<R> {
        fn __ovl_assign(self, r: R);
    }
    impl<T> AssignPlain<T> for &mut &mut T {
        fn __ovl_assign(self, r: T) {
            **self = r;
        }
    }

    pub trait IndexAssign<I, V> {
        fn __ovl_index_assign(self, index: I, value: V);
    }
    impl<T, V: IntoExpr<T>> IndexAssign<Expr<i64>, V> for &Tensor<T> {
        #[track_caller]
        fn __ovl_index_assign(self, index: Expr<i64>, value: V) {
            write(self, [ix(index)], value);
        }
    }
    impl<C: ?Sized + IndexMut<I>, I> IndexAssign<I, C::Output> for &mut C
    where
        C::Output: Sized,
    {
        fn __ovl_index_assign(self, index: I, value: C::Output) {
            self[index] = value;
        }
    }
}

// ---------------------------------------------------------------------------------------------

const IF_CHAIN: u32 = line!();
/// `if` / `else if` / `else` on staged and trace-time conditions.
#[operator]
fn if_chain(x: Tensor<f32>, k: usize) -> Tensor<f32> {
    let out = output::<f32>("out");
    let i = position();
    let v = x[[i]];
    if v < 0.0 {
        out[[i]] = 1.0;
    } else if k > 2 {
        out[[i]] = 2.0;
    } else {
        out[[i]] = 3.0;
    }
    if k > 2 {
        out[[i]] = 4.0;
    } else {
        out[[i]] = 5.0;
    }
    out
}

#[test]
fn if_chains_stage_or_run() {
    let l = |k: u32| IF_CHAIN + k;
    let y = if_chain("x", 3);
    assert_eq!(y.name, "out");
    let expected = vec![
        format!("operator if_chain at mock_runtime.rs:{}:4", l(3)),
        "%1 = POSITION".to_string(),
        format!("%2 = READ x[%1] @{}", l(6)),
        "%3 = CONST 0".to_string(),
        "%4 = LT %2 %3".to_string(),
        format!("IF %4 @{}", l(7)),
        "%5 = CONST 1".to_string(),
        format!("WRITE out[%1] %5 @{}", l(8)),
        format!("ELSE @{}", l(9)),
        // `k > 2` is a trace-time `bool`: the Rust `if` picks the branch.
        "%6 = CONST 2".to_string(),
        format!("WRITE out[%1] %6 @{}", l(10)),
        format!("END_IF @{}", l(13)),
        "%7 = CONST 4".to_string(),
        format!("WRITE out[%1] %7 @{}", l(15)),
    ];
    assert_eq!(take_log(), expected);
}

const LOOPS: u32 = line!();
/// Staged `for`, trace-time `for` and `while`, `&&`, casts, assignments and compound writes.
#[operator]
pub fn loops(x: Tensor<f32>, ys: Vec<Tensor<f32>>, n: usize) -> (Tensor<f32>, Tensor<f32>) {
    let out = output::<f32>("out");
    let local = output::<f32>("local");
    let i = position();
    let mut acc = variable(0.0f32);
    for j in 0..n {
        acc += x[[j]];
    }
    for y in &ys {
        acc = acc + y[[i]];
    }
    let mut k = 0usize;
    while k < n && k != 7 {
        k += 1;
        if k == 2 {
            continue;
        }
        if k == 3 {
            break;
        }
    }
    let mut steps = variable(0i64);
    while steps < 4 {
        steps += 1;
    }
    local[[k]] += n as f32;
    out[i] = acc;
    (out, local)
}

#[test]
fn loops_stage_or_run() {
    let l = |k: u32| LOOPS + k;
    let (out, local) = loops("x", vec!["a".into_lazy(), "b".into_lazy()], 5);
    assert_eq!((out.name.as_str(), local.name.as_str()), ("out", "local"));
    let expected = vec![
        format!("operator loops at mock_runtime.rs:{}:8", l(3)),
        "%1 = POSITION".to_string(),
        "%2 = CONST 0".to_string(),
        "%3 = VAR %2".to_string(),
        format!("%4 = RANGE 0 5 1 @{}", l(8)),
        format!("%5 = READ x[%4] @{}", l(9)),
        "%6 = GET %3".to_string(),
        "%7 = ADD %6 %5".to_string(),
        "ASSIGN %3 %7".to_string(),
        format!("END_RANGE @{}", l(10)),
        // The Rust loop over `ys`, unrolled.
        format!("%8 = READ a[%1] @{}", l(12)),
        "%9 = GET %3".to_string(),
        "%10 = ADD %9 %8".to_string(),
        "ASSIGN %3 %10".to_string(),
        format!("%11 = READ b[%1] @{}", l(12)),
        "%12 = GET %3".to_string(),
        "%13 = ADD %12 %11".to_string(),
        "ASSIGN %3 %13".to_string(),
        // The trace-time `while` ran in Rust (k = 3); the staged one is one WHILE.
        "%14 = CONST 0".to_string(),
        "%15 = VAR %14".to_string(),
        "%16 = GET %15".to_string(),
        "%17 = CONST 4".to_string(),
        "%18 = LT %16 %17".to_string(),
        format!("WHILE %18 @{}", l(25)),
        "%19 = GET %15".to_string(),
        "%20 = CONST 1".to_string(),
        "%21 = ADD %19 %20".to_string(),
        "ASSIGN %15 %21".to_string(),
        format!("END_WHILE @{}", l(27)),
        // `local[[k]] += n as f32`, k = 3 and `n as f32` a trace-time cast.
        format!("%22 = READ local[3] @{}", l(28)),
        "%23 = CONST 5".to_string(),
        "%24 = ADD %22 %23".to_string(),
        format!("WRITE local[3] %24 @{}", l(28)),
        // `out[i] = acc` through `IndexAssign`.
        "%25 = GET %3".to_string(),
        format!("WRITE out[%1] %25 @{}", l(29)),
    ];
    assert_eq!(take_log(), expected);
}

use ovl::__rt::IntoLazy as _;

const STORE: u32 = line!();
/// A helper: a statement `if` at the tail of a `()` body, `Var` assignment from itself, a
/// deferred initialization, plain assignments through a reference and an index, logic.
#[helper]
#[allow(clippy::needless_late_init)]
fn store(out: &Tensor<f32>, i: Expr<i64>, v: Expr<f32>, flags: &mut [bool; 2], count: &mut usize) {
    let mut w = variable(v);
    w = w + 1.0;
    let half;
    half = 0.5f32;
    *count = *count + 1;
    flags[1] = *count > 1 && half < 1.0;
    flags[0] = *count > 5 || yes();
    if v > half {
        out[[i]] = w;
    }
}

fn yes() -> bool {
    true
}

const HELPER: u32 = line!();
#[operator]
fn with_helper(x: Tensor<f32>) -> Tensor<f32> {
    let out = output::<f32>("out");
    let i = position();
    let mut flags = [false; 2];
    let mut count = 1;
    store(&out, i, x[[i]], &mut flags, &mut count);
    assert!(flags[0] && flags[1] && count == 2);
    out
}

#[test]
fn helpers_and_assignments() {
    let l = |k: u32| HELPER + k;
    with_helper("x");
    let log = take_log();
    let expected_tail = [
        // `if v > half` at the tail of the helper's body is staged.
        "%7 = CONST 0.5".to_string(),
        "%8 = GT %2 %7".to_string(),
        format!("IF %8 @{}", STORE + 13),
        "%9 = GET %3".to_string(),
        format!("WRITE out[%1] %9 @{}", STORE + 14),
        format!("END_IF @{}", STORE + 15),
    ];
    assert_eq!(
        log[0],
        format!("operator with_helper at mock_runtime.rs:{}:4", l(2))
    );
    assert_eq!(log[log.len() - expected_tail.len()..], expected_tail);
    // `w = w + 1.0` on a `Var`: ASSIGN; the other assignments ran in Rust.
    assert!(log.contains(&"ASSIGN %3 %6".to_string()), "{log:#?}");
}

/// Keeps the mock in step with the real runtime, name by name: every entry point the real
/// `ovl_core::trace::rt` (the `::ovl::__rt` the expansion calls) exports is mocked here or
/// listed as not mocked, and every public item of the mock's `__rt` is a real entry point or
/// listed as a helper of the mock. Adding an entry point to the real runtime (because the macro
/// now emits it) fails this test until the mock implements it or says why it does not. The
/// signatures are not compared: the facade's tests compile the expansion against the real
/// runtime, this file against the mock.
#[test]
fn the_mock_runtime_is_in_step_with_the_real_one() {
    use std::collections::BTreeSet;
    /// Real entry points the mock leaves out: no operator here uses them (gradients are tested
    /// in the facade's and the stdlib's tests; negation and `arange`/reversed ranges stage like
    /// the operations mocked here).
    const NOT_MOCKED: &[&str] = &[
        "arange",
        "range_rev",
        "range_inclusive_rev",
        "neg",
        "Negate",
        "grad_input",
        "grad_input_list",
        "input_gradient",
        "input_gradients",
        "InputGradient",
        "InputGradients",
        "OutputGrads",
        "trace_operator_with_gradient",
        "GradientCall",
        "LazyTensor",
    ];
    /// Public items of the mock's `__rt` that the real runtime keeps elsewhere (the traits and
    /// guard types behind its entry points, in `ovl_core::trace`).
    const MOCK_HELPERS: &[&str] = &[
        "Bound",
        "CastTo",
        "Compare",
        "Cond",
        "Condition",
        "Idx",
        "IfGuard",
        "IndexPart",
        "Logic",
        "PlainCond",
        "RangeGuard",
    ];
    let real_src = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../ovl-core/src/trace/mod.rs"
    ))
    .unwrap();
    let block = |src: &str, opening: &str| -> String {
        let start = src
            .find(opening)
            .unwrap_or_else(|| panic!("no `{opening}`"));
        let end = start + src[start..].find("\n}").expect("the block ends");
        src[start + opening.len()..end].to_string()
    };
    // The real module is `pub use path::{a, b, ...};` lines: take each last path segment.
    let real: BTreeSet<String> = block(&real_src, "pub mod rt {")
        .split(';')
        .flat_map(|u| {
            let u = u.trim().trim_start_matches("pub use").trim();
            let names = match u.find('{') {
                Some(open) => u[open + 1..].trim_end_matches('}').to_string(),
                None => u.rsplit("::").next().unwrap_or("").to_string(),
            };
            names
                .split(',')
                .map(|n| n.trim().to_string())
                .filter(|n| !n.is_empty())
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(real.contains("trace_operator_keyed"), "{real:?}");
    let mock_src = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/mock_runtime.rs"
    ))
    .unwrap();
    let mock: BTreeSet<String> = block(&mock_src, "pub mod __rt {")
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("    pub ")?;
            let mut words = rest.split_whitespace();
            let kind = words.next()?;
            ["fn", "struct", "trait", "enum", "type"]
                .contains(&kind)
                .then(|| {
                    let name = words.next()?;
                    let end = name
                        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                        .unwrap_or(name.len());
                    Some(name[..end].to_string())
                })
                .flatten()
        })
        .collect();
    assert!(mock.contains("trace_operator_keyed"), "{mock:?}");
    let unmocked: Vec<&String> = real
        .iter()
        .filter(|n| !mock.contains(*n) && !NOT_MOCKED.contains(&n.as_str()))
        .collect();
    assert!(
        unmocked.is_empty(),
        "real runtime entry points the mock neither implements nor lists in NOT_MOCKED: {unmocked:?}"
    );
    let unknown: Vec<&String> = mock
        .iter()
        .filter(|n| !real.contains(*n) && !MOCK_HELPERS.contains(&n.as_str()))
        .collect();
    assert!(
        unknown.is_empty(),
        "mock items that are no real entry point (renamed or removed?) nor listed in MOCK_HELPERS: {unknown:?}"
    );
    for n in NOT_MOCKED {
        assert!(
            real.contains(*n),
            "NOT_MOCKED lists `{n}`, which the real runtime lacks"
        );
        assert!(
            !mock.contains(*n),
            "NOT_MOCKED lists `{n}`, which the mock implements"
        );
    }
}

//! `if`, `for`, `while`, `break` and `continue` (EXPANSION.md rewrites 1 to 3).
//!
//! - A statement `if` becomes an `IfGuard` sequence (`cond`, `then_branch`, `else_branch`,
//!   `end`) that runs Rust's `if` on a trace-time `bool` and emits IF / ELSE / END_IF on a staged
//!   one; an `if` whose value is used stays a Rust `if` on `plain_cond(..)`.
//! - A `for` over `a..b`, `a..=b`, `(a..b).step_by(s)`, any of them `.rev()`, or
//!   `arange(start, stop, step)` becomes one staged RANGE; a `for` over
//!   anything else, or marked `#[unroll]`, stays a Rust loop (unrolled at trace time).
//! - A `while` becomes a Rust `loop` driven by a `WhileLoop` guard, which stays a Rust loop on a
//!   trace-time condition and emits WHILE on a staged one; the `break`/`continue` that leave it
//!   tell the guard first.

use super::{macro_span, peel, peel_owned, rt, take, unparen, Pos, Rewriter};
use proc_macro2::{Span, TokenStream};
use quote::{quote_spanned, ToTokens};
use syn::spanned::Spanned;
use syn::{
    parse_quote_spanned, Attribute, BinOp, Block, Expr, ExprBlock, ExprIf, Label, Lifetime,
    RangeLimits,
};

// ---------------------------------------------------------------------------------------------
// Loops enclosing an expression, for `break` / `continue`.

/// What an enclosing loop (or labeled block) is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LoopKind {
    /// A `for` over a range: one staged RANGE whose body is traced once; nothing may jump out
    /// of it.
    StagedFor,
    /// A `while` (not `while let`): a Rust `loop` with a `WhileLoop` guard named `__ovl_w`.
    While,
    /// A loop that stays Rust: `for` over anything else, `#[unroll] for`, `while let`, `loop`.
    Rust,
    /// A labeled block `'a: { .. }`: only `break 'a` targets it.
    LabeledBlock,
}

#[derive(Debug)]
struct Frame {
    kind: LoopKind,
    label: Option<String>,
}

/// The loops (and labeled blocks) enclosing the expression being visited, innermost last.
#[derive(Debug, Default)]
pub(crate) struct LoopStack {
    frames: Vec<Frame>,
}

/// How a `break` or `continue` is handled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Jump {
    /// A Rust jump that leaves no `while`: kept as written.
    Plain,
    /// It leaves the innermost enclosing `while` (a `break` of it, or any jump past it):
    /// `{ __ovl_w.on_break(); JUMP }`.
    LeavesWhile,
    /// A `continue` of the innermost enclosing `while`: `{ __ovl_w.on_continue(); continue }`.
    ContinuesWhile,
    /// Rejected: it would leave a staged `for` (or `continue` one).
    OutOfStagedFor,
    /// Rejected: it would leave two or more `while` loops at once.
    OutOfSeveralWhiles,
}

impl LoopStack {
    pub(crate) fn push(&mut self, kind: LoopKind, label: Option<&Label>) {
        let label = label.map(|l| l.name.ident.to_string());
        self.frames.push(Frame { kind, label });
    }

    pub(crate) fn pop(&mut self) {
        self.frames.pop();
    }

    /// Resolves a `break` (or a `continue`) with an optional label to its target, innermost
    /// first, as Rust does, and says how it must be handled.
    pub(crate) fn resolve(&self, label: Option<&Lifetime>, is_continue: bool) -> Jump {
        let label = label.map(|l| l.ident.to_string());
        let target = self.frames.iter().rposition(|f| match &label {
            Some(l) => f.label.as_deref() == Some(l.as_str()),
            None => f.kind != LoopKind::LabeledBlock,
        });
        // No target (an unknown label): rustc reports it.
        let Some(target) = target else {
            return Jump::Plain;
        };
        let involved = &self.frames[target..];
        if involved.iter().any(|f| f.kind == LoopKind::StagedFor) {
            return Jump::OutOfStagedFor;
        }
        match involved
            .iter()
            .filter(|f| f.kind == LoopKind::While)
            .count()
        {
            0 => Jump::Plain,
            1 if is_continue && self.frames[target].kind == LoopKind::While => Jump::ContinuesWhile,
            1 => Jump::LeavesWhile,
            _ => Jump::OutOfSeveralWhiles,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Classification shared with `reject`.

/// Whether `attr` is `#[unroll]` (with or without arguments: `reject` checks the form).
pub(crate) fn is_unroll(attr: &Attribute) -> bool {
    attr.path().is_ident("unroll")
}

/// Whether a condition binds a pattern (`if let`, `while let`, a let-chain): such an `if` or
/// `while` stays Rust.
pub(crate) fn has_let(cond: &Expr) -> bool {
    match cond {
        Expr::Let(_) => true,
        Expr::Binary(b) if matches!(b.op, BinOp::And(_)) => has_let(&b.left) || has_let(&b.right),
        _ => false,
    }
}

/// What a `for` loop becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ForKind {
    /// A staged RANGE.
    Staged,
    /// A Rust loop, run (unrolled) at trace time.
    Rust,
    /// A range without an end (`a..`): rejected.
    NoEnd,
    /// A range without a start (`..b`, `..`): rejected.
    NoStart,
}

/// The range of a staged `for` (through any parentheses), with its `step_by` argument.
fn range_of(iter: &Expr) -> Option<(&syn::ExprRange, Option<&Expr>)> {
    match peel(iter) {
        Expr::Range(r) => Some((r, None)),
        Expr::MethodCall(m)
            if m.method == "step_by" && m.args.len() == 1 && m.turbofish.is_none() =>
        {
            match peel(&m.receiver) {
                Expr::Range(r) => Some((r, m.args.first())),
                _ => None,
            }
        }
        _ => None,
    }
}

/// The receiver of `.rev()` (through any parentheses).
fn rev_of(iter: &Expr) -> Option<&Expr> {
    match peel(iter) {
        Expr::MethodCall(m) if m.method == "rev" && m.args.is_empty() && m.turbofish.is_none() => {
            Some(&m.receiver)
        }
        _ => None,
    }
}

/// `arange(start, stop, step)`: a call of a function named `arange` with three arguments.
fn is_arange(iter: &Expr) -> bool {
    match peel(iter) {
        Expr::Call(c) if c.args.len() == 3 => matches!(
            &*c.func,
            Expr::Path(p) if p.qself.is_none()
                && p.path.segments.last().is_some_and(|s| s.ident == "arange" && s.arguments.is_none())
        ),
        _ => false,
    }
}

/// Decides what a `for` loop becomes: see [`ForKind`].
pub(crate) fn classify_for(f: &syn::ExprForLoop) -> ForKind {
    if f.attrs.iter().any(is_unroll) {
        return ForKind::Rust;
    }
    if is_arange(&f.expr) {
        return ForKind::Staged;
    }
    match range_of(rev_of(&f.expr).unwrap_or(&f.expr)) {
        None => ForKind::Rust,
        Some((r, _)) if r.start.is_none() => ForKind::NoStart,
        Some((r, _)) if r.end.is_none() => ForKind::NoEnd,
        Some(_) => ForKind::Staged,
    }
}

// ---------------------------------------------------------------------------------------------
// `if`

/// Whether an `if` / `else if` chain ends with a plain `else`: without one, its value is `()`.
fn has_final_else(ei: &ExprIf) -> bool {
    match ei.else_branch.as_ref().map(|(_, e)| &**e) {
        None => false,
        Some(Expr::If(nested)) => has_final_else(nested),
        Some(_) => true,
    }
}

/// The closing brace of the last block of an `if` / `else if` chain.
fn last_brace(ei: &ExprIf) -> Span {
    match ei.else_branch.as_ref().map(|(_, e)| &**e) {
        None => ei.then_branch.brace_token.span.close(),
        Some(Expr::If(nested)) => last_brace(nested),
        Some(Expr::Block(b)) => b.block.brace_token.span.close(),
        Some(other) => other.span(),
    }
}

/// A block holding `e`; a plain block expression gives its own block.
fn into_block(e: Expr) -> Block {
    match e {
        Expr::Block(ExprBlock {
            attrs,
            label: None,
            block,
        }) if attrs.is_empty() => block,
        other => Block {
            brace_token: Default::default(),
            stmts: vec![syn::Stmt::Expr(other, None)],
        },
    }
}

/// The keyword `if` of a generated `if`, at `at` (see [`macro_span`]).
fn keyword(at: Span) -> syn::token::If {
    syn::token::If {
        span: macro_span(at),
    }
}

/// A block expression carrying `attrs`.
fn block_expr(attrs: Vec<Attribute>, block: Block) -> Expr {
    Expr::Block(ExprBlock {
        attrs,
        label: None,
        block,
    })
}

pub(super) fn rewrite_if(r: &mut Rewriter, e: &mut Expr, pos: Pos) {
    let Expr::If(mut ei) = take(e) else {
        unreachable!()
    };
    if has_let(&ei.cond) {
        // `if let`: Rust's `if`; its branches are at the position of the whole `if`.
        r.let_chain(&mut ei.cond);
        r.block(&mut ei.then_branch, pos);
        if let Some((_, else_branch)) = &mut ei.else_branch {
            r.expr(else_branch, pos);
        }
        *e = Expr::If(ei);
    } else if pos == Pos::Statement || !has_final_else(&ei) {
        *e = staged_if(r, ei);
    } else {
        *e = value_if(r, ei);
    }
}

/// `{ let __ovl_c = RT::cond(COND); if __ovl_c.then_branch() { THEN }
///    if __ovl_c.else_branch() { ELSE } __ovl_c.end(); }`
fn staged_if(r: &mut Rewriter, ei: ExprIf) -> Expr {
    let end_span = last_brace(&ei);
    let ExprIf {
        attrs,
        if_token,
        cond,
        mut then_branch,
        else_branch,
    } = ei;
    let mut cond = *cond;
    let cond_span = cond.span();
    r.expr(&mut cond, Pos::Value);
    r.block(&mut then_branch, Pos::Statement);
    let else_part = else_branch.map(|(else_token, else_branch)| {
        let mut else_branch = *else_branch;
        // An `else if` is rewritten as a statement too; its block holds the nested `if`.
        r.expr(&mut else_branch, Pos::Statement);
        let block = into_block(else_branch);
        let if_ = keyword(else_token.span);
        quote_spanned!(else_token.span=> #if_ __ovl_c.else_branch() #block)
    });
    let rt = rt(cond_span);
    let cond = unparen(&cond);
    let start = quote_spanned!(cond_span=> let __ovl_c = #rt::cond(#cond););
    let if_ = keyword(if_token.span);
    let then = quote_spanned!(if_token.span=> #if_ __ovl_c.then_branch() #then_branch);
    let end = quote_spanned!(end_span=> __ovl_c.end(););
    let block: Block = parse_quote_spanned!(if_token.span=> { #start #then #else_part #end });
    block_expr(attrs, block)
}

/// `if RT::plain_cond(COND) { .. } else { .. }`
fn value_if(r: &mut Rewriter, mut ei: ExprIf) -> Expr {
    let span = ei.cond.span();
    r.expr(&mut ei.cond, Pos::Value);
    let cond = take(&mut ei.cond);
    let rt = rt(span);
    let cond = unparen(&cond);
    *ei.cond = parse_quote_spanned!(span=> #rt::plain_cond(#cond));
    r.block(&mut ei.then_branch, Pos::Value);
    if let Some((_, else_branch)) = &mut ei.else_branch {
        r.expr(else_branch, Pos::Value);
    }
    Expr::If(ei)
}

// ---------------------------------------------------------------------------------------------
// `for`

pub(super) fn rewrite_for(r: &mut Rewriter, e: &mut Expr) {
    let Expr::ForLoop(mut f) = take(e) else {
        unreachable!()
    };
    let kind = classify_for(&f);
    f.attrs.retain(|a| !is_unroll(a));
    if kind != ForKind::Staged {
        // A Rust loop: `for x in xs`, `#[unroll] for i in 0..4`.
        r.expr(&mut f.expr, Pos::Value);
        r.loops.push(LoopKind::Rust, f.label.as_ref());
        r.scopes.push();
        r.scopes.declare_pattern(&f.pat, false);
        r.block(&mut f.body, Pos::Statement);
        r.scopes.pop();
        r.loops.pop();
        *e = Expr::ForLoop(f);
        return;
    }

    // `arange(a, b, s)`.
    let iter = peel_owned(*f.expr);
    if let Expr::Call(call) = iter {
        let mut args: Vec<Expr> = call.args.into_iter().collect();
        for a in &mut args {
            r.expr(a, Pos::Value);
        }
        r.loops.push(LoopKind::StagedFor, f.label.as_ref());
        r.scopes.push();
        r.scopes.declare_pattern(&f.pat, false);
        r.block(&mut f.body, Pos::Statement);
        r.scopes.pop();
        r.loops.pop();
        let at = call.func.span();
        let rt = rt(at);
        let args = args.iter().map(unparen);
        let pat = &f.pat;
        let body = &f.body;
        let start_stmt = quote_spanned!(at=> let __ovl_r = #rt::arange(#(#args),*););
        let index = quote_spanned!(pat.span()=> let #pat = __ovl_r.index(););
        let end_stmt = quote_spanned!(body.brace_token.span.close()=> __ovl_r.end(););
        let block: Block =
            parse_quote_spanned!(f.for_token.span=> { #start_stmt #index #body #end_stmt });
        *e = block_expr(f.attrs, block);
        return;
    }
    // `(..).rev()`: the same range, descending.
    let (iter, rev) = match iter {
        Expr::MethodCall(m) if m.method == "rev" => (peel_owned(*m.receiver), true),
        other => (other, false),
    };
    // `(a..b).step_by(s)` or `a..b`, through any parentheses.
    let (range, step) = match iter {
        Expr::MethodCall(m) => {
            let step = m.args.into_iter().next();
            match peel_owned(*m.receiver) {
                Expr::Range(range) => (range, step),
                _ => unreachable!("classified as a staged range"),
            }
        }
        Expr::Range(range) => (range, None),
        _ => unreachable!("classified as a staged range"),
    };
    let (Some(mut start), Some(mut end)) = (range.start, range.end) else {
        unreachable!("classified as a bounded range")
    };
    r.expr(&mut start, Pos::Value);
    r.expr(&mut end, Pos::Value);
    let step = match step {
        Some(mut s) => {
            r.expr(&mut s, Pos::Value);
            unparen(&s).to_token_stream()
        }
        None => quote_spanned!(f.for_token.span=> 1),
    };

    r.loops.push(LoopKind::StagedFor, f.label.as_ref());
    r.scopes.push();
    r.scopes.declare_pattern(&f.pat, false);
    r.block(&mut f.body, Pos::Statement);
    r.scopes.pop();
    r.loops.pop();

    let (limits_span, func) = match (range.limits, rev) {
        (RangeLimits::HalfOpen(t), false) => (t.spans[0], quote_spanned!(t.spans[0]=> range)),
        (RangeLimits::Closed(t), false) => {
            (t.spans[0], quote_spanned!(t.spans[0]=> range_inclusive))
        }
        (RangeLimits::HalfOpen(t), true) => (t.spans[0], quote_spanned!(t.spans[0]=> range_rev)),
        (RangeLimits::Closed(t), true) => {
            (t.spans[0], quote_spanned!(t.spans[0]=> range_inclusive_rev))
        }
    };
    let rt = rt(limits_span);
    let (start, end) = (unparen(&start), unparen(&end));
    let pat = &f.pat;
    let body = &f.body;
    let start_stmt = quote_spanned!(limits_span=> let __ovl_r = #rt::#func(#start, #end, #step););
    let index = quote_spanned!(pat.span()=> let #pat = __ovl_r.index(););
    let end_stmt = quote_spanned!(body.brace_token.span.close()=> __ovl_r.end(););
    let block: Block =
        parse_quote_spanned!(f.for_token.span=> { #start_stmt #index #body #end_stmt });
    *e = block_expr(f.attrs, block);
}

// ---------------------------------------------------------------------------------------------
// `while`

pub(super) fn rewrite_while(r: &mut Rewriter, e: &mut Expr) {
    let Expr::While(mut w) = take(e) else {
        unreachable!()
    };
    if has_let(&w.cond) {
        // `while let`: a Rust loop.
        r.let_chain(&mut w.cond);
        r.loops.push(LoopKind::Rust, w.label.as_ref());
        r.block(&mut w.body, Pos::Statement);
        r.loops.pop();
        *e = Expr::While(w);
        return;
    }
    let cond_span = w.cond.span();
    r.expr(&mut w.cond, Pos::Value);
    r.loops.push(LoopKind::While, w.label.as_ref());
    r.block(&mut w.body, Pos::Statement);
    r.loops.pop();

    let span = w.while_token.span;
    let rt = rt(span);
    let cond = unparen(&w.cond);
    let label = &w.label;
    let body = &w.body;
    let close = body.brace_token.span.close();
    let test = quote_spanned!(cond_span=> __ovl_w.test(#cond));
    let end = quote_spanned!(close=> __ovl_w.staged_end());
    let (if_, break_) = (
        keyword(cond_span),
        quote_spanned!(macro_span(cond_span)=> break),
    );
    let (if_end, break_end) = (keyword(close), quote_spanned!(macro_span(close)=> break));
    let loop_ = quote_spanned!(macro_span(span)=> loop);
    let block: Block = parse_quote_spanned! {span=>
        {
            let mut __ovl_w = #rt::WhileLoop::begin();
            #label #loop_ { #if_ !#test { #break_; } #body #if_end #end { #break_end; } }
        }
    };
    *e = block_expr(w.attrs, block);
}

// ---------------------------------------------------------------------------------------------
// `break` / `continue`

pub(super) fn rewrite_jump(r: &mut Rewriter, e: &mut Expr) {
    let (label, is_continue, span) = match e {
        Expr::Break(b) => {
            if let Some(value) = &mut b.expr {
                r.expr(value, Pos::Value);
            }
            (b.label.clone(), false, b.break_token.span)
        }
        Expr::Continue(c) => (c.label.clone(), true, c.continue_token.span),
        _ => unreachable!(),
    };
    let hook: TokenStream = match r.loops.resolve(label.as_ref(), is_continue) {
        Jump::LeavesWhile => quote_spanned!(span=> on_break),
        Jump::ContinuesWhile => quote_spanned!(span=> on_continue),
        // The rejected jumps never reach the rewrite.
        Jump::Plain | Jump::OutOfStagedFor | Jump::OutOfSeveralWhiles => return,
    };
    let jump = take(e);
    *e = parse_quote_spanned!(span=> { __ovl_w.#hook(); #jump; });
}

//! The body rewrite: the syntax Rust cannot overload becomes calls into `::ovl::__rt`
//! (see `EXPANSION.md`, "Body rewrites").
//!
//! [`Rewriter`] walks a function body once, bottom-up: the operands of a construct are
//! rewritten before the construct itself is replaced. It knows, for every expression, whether it
//! is in *statement* or *value* position (which decides the form of an `if`), which loops enclose
//! it (for `break`/`continue`), and which locals were declared without an initializer (whose
//! first assignment stays Rust). One module per rewrite:
//!
//! - [`control_flow`]: `if`, `for`, `while`, `break`, `continue`;
//! - [`operators`]: comparisons, `&&`, `||`, `as`;
//! - [`indexing`]: `t[[i, j]]` reads;
//! - [`assign`]: `=` and `op=` on places.
//!
//! It never enters macro invocations, nested items, closures, `const` blocks, types, patterns or
//! array-repeat lengths: those keep their Rust meaning. The rewrite assumes the body passed
//! [`crate::reject`]; it does not report errors itself.

mod assign;
mod control_flow;
mod indexing;
mod operators;

pub(crate) use control_flow::{
    classify_for, has_let, is_unroll, ForKind, Jump, LoopKind, LoopStack,
};

use proc_macro2::{Span, TokenStream};
use quote::quote_spanned;
use syn::visit_mut::{self, VisitMut};
use syn::{Block, Expr, Local, Stmt};

/// Where an expression stands: its value is discarded, or used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pos {
    /// A statement, or the tail of a block whose value is discarded: an `if` here is staged
    /// control flow (IF / ELSE / END_IF when its condition is staged).
    Statement,
    /// A value is needed: an `if` here is a Rust `if` on a trace-time `bool`.
    Value,
}

/// The path of the runtime, `::ovl::__rt`, at `span`.
pub(crate) fn rt(span: Span) -> TokenStream {
    quote_spanned!(span=> ::ovl::__rt)
}

/// A span located at `at` (for messages) but marked as coming from the macro expansion: for the
/// syntax the rewrite adds around the user's code (the keywords of the `if`/`loop` scaffolding,
/// the `||` of the closures of `&&`/`||`), which lints on the user's code must not take for the
/// user's own (clippy's `possible_missing_else` on `} if __ovl_c.else_branch()`,
/// `redundant_closure` on `a && f()` made `|| f()`). Calls keep the user's spans, so that
/// `#[track_caller]` reports the user's line.
pub(crate) fn macro_span(at: Span) -> Span {
    Span::call_site().located_at(at)
}

/// Rewrites a function body in place. `tail` is the position of the body's tail expression:
/// [`Pos::Value`] when the function returns a value, [`Pos::Statement`] when it returns `()`.
pub(crate) fn rewrite_body(block: &mut Block, tail: Pos) {
    Rewriter::default().block(block, tail);
}

/// The walk; see the module documentation.
#[derive(Default)]
pub(crate) struct Rewriter {
    loops: LoopStack,
    scopes: assign::Scopes,
}

impl Rewriter {
    /// A block whose tail is at `pos`; its other statements are statements.
    fn block(&mut self, block: &mut Block, pos: Pos) {
        self.scopes.push();
        let last = block.stmts.len().saturating_sub(1);
        for (k, stmt) in block.stmts.iter_mut().enumerate() {
            match stmt {
                Stmt::Local(local) => self.local(local),
                Stmt::Expr(e, semi) => {
                    let p = if semi.is_some() || k != last {
                        Pos::Statement
                    } else {
                        pos
                    };
                    self.expr(e, p);
                }
                Stmt::Item(_) | Stmt::Macro(_) => {}
            }
        }
        self.scopes.pop();
    }

    /// `let PAT = INIT else { .. };`: the initializer is a value, the `else` block diverges.
    fn local(&mut self, local: &mut Local) {
        if let Some(init) = &mut local.init {
            self.expr(&mut init.expr, Pos::Value);
            if let Some((_, diverge)) = &mut init.diverge {
                self.expr(diverge, Pos::Statement);
            }
        }
        self.scopes
            .declare_pattern(&local.pat, local.init.is_none());
    }

    /// One expression at `pos`.
    fn expr(&mut self, e: &mut Expr, pos: Pos) {
        match e {
            Expr::If(_) => control_flow::rewrite_if(self, e, pos),
            Expr::ForLoop(_) => control_flow::rewrite_for(self, e),
            Expr::While(_) => control_flow::rewrite_while(self, e),
            Expr::Loop(l) => {
                // Rejected before the rewrite; kept consistent for `break` all the same.
                self.loops.push(LoopKind::Rust, l.label.as_ref());
                self.block(&mut l.body, Pos::Statement);
                self.loops.pop();
            }
            Expr::Break(_) | Expr::Continue(_) => control_flow::rewrite_jump(self, e),
            Expr::Block(b) => {
                let labeled = b.label.is_some();
                if labeled {
                    self.loops.push(LoopKind::LabeledBlock, b.label.as_ref());
                }
                self.block(&mut b.block, pos);
                if labeled {
                    self.loops.pop();
                }
            }
            Expr::Binary(_) => operators::rewrite_binary(self, e),
            Expr::Cast(_) => operators::rewrite_cast(self, e),
            Expr::Unary(u) if matches!(u.op, syn::UnOp::Neg(_)) => operators::rewrite_neg(self, e),
            Expr::Index(_) => indexing::rewrite_index(self, e),
            Expr::Assign(_) => assign::rewrite_assign(self, e),
            // `[x; N]`: `N` is a constant.
            Expr::Repeat(r) => self.expr(&mut r.expr, Pos::Value),
            // Kept as Rust: macro invocations, constants, and what `reject` refuses.
            Expr::Macro(_)
            | Expr::Const(_)
            | Expr::Closure(_)
            | Expr::Async(_)
            | Expr::Verbatim(_) => {}
            _ => visit_mut::visit_expr_mut(self, e),
        }
    }

    /// The condition of an `if let` / `while let` (or a let-chain): the scrutinees and the
    /// other operands are values; the `&&` of the chain and the patterns stay Rust.
    fn let_chain(&mut self, e: &mut Expr) {
        match e {
            Expr::Let(l) => self.expr(&mut l.expr, Pos::Value),
            Expr::Binary(b) if matches!(b.op, syn::BinOp::And(_)) => {
                self.let_chain(&mut b.left);
                self.let_chain(&mut b.right);
            }
            other => self.expr(other, Pos::Value),
        }
    }
}

/// Subexpressions reached through syn's default walk are values; what must keep its Rust meaning
/// is not entered.
impl VisitMut for Rewriter {
    fn visit_expr_mut(&mut self, e: &mut Expr) {
        self.expr(e, Pos::Value);
    }
    fn visit_block_mut(&mut self, b: &mut Block) {
        self.block(b, Pos::Value);
    }
    fn visit_local_mut(&mut self, l: &mut Local) {
        self.local(l);
    }
    fn visit_item_mut(&mut self, _: &mut syn::Item) {}
    fn visit_macro_mut(&mut self, _: &mut syn::Macro) {}
    fn visit_type_mut(&mut self, _: &mut syn::Type) {}
    fn visit_pat_mut(&mut self, _: &mut syn::Pat) {}
    fn visit_generic_argument_mut(&mut self, _: &mut syn::GenericArgument) {}
    fn visit_attribute_mut(&mut self, _: &mut syn::Attribute) {}
}

/// Takes an expression out of its place, leaving an empty placeholder to be overwritten.
fn take(e: &mut Expr) -> Expr {
    std::mem::replace(e, Expr::Verbatim(TokenStream::new()))
}

/// Strips the parentheses around an expression that becomes a function argument (or a `let`
/// initializer, or a closure body), where they would be unnecessary: Rust would lint the
/// user's parentheses as unused there.
pub(crate) fn unparen(mut e: &Expr) -> &Expr {
    while let Expr::Paren(p) = e {
        e = &p.expr;
    }
    e
}

/// Strips parentheses and invisible groups.
pub(crate) fn peel(mut e: &Expr) -> &Expr {
    loop {
        match e {
            Expr::Paren(p) => e = &p.expr,
            Expr::Group(g) => e = &g.expr,
            _ => return e,
        }
    }
}

/// [`peel`] through a mutable reference.
fn peel_mut(e: &mut Expr) -> &mut Expr {
    match e {
        Expr::Paren(p) => peel_mut(&mut p.expr),
        Expr::Group(g) => peel_mut(&mut g.expr),
        other => other,
    }
}

/// [`peel`] on an owned expression.
fn peel_owned(mut e: Expr) -> Expr {
    loop {
        match e {
            Expr::Paren(p) => e = *p.expr,
            Expr::Group(g) => e = *g.expr,
            _ => return e,
        }
    }
}

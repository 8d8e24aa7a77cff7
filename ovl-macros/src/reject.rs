//! The constructs a body cannot use (EXPANSION.md rewrite 8): each is a compile error at its
//! span that says what to write instead. The whole body is checked, and every error reported.
//!
//! Like the rewrite, the check does not enter macro invocations, nested items, `const` blocks,
//! types or patterns: their contents keep their Rust meaning.

use crate::errors::Errors;
use crate::rewrite::{classify_for, has_let, is_unroll, ForKind, Jump, LoopKind, LoopStack};
use quote::{quote, ToTokens};
use syn::visit::{self, Visit};
use syn::{Block, Expr, Stmt};

/// Which attribute the body belongs to, for the messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Context {
    Operator,
    Helper,
}

impl Context {
    fn attr(self) -> &'static str {
        match self {
            Context::Operator => "#[operator]",
            Context::Helper => "#[helper]",
        }
    }
    fn body(self) -> &'static str {
        match self {
            Context::Operator => "operator",
            Context::Helper => "#[helper] function",
        }
    }
}

/// Checks a function body; `Err` holds every error found.
pub(crate) fn check_body(block: &Block, context: Context) -> Result<(), syn::Error> {
    let mut check = Reject {
        context,
        errors: Errors::default(),
        loops: LoopStack::default(),
    };
    let last = block.stmts.len().saturating_sub(1);
    for (k, stmt) in block.stmts.iter().enumerate() {
        match stmt {
            // The one place where `return` is allowed: the last statement of the body.
            Stmt::Expr(Expr::Return(r), _) if k == last => {
                if let Some(value) = &r.expr {
                    check.visit_expr(value);
                }
            }
            _ => check.visit_stmt(stmt),
        }
    }
    check.errors.finish()
}

struct Reject {
    context: Context,
    errors: Errors,
    loops: LoopStack,
}

impl Reject {
    fn error(&mut self, tokens: impl ToTokens, message: impl std::fmt::Display) {
        self.errors.push(syn::Error::new_spanned(tokens, message));
    }

    fn in_loop(&mut self, kind: LoopKind, label: Option<&syn::Label>, f: impl FnOnce(&mut Self)) {
        self.loops.push(kind, label);
        f(self);
        self.loops.pop();
    }

    /// `break` / `continue` (with its label) that would leave a staged `for` or several `while`s.
    fn check_jump(
        &mut self,
        jump: proc_macro2::TokenStream,
        label: Option<&syn::Lifetime>,
        is_continue: bool,
    ) {
        let what = if is_continue { "continue" } else { "break" };
        match self.loops.resolve(label, is_continue) {
            Jump::OutOfStagedFor => {
                let instead = if is_continue {
                    "put the rest of the body under an `if` on the negated condition"
                } else {
                    "loop with `while` on a staged condition that you clear instead \
                     (e.g. `let mut go = variable(true); while go && i < n { .. }`)"
                };
                self.error(
                    jump,
                    format!(
                        "`{what}` is not supported in a staged `for` loop (a `for` over a range is \
                         one RANGE loop in the IR, its body traced once): {instead}, or write \
                         `#[unroll] for ..` to run the loop at trace time"
                    ),
                );
            }
            Jump::OutOfSeveralWhiles => self.error(
                jump,
                format!(
                    "a labeled `{what}` that leaves more than one `while` loop is not supported: \
                     leave one loop at a time (e.g. set a flag and test it in the outer loop's \
                     condition)"
                ),
            ),
            Jump::Plain | Jump::LeavesWhile | Jump::ContinuesWhile => {}
        }
    }

    fn check_for(&mut self, f: &syn::ExprForLoop) {
        for attr in &f.attrs {
            if is_unroll(attr) {
                if !matches!(attr.meta, syn::Meta::Path(_)) {
                    self.error(
                        attr,
                        "`#[unroll]` takes no arguments: write `#[unroll] for ..`",
                    );
                }
            } else {
                self.visit_attribute(attr);
            }
        }
        let kind = classify_for(f);
        match kind {
            ForKind::NoEnd => self.error(
                &f.expr,
                "a `for` over a range without an end cannot be staged: write `a..b` (the bounds \
                 may be staged), or `#[unroll] for ..` for a loop that runs at trace time",
            ),
            ForKind::NoStart => self.error(
                &f.expr,
                "a staged `for` needs a range with a start: write `0..b`",
            ),
            ForKind::Staged | ForKind::Rust => {}
        }
        self.visit_expr(&f.expr);
        let kind = if kind == ForKind::Rust {
            LoopKind::Rust
        } else {
            LoopKind::StagedFor
        };
        self.in_loop(kind, f.label.as_ref(), |this| this.visit_block(&f.body));
    }
}

impl<'ast> Visit<'ast> for Reject {
    fn visit_expr(&mut self, e: &'ast Expr) {
        let attr = self.context.attr();
        match e {
            Expr::Match(m) => {
                self.error(
                    m.match_token,
                    format!(
                        "`match` is not supported inside {attr}: use `if` / `else if` / `else` on \
                         staged conditions, or move trace-time matching into a plain helper function"
                    ),
                );
                visit::visit_expr_match(self, m);
            }
            Expr::Loop(l) => {
                self.error(
                    l.loop_token,
                    format!(
                        "`loop` is not supported inside {attr}: use `while` on a staged condition, \
                         or a `for` over a range"
                    ),
                );
                self.in_loop(LoopKind::Rust, l.label.as_ref(), |this| {
                    this.visit_block(&l.body)
                });
            }
            Expr::Closure(c) => {
                let (or1, or2) = (&c.or1_token, &c.or2_token);
                self.error(
                    quote!(#or1 #or2),
                    format!(
                        "closures are not supported inside {attr}: use a `#[helper]` function, \
                         or a `for` loop"
                    ),
                );
            }
            Expr::Async(a) => self.error(
                a.async_token,
                format!(
                    "`async` blocks are not supported inside {attr}: an operator is traced \
                     synchronously; compute the value before calling the operator"
                ),
            ),
            Expr::Await(a) => {
                let (dot, await_token) = (&a.dot_token, &a.await_token);
                self.error(
                    quote!(#dot #await_token),
                    format!(
                        "`.await` is not supported inside {attr}: an operator is traced \
                         synchronously; await the value before calling the operator and pass it \
                         as a parameter"
                    ),
                );
                self.visit_expr(&a.base);
            }
            Expr::Unsafe(u) => {
                self.error(
                    u.unsafe_token,
                    format!(
                        "`unsafe` blocks are not supported inside {attr}: move the unsafe code \
                         into a plain function (without {attr}) and call it"
                    ),
                );
                self.visit_block(&u.block);
            }
            Expr::Return(r) => {
                let body = self.context.body();
                self.error(
                    r.return_token,
                    format!(
                        "`return` is only supported as the last statement of the {body}: staged \
                         code cannot leave early; put the rest of the body in an `else` branch (or \
                         assign a `variable(..)` in each branch) and return once, at the end"
                    ),
                );
                if let Some(value) = &r.expr {
                    self.visit_expr(value);
                }
            }
            Expr::ForLoop(f) => self.check_for(f),
            Expr::While(w) => {
                for attr in &w.attrs {
                    self.visit_attribute(attr);
                }
                self.visit_expr(&w.cond);
                let kind = if has_let(&w.cond) {
                    LoopKind::Rust
                } else {
                    LoopKind::While
                };
                self.in_loop(kind, w.label.as_ref(), |this| this.visit_block(&w.body));
            }
            Expr::Block(b) if b.label.is_some() => {
                self.in_loop(LoopKind::LabeledBlock, b.label.as_ref(), |this| {
                    visit::visit_expr_block(this, b)
                });
            }
            Expr::Break(b) => {
                let (token, label) = (&b.break_token, &b.label);
                self.check_jump(quote!(#token #label), b.label.as_ref(), false);
                if let Some(value) = &b.expr {
                    self.visit_expr(value);
                }
            }
            Expr::Continue(c) => {
                let (token, label) = (&c.continue_token, &c.label);
                self.check_jump(quote!(#token #label), c.label.as_ref(), true);
            }
            Expr::Repeat(r) => self.visit_expr(&r.expr),
            Expr::Macro(_) | Expr::Const(_) | Expr::Verbatim(_) => {}
            _ => visit::visit_expr(self, e),
        }
    }

    /// `#[unroll]` anywhere but on a `for` loop (those are checked in `check_for`).
    fn visit_attribute(&mut self, attr: &'ast syn::Attribute) {
        if is_unroll(attr) {
            self.error(
                attr,
                "`#[unroll]` applies only to a `for` loop (`#[unroll] for x in ..`); a `while` on \
                 a trace-time condition already runs at trace time",
            );
        }
    }

    fn visit_item(&mut self, _: &'ast syn::Item) {}
    fn visit_macro(&mut self, _: &'ast syn::Macro) {}
    fn visit_type(&mut self, _: &'ast syn::Type) {}
    fn visit_pat(&mut self, _: &'ast syn::Pat) {}
    fn visit_generic_argument(&mut self, _: &'ast syn::GenericArgument) {}
}

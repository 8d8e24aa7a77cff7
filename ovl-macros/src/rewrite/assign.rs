//! Assignments (EXPANSION.md rewrite 7). Rust's `=` cannot be overloaded, so an assignment to a
//! place becomes a method call that dispatches on the place's type:
//!
//! - `base[[i, j]] = v` -> `RT::write(&base, [RT::ix(i), RT::ix(j)], v)`;
//! - `base[[i, j]] op= v` -> `{ let __ovl_i = [..]; RT::write(&base, __ovl_i.clone(),
//!   RT::read(&base, __ovl_i) op (v)) }` (the indices are evaluated once);
//! - `base[idx] = v` -> `{ use RT::IndexAssign as _; (base).__ovl_index_assign(idx, v) }`;
//! - `place = v` (a path, a field, a `*` deref) -> `{ #[allow(unused_imports)] use
//!   RT::{AssignStaged as _, AssignPlain as _}; let __ovl_v = v; (&mut place).__ovl_assign(__ovl_v) }`: ASSIGN for a `Var`, Rust's
//!   assignment otherwise. The value is bound first, as Rust evaluates it first, so that it may
//!   read the place (`x = x + 1`) before the place is borrowed;
//! - other targets (`_`, tuples, ...) and the first assignment of a local declared without an
//!   initializer (`let x; x = 1;`, which initializes it) stay Rust.

use super::{indexing, peel_mut, rt, take, unparen, Pos, Rewriter};
use proc_macro2::TokenStream;
use quote::quote_spanned;
use syn::spanned::Spanned;
use syn::visit::Visit;
use syn::{parse_quote_spanned, BinOp, Expr, Pat};

/// The binary operator of a compound assignment: `+` for `+=`.
pub(super) fn compound_op(op: &BinOp) -> Option<TokenStream> {
    let span = op.span();
    Some(match op {
        BinOp::AddAssign(_) => quote_spanned!(span=> +),
        BinOp::SubAssign(_) => quote_spanned!(span=> -),
        BinOp::MulAssign(_) => quote_spanned!(span=> *),
        BinOp::DivAssign(_) => quote_spanned!(span=> /),
        BinOp::RemAssign(_) => quote_spanned!(span=> %),
        BinOp::BitXorAssign(_) => quote_spanned!(span=> ^),
        BinOp::BitAndAssign(_) => quote_spanned!(span=> &),
        BinOp::BitOrAssign(_) => quote_spanned!(span=> |),
        BinOp::ShlAssign(_) => quote_spanned!(span=> <<),
        BinOp::ShrAssign(_) => quote_spanned!(span=> >>),
        _ => return None,
    })
}

/// Whether `e` needs parentheses as the right operand of a binary operator.
fn needs_parens(e: &Expr) -> bool {
    !matches!(
        e,
        Expr::Array(_)
            | Expr::Block(_)
            | Expr::Call(_)
            | Expr::Field(_)
            | Expr::Index(_)
            | Expr::Lit(_)
            | Expr::Macro(_)
            | Expr::MethodCall(_)
            | Expr::Paren(_)
            | Expr::Path(_)
            | Expr::Tuple(_)
            | Expr::Unary(_)
    )
}

pub(super) fn rewrite_assign(r: &mut Rewriter, e: &mut Expr) {
    let Expr::Assign(a) = e else { unreachable!() };
    r.expr(&mut a.right, Pos::Value);
    let span = a.eq_token.span;
    let rt = rt(span);
    let value = take(&mut a.right);
    // Parentheses around a place are Rust's: `(x) = 1`.
    let left = peel_mut(&mut a.left);
    match left {
        Expr::Index(ix) if indexing::literal_index(ix).is_some() => {
            let at = indexing::index_span(ix);
            let (base, indices) = indexing::rewrite_parts(r, ix);
            let rt = super::rt(at);
            let value = unparen(&value);
            *e = parse_quote_spanned!(at=> #rt::write(&#base, #indices, #value));
        }
        Expr::Index(ix) => {
            r.expr(&mut ix.expr, Pos::Value);
            r.expr(&mut ix.index, Pos::Value);
            let (base, index, value) = (&ix.expr, unparen(&ix.index), unparen(&value));
            *e = parse_quote_spanned! {span=> {
                use #rt::IndexAssign as _;
                (#base).__ovl_index_assign(#index, #value)
            }};
        }
        Expr::Path(p)
            if p.qself.is_none() && p.path.get_ident().is_some_and(|i| r.scopes.is_deferred(i)) =>
        {
            // `let x; .. x = v;`: the assignment initializes `x`.
            *a.right = value;
        }
        Expr::Path(_)
        | Expr::Field(_)
        | Expr::Unary(syn::ExprUnary {
            op: syn::UnOp::Deref(_),
            ..
        }) => {
            match left {
                Expr::Field(f) => r.expr(&mut f.base, Pos::Value),
                Expr::Unary(u) => r.expr(&mut u.expr, Pos::Value),
                _ => {}
            }
            let (place, value) = (&*left, unparen(&value));
            // One of the two traits is always unused: the method resolves to the other.
            *e = parse_quote_spanned! {span=> {
                #[allow(unused_imports)]
                use #rt::{AssignStaged as _, AssignPlain as _};
                let __ovl_v = #value;
                (&mut #place).__ovl_assign(__ovl_v)
            }};
        }
        // `_ = v`, `(a, b) = ..`, `[a, b] = ..`, `S { .. } = ..`: Rust's destructuring.
        _ => *a.right = value,
    }
}

/// `base[[i, j]] op= v`.
pub(super) fn rewrite_compound_index(r: &mut Rewriter, e: &mut Expr) {
    let Expr::Binary(b) = e else { unreachable!() };
    let op = compound_op(&b.op).expect("a compound assignment");
    let op_span = b.op.span();
    r.expr(&mut b.right, Pos::Value);
    let value = &b.right;
    let value = if needs_parens(value) {
        quote_spanned!(value.span()=> (#value))
    } else {
        quote_spanned!(value.span()=> #value)
    };
    let Expr::Index(ix) = peel_mut(&mut b.left) else {
        unreachable!()
    };
    let at = indexing::index_span(ix);
    let (base, indices) = indexing::rewrite_parts(r, ix);
    let rt = rt(at);
    let read = quote_spanned!(at=> #rt::read(&#base, __ovl_i));
    *e = parse_quote_spanned! {op_span=> {
        let __ovl_i = #indices;
        #rt::write(&#base, __ovl_i.clone(), #read #op #value)
    }};
}

// ---------------------------------------------------------------------------------------------
// Locals declared without an initializer.

/// The locals in scope, innermost last, with whether each was declared without an initializer.
#[derive(Debug, Default)]
pub(crate) struct Scopes {
    frames: Vec<Vec<(String, bool)>>,
}

impl Scopes {
    pub(super) fn push(&mut self) {
        self.frames.push(Vec::new());
    }

    pub(super) fn pop(&mut self) {
        self.frames.pop();
    }

    /// Declares the names bound by `pat` (shadowing any outer ones).
    pub(super) fn declare_pattern(&mut self, pat: &Pat, deferred: bool) {
        struct Names<'a>(&'a mut Vec<(String, bool)>, bool);
        impl<'ast> Visit<'ast> for Names<'_> {
            fn visit_pat_ident(&mut self, p: &'ast syn::PatIdent) {
                self.0.push((p.ident.to_string(), self.1));
                syn::visit::visit_pat_ident(self, p);
            }
            fn visit_expr(&mut self, _: &'ast Expr) {}
        }
        if let Some(frame) = self.frames.last_mut() {
            Names(frame, deferred).visit_pat(pat);
        }
    }

    /// Whether the innermost local named `name` was declared without an initializer.
    pub(super) fn is_deferred(&self, name: &syn::Ident) -> bool {
        self.frames
            .iter()
            .rev()
            .flat_map(|f| f.iter().rev())
            .find(|(n, _)| name == n)
            .is_some_and(|(_, deferred)| *deferred)
    }
}

//! Comparisons, `&&`, `||` and `as` (EXPANSION.md rewrites 4 and 5): Rust cannot overload
//! them to return a staged value, so each becomes a call that dispatches on the operand types.
//!
//! - `a < b` -> `RT::lt(a, b)`, and `le gt ge eq ne` likewise;
//! - `a && b` -> `RT::and(a, || b)`, `a || b` -> `RT::or(a, || b)` (`b` stays lazy: Rust's
//!   short-circuit on trace-time `bool`s);
//! - `e as T` -> `RT::cast::<T, _>(e)`;
//! - `-e` -> `RT::neg(e)` (not on a literal: `-1` stays a literal), so that negating an
//!   unsigned staged value is an error that says why.
//!
//! Compound assignments (`a op= b`) are binary expressions in syn: the ones on an
//! array-literal index go to [`super::assign`], the others keep Rust's (overloadable) meaning.

use super::{assign, indexing, macro_span, peel, rt, take, unparen, Pos, Rewriter};
use quote::quote_spanned;
use syn::spanned::Spanned;
use syn::{parse_quote_spanned, BinOp, Expr};

pub(super) fn rewrite_binary(r: &mut Rewriter, e: &mut Expr) {
    let Expr::Binary(b) = e else { unreachable!() };
    if assign::compound_op(&b.op).is_some() {
        if let Expr::Index(ix) = peel(&b.left) {
            if indexing::literal_index(ix).is_some() {
                assign::rewrite_compound_index(r, e);
                return;
            }
        }
    }
    r.expr(&mut b.left, Pos::Value);
    r.expr(&mut b.right, Pos::Value);
    let span = b.op.span();
    let func = match b.op {
        BinOp::Lt(_) => quote_spanned!(span=> lt),
        BinOp::Le(_) => quote_spanned!(span=> le),
        BinOp::Gt(_) => quote_spanned!(span=> gt),
        BinOp::Ge(_) => quote_spanned!(span=> ge),
        BinOp::Eq(_) => quote_spanned!(span=> eq),
        BinOp::Ne(_) => quote_spanned!(span=> ne),
        BinOp::And(_) | BinOp::Or(_) => {
            let func = if matches!(b.op, BinOp::And(_)) {
                quote_spanned!(span=> and)
            } else {
                quote_spanned!(span=> or)
            };
            let rt = rt(span);
            let (left, right) = (unparen(&b.left), unparen(&b.right));
            // The closure is the macro's, not the user's.
            let bars = quote_spanned!(macro_span(span)=> ||);
            *e = parse_quote_spanned!(span=> #rt::#func(#left, #bars #right));
            return;
        }
        _ => return,
    };
    let rt = rt(span);
    let (left, right) = (unparen(&b.left), unparen(&b.right));
    *e = parse_quote_spanned!(span=> #rt::#func(#left, #right));
}

pub(super) fn rewrite_cast(r: &mut Rewriter, e: &mut Expr) {
    let Expr::Cast(mut c) = take(e) else {
        unreachable!()
    };
    r.expr(&mut c.expr, Pos::Value);
    let span = c.as_token.span;
    let rt = rt(span);
    let (value, ty) = (unparen(&c.expr), &c.ty);
    *e = parse_quote_spanned!(span=> #rt::cast::<#ty, _>(#value));
}

pub(super) fn rewrite_neg(r: &mut Rewriter, e: &mut Expr) {
    let Expr::Unary(mut u) = take(e) else {
        unreachable!()
    };
    r.expr(&mut u.expr, Pos::Value);
    if matches!(peel(&u.expr), Expr::Lit(_)) {
        *e = Expr::Unary(u);
        return;
    }
    let span = u.op.span();
    let rt = rt(span);
    let value = unparen(&u.expr);
    *e = parse_quote_spanned!(span=> #rt::neg(#value));
}

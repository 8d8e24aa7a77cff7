//! Tensor reads (EXPANSION.md rewrite 6): an index whose index is an array literal,
//! `base[[i, j]]`, anywhere but as an assignment target, becomes
//! `RT::read(&base, [RT::ix(i), RT::ix(j)])`. Any other index (`t[pos]`, `v[k]`) is Rust's
//! `Index`, implemented by the runtime for tensors.

use super::{rt, take, unparen, Pos, Rewriter};
use proc_macro2::{Span, TokenStream};
use quote::quote_spanned;
use syn::spanned::Spanned;
use syn::{parse_quote_spanned, Expr, ExprArray, ExprIndex};

/// The array literal of `base[[i, j]]`, if the index is one.
pub(super) fn literal_index(ix: &ExprIndex) -> Option<&ExprArray> {
    match &*ix.index {
        Expr::Array(a) => Some(a),
        _ => None,
    }
}

/// The span of the brackets of an index, `[[i, j]]`: where a read or write is reported.
pub(super) fn index_span(ix: &ExprIndex) -> Span {
    ix.bracket_token.span.join()
}

/// Rewrites the base and the indices of `base[[i, j]]` and returns them as
/// `(base, [RT::ix(i), RT::ix(j)])`.
pub(super) fn rewrite_parts(r: &mut Rewriter, ix: &mut ExprIndex) -> (Expr, TokenStream) {
    r.expr(&mut ix.expr, Pos::Value);
    let Expr::Array(array) = &mut *ix.index else {
        unreachable!("not an array-literal index")
    };
    let mut parts = Vec::with_capacity(array.elems.len());
    for elem in array.elems.iter_mut() {
        let span = elem.span();
        r.expr(elem, Pos::Value);
        let rt = rt(span);
        let elem = unparen(elem);
        parts.push(quote_spanned!(span=> #rt::ix(#elem)));
    }
    let indices = quote_spanned!(index_span(ix)=> [#(#parts),*]);
    (take(&mut ix.expr), indices)
}

pub(super) fn rewrite_index(r: &mut Rewriter, e: &mut Expr) {
    let Expr::Index(ix) = e else { unreachable!() };
    if literal_index(ix).is_none() {
        syn::visit_mut::visit_expr_index_mut(r, ix);
        return;
    }
    let span = index_span(ix);
    let (base, indices) = rewrite_parts(r, ix);
    let rt = rt(span);
    *e = parse_quote_spanned!(span=> #rt::read(&#base, #indices));
}

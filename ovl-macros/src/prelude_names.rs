//! The clash check: a call in an operator or helper body of a name that `ovl::prelude` exports
//! (`log(x)`) must mean the prelude's function, or be written with a path.
//!
//! `use ovl::prelude::*` is a glob import, and Rust lets an item of the user's module (their own
//! `fn log(message: &str)`, or `use std::cmp::max`) win over a glob import *silently*; the error
//! then talks about the user's function's parameters. The macro cannot see the module, but the
//! compiler can: next to the function the expansion declares a module that glob-imports both the
//! user's module and the prelude and names each prelude function the body calls (the module is
//! the body's first item, so that this works for methods too: `super` is the function's module). Where the two
//! globs bring different items of that name, the compiler reports "`log` is ambiguous", at the
//! call, naming both. Where they agree (the usual case, or a module without the prelude's glob
//! and without an item of that name), the module is empty of effect.
//!
//! The fix the error asks for: `ovl::prelude::log(x)` for the DSL function, `self::log(x)` (or
//! another path) for your own. Calls written with a path are never checked.

use proc_macro2::Span;
use quote::quote_spanned;
use syn::visit::Visit;

/// The functions `ovl::prelude` exports (its lowercase names, less the attributes `operator` and
/// `helper`). A unit test keeps this list equal to the prelude in `src/lib.rs`.
pub(crate) const PRELUDE_FUNCTIONS: &[&str] = &[
    "abs",
    "acos",
    "asin",
    "atan",
    "atan2",
    "ceil",
    "constant",
    "cos",
    "cosh",
    "epsilon",
    "erf",
    "evaluate",
    "evaluate_into",
    "evaluate_with",
    "exp",
    "exp2",
    "expm1",
    "floor",
    "fma",
    "isfinite",
    "isinf",
    "isnan",
    "ix",
    "log",
    "log10",
    "log1p",
    "log2",
    "max",
    "max_of",
    "max_value",
    "min",
    "min_of",
    "min_value",
    "normal_f32",
    "normal_f64",
    "ones",
    "output",
    "output_like",
    "philox4x32",
    "position_in",
    "pow",
    "product_of",
    "profile",
    "round",
    "rsqrt",
    "select",
    "sigmoid",
    "sin",
    "sinh",
    "sqrt",
    "sum_of",
    "tan",
    "tanh",
    "trace_error",
    "uniform_f32",
    "uniform_f64",
    "variable",
    "wrapping_neg",
    "zeros",
];

/// The prelude functions `block` calls by their bare name, each with the span of its first call.
fn called_prelude_functions(block: &syn::Block) -> Vec<syn::Ident> {
    struct Calls(Vec<syn::Ident>);
    impl<'ast> Visit<'ast> for Calls {
        fn visit_expr_call(&mut self, call: &'ast syn::ExprCall) {
            if let syn::Expr::Path(p) = &*call.func {
                if p.qself.is_none() && p.path.leading_colon.is_none() {
                    if let Some(ident) = p.path.get_ident() {
                        let name = ident.to_string();
                        if PRELUDE_FUNCTIONS.contains(&name.as_str())
                            && !self.0.iter().any(|seen| *seen == name)
                        {
                            self.0.push(ident.clone());
                        }
                    }
                }
            }
            syn::visit::visit_expr_call(self, call);
        }
        // Nested items keep their own scope (and are not rewritten).
        fn visit_item(&mut self, _: &'ast syn::Item) {}
    }
    let mut calls = Calls(Vec::new());
    calls.visit_block(block);
    calls.0
}

/// Puts first in `block` the module that makes the compiler check the prelude names the block
/// calls (see the module's doc); nothing when it calls none.
pub(crate) fn insert_clash_check(block: &mut syn::Block) {
    let names = called_prelude_functions(block);
    if names.is_empty() {
        return;
    }
    let uses = names
        .iter()
        .map(|name| quote_spanned!(name.span()=> use self::#name as _;));
    let check: syn::Stmt = syn::parse_quote_spanned! {Span::call_site()=>
        #[allow(unused_imports)]
        mod __ovl_prelude_names {
            use super::*;
            use ::ovl::prelude::*;
            #(#uses)*
        }
    };
    block.stmts.insert(0, check);
}

#[cfg(test)]
mod tests {
    use super::PRELUDE_FUNCTIONS;
    use std::collections::BTreeSet;

    /// The lowercase names of every `pub use` in `pub mod prelude { .. }` of the facade.
    fn prelude_names() -> BTreeSet<String> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../src/lib.rs");
        let source = std::fs::read_to_string(path).expect("the facade's src/lib.rs");
        let file: syn::File = syn::parse_str(&source).expect("src/lib.rs parses");
        let prelude = file
            .items
            .iter()
            .find_map(|item| match item {
                syn::Item::Mod(m) if m.ident == "prelude" => m.content.as_ref(),
                _ => None,
            })
            .expect("src/lib.rs has `pub mod prelude { .. }`");
        fn leaves(tree: &syn::UseTree, out: &mut BTreeSet<String>) {
            match tree {
                syn::UseTree::Path(p) => leaves(&p.tree, out),
                syn::UseTree::Name(n) => {
                    out.insert(n.ident.to_string());
                }
                syn::UseTree::Rename(r) => {
                    out.insert(r.rename.to_string());
                }
                syn::UseTree::Group(g) => g.items.iter().for_each(|t| leaves(t, out)),
                syn::UseTree::Glob(_) => panic!("the prelude lists its names (no glob)"),
            }
        }
        let mut names = BTreeSet::new();
        for item in &prelude.1 {
            if let syn::Item::Use(u) = item {
                leaves(&u.tree, &mut names);
            }
        }
        names.retain(|n| n.starts_with(|c: char| c.is_lowercase()));
        names.remove("operator");
        names.remove("helper");
        names
    }

    #[test]
    fn the_list_is_the_preludes_functions() {
        let listed: BTreeSet<String> = PRELUDE_FUNCTIONS.iter().map(|s| s.to_string()).collect();
        assert_eq!(
            listed.len(),
            PRELUDE_FUNCTIONS.len(),
            "a name is listed twice"
        );
        assert_eq!(listed, prelude_names());
    }
}

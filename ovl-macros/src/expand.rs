//! What `#[operator]` and `#[helper]` expand to: the checks of [`crate::signature`] and
//! [`crate::reject`], then the body rewrite of [`crate::rewrite`] and, for an operator, the
//! wrapper of EXPANSION.md ("The operator function").
//!
//! On errors the expansion holds every error and, when the signature itself is sound, a stub
//! with the function's final signature, so that its callers still type-check and the user sees
//! only the errors that matter.

use crate::errors::Errors;
use crate::reject::{self, Context};
use crate::rewrite::{self, Pos};
use crate::signature::{self, OperatorSignature, ParamKind};
use proc_macro2::TokenStream;
use quote::{quote, quote_spanned, ToTokens};
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{ItemFn, ReturnType};

/// The result of an expansion: the tokens, and the errors they carry (kept apart for tests).
pub(crate) struct Expansion {
    pub(crate) tokens: TokenStream,
    pub(crate) errors: Option<syn::Error>,
}

impl Expansion {
    fn ok(tokens: TokenStream) -> Self {
        Expansion {
            tokens,
            errors: None,
        }
    }

    fn failed(errors: syn::Error, stub: TokenStream) -> Self {
        Expansion {
            tokens: stub,
            errors: Some(errors),
        }
    }

    /// The tokens for the compiler: the errors as `compile_error!`s, then the item.
    pub(crate) fn into_tokens(self) -> TokenStream {
        let errors = self.errors.map(|e| e.to_compile_error());
        let tokens = self.tokens;
        quote!(#errors #tokens)
    }
}

/// Parses the item under the attribute: a function, or an error that says so (the item is kept).
fn parse_fn(
    attr: TokenStream,
    item: TokenStream,
    name: &str,
    errors: &mut Errors,
) -> Result<ItemFn, Expansion> {
    if !attr.is_empty() {
        errors.push(syn::Error::new_spanned(
            &attr,
            format!("#[{name}] takes no arguments: write `#[{name}]`"),
        ));
    }
    match syn::parse2::<syn::Item>(item.clone()) {
        Ok(syn::Item::Fn(f)) => Ok(f),
        Ok(other) => {
            let e = syn::Error::new_spanned(
                &other,
                format!("#[{name}] applies to a function: `#[{name}] fn name(x: Tensor<f32>) -> Tensor<f32> {{ .. }}`"),
            );
            errors.push(e);
            Err(Expansion::failed(std::mem::take(errors).into_error(), item))
        }
        Err(e) => {
            errors.push(e);
            Err(Expansion::failed(
                std::mem::take(errors).into_error(),
                TokenStream::new(),
            ))
        }
    }
}

/// `#[operator]`.
pub(crate) fn operator(attr: TokenStream, item: TokenStream) -> Expansion {
    let mut errors = Errors::default();
    let mut f = match parse_fn(attr, item, "operator", &mut errors) {
        Ok(f) => f,
        Err(e) => return e,
    };
    let sig = errors.check(signature::parse_operator(&f.sig));
    errors.check(reject::check_body(&f.block, Context::Operator));
    match (errors.finish(), sig) {
        (Ok(()), Some(sig)) => {
            rewrite::rewrite_body(&mut f.block, Pos::Value);
            Expansion::ok(wrapper(&f, &sig, WrapperBody::Trace))
        }
        // Only the body is wrong: a stub with the real signature.
        (Err(e), Some(sig)) => Expansion::failed(e, wrapper(&f, &sig, WrapperBody::Stub)),
        // The signature is wrong: no item at all (what it would be is unknown).
        (Err(e), None) => Expansion::failed(e, TokenStream::new()),
        (Ok(()), None) => unreachable!("a failed signature records an error"),
    }
}

/// `#[helper]`.
pub(crate) fn helper(attr: TokenStream, item: TokenStream) -> Expansion {
    let mut errors = Errors::default();
    let mut f = match parse_fn(attr, item, "helper", &mut errors) {
        Ok(f) => f,
        Err(e) => return e,
    };
    let sig_ok = errors.check(signature::check_helper(&f.sig)).is_some();
    errors.check(reject::check_body(&f.block, Context::Helper));
    if let Err(e) = errors.finish() {
        if !sig_ok {
            return Expansion::failed(e, TokenStream::new());
        }
        *f.block =
            syn::parse_quote!({ ::core::unreachable!("this #[helper] function did not compile") });
        f.attrs.push(syn::parse_quote!(#[allow(unused_variables)]));
        return Expansion::failed(e, f.into_token_stream());
    }
    // A function returning `()` discards the value of its body: its tail is a statement.
    let tail = match &f.sig.output {
        ReturnType::Default => Pos::Statement,
        ReturnType::Type(_, ty) if matches!(&**ty, syn::Type::Tuple(t) if t.elems.is_empty()) => {
            Pos::Statement
        }
        ReturnType::Type(..) => Pos::Value,
    };
    rewrite::rewrite_body(&mut f.block, tail);
    Expansion::ok(f.into_token_stream())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum WrapperBody {
    /// The traced body.
    Trace,
    /// The body did not compile: a stub with the same signature.
    Stub,
}

/// ```text
/// pub fn name<G>(a: impl RT::IntoLazy<E>, xs: Vec<Lazy<E>>, k: f32) -> <RET as RT::Outputs>::Lazy {
///     let mut __ovl_key = RT::TraceKey::new();
///     let a: Lazy<E> = RT::IntoLazy::<E>::into_lazy(a); __ovl_key.tensor(&a);
///     __ovl_key.tensors(&xs); (&&&RT::KeyWrap(&k)).__ovl_key(&mut __ovl_key);
///     RT::trace_operator_keyed::<RET, _>(RT::OperatorSite { .. }, __ovl_key, move |__ovl_tracer| -> RET {
///         let a: Tensor<E> = __ovl_tracer.input(a); ..; BODY
///     })
/// }
/// ```
fn wrapper(f: &ItemFn, sig: &OperatorSignature, body: WrapperBody) -> TokenStream {
    let ItemFn { attrs, vis, .. } = f;
    let syn::Signature {
        fn_token,
        ident,
        generics,
        ..
    } = &f.sig;
    let where_clause = &generics.where_clause;
    let ret = &sig.output;

    let mut params = Vec::new();
    let mut inputs = Vec::new();
    // The memo key of the call (EXPANSION.md, "The memo key"), built before the body runs.
    let mut key = Vec::new();
    for p in &sig.params {
        let param_attrs = &p.arg.attrs;
        match &p.kind {
            ParamKind::Constant => {
                params.push(p.arg.to_token_stream());
                let at = crate::rewrite::macro_span(p.arg.pat.span());
                key.push(match &*p.arg.pat {
                    syn::Pat::Ident(syn::PatIdent {
                        ident,
                        by_ref: None,
                        subpat: None,
                        ..
                    }) => quote_spanned! {at=>
                        (&&&::ovl::__rt::KeyWrap(&#ident)).__ovl_key(&mut __ovl_key);
                    },
                    _ => quote_spanned!(at=> __ovl_key.unkeyable();),
                });
            }
            ParamKind::Tensor { elem } | ParamKind::TensorList { elem } => {
                let (name, mutability) = p.ident();
                let list = matches!(p.kind, ParamKind::TensorList { .. });
                let at = crate::rewrite::macro_span(name.span());
                key.push(if list {
                    quote_spanned!(at=> __ovl_key.tensors(&#name);)
                } else {
                    quote_spanned!(at=>
                        let #name: ::ovl::Lazy<#elem> = ::ovl::__rt::IntoLazy::<#elem>::into_lazy(#name);
                        __ovl_key.tensor(&#name);)
                });
                params.push(if list {
                    quote!(#(#param_attrs)* #name: ::std::vec::Vec<::ovl::Lazy<#elem>>)
                } else {
                    quote!(#(#param_attrs)* #name: impl ::ovl::__rt::IntoLazy<#elem>)
                });
                inputs.push(if list {
                    quote_spanned!(name.span()=>
                        let #mutability #name: ::std::vec::Vec<::ovl::Tensor<#elem>> = __ovl_tracer.input_list(#name);)
                } else {
                    quote_spanned!(name.span()=>
                        let #mutability #name: ::ovl::Tensor<#elem> = __ovl_tracer.input(#name);)
                });
            }
        }
    }

    // Located at the return type, so that "an operator must return its output tensor(s)" points
    // there; marked as the macro's, so that lints (clippy's `type_complexity`) do not take the
    // projection for the user's own type.
    let at = crate::rewrite::macro_span(ret.span());
    let output = quote_spanned!(at=> -> <#ret as ::ovl::__rt::Outputs>::Lazy);
    if body == WrapperBody::Stub {
        return quote! {
            #(#attrs)*
            #[allow(unused_variables)]
            #vis #fn_token #ident #generics (#(#params),*) #output #where_clause {
                ::core::unreachable!("this #[operator] function did not compile")
            }
        };
    }

    let name = syn::LitStr::new(&ident.unraw().to_string(), ident.span());
    let span = ident.span();
    let site = quote_spanned! {span=>
        ::ovl::__rt::OperatorSite {
            name: #name,
            file: ::core::file!(),
            line: ::core::line!(),
            column: ::core::column!(),
        }
    };
    let stmts = &f.block.stmts;
    let closure = quote! {
        move |__ovl_tracer: &mut ::ovl::__rt::Tracer| -> #ret {
            #(#inputs)*
            #(#stmts)*
        }
    };
    // The call, and the function's block, at the return type: the bound `RET: Outputs` they
    // carry is reported there rather than at the attribute.
    let body = quote_spanned! {at=>
        {
            #[allow(unused_imports)]
            use ::ovl::__rt::{KeyByScalar as _, KeyByTraceArg as _, KeyNone as _};
            let mut __ovl_key = ::ovl::__rt::TraceKey::new();
            #(#key)*
            ::ovl::__rt::trace_operator_keyed::<#ret, _>(#site, __ovl_key, #closure)
        }
    };
    quote! {
        #(#attrs)*
        #vis #fn_token #ident #generics (#(#params),*) #output #where_clause #body
    }
}

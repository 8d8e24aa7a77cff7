//! What `#[operator]` and `#[helper]` expand to: the checks of [`crate::signature`] and
//! [`crate::reject`], then the body rewrite of [`crate::rewrite`] and, for an operator, the
//! wrapper of EXPANSION.md ("The operator function").
//!
//! On errors the expansion holds every error and, when the signature itself is sound, a stub
//! with the function's final signature, so that its callers still type-check and the user sees
//! only the errors that matter.

use crate::errors::Errors;
use crate::prelude_names;
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

/// The arguments of `#[operator(..)]`.
#[derive(Default)]
struct OperatorArgs {
    /// `gradient = path`: the function computing the input gradients of every call.
    gradient: Option<syn::ExprPath>,
    /// `gradient = auto`: the gradient is derived from the traced IR (as without the argument;
    /// the argument says so explicitly).
    auto: bool,
}

/// Parses `#[operator]` / `#[operator(gradient = path)]` / `#[operator(gradient = auto)]`.
fn parse_operator_args(attr: TokenStream, errors: &mut Errors) -> OperatorArgs {
    let mut args = OperatorArgs::default();
    if attr.is_empty() {
        return args;
    }
    let parser = syn::meta::parser(|meta| {
        if meta.path.is_ident("gradient") {
            let path: syn::ExprPath = meta.value()?.parse().map_err(|e| {
                syn::Error::new(
                    e.span(),
                    "expected the path of the gradient function: `#[operator(gradient = my_grad)]`",
                )
            })?;
            let given = args.gradient.is_some() || args.auto;
            if path.path.is_ident("auto") {
                args.auto = true;
            } else {
                args.gradient = Some(path);
            }
            if given {
                return Err(meta.error("`gradient` is given twice"));
            }
            Ok(())
        } else {
            Err(meta.error(
                "unknown argument of #[operator]: the only one is `gradient = my_grad` \
                 (the function that computes the input gradients); write `#[operator]` or \
                 `#[operator(gradient = my_grad)]`",
            ))
        }
    });
    if let Err(e) = syn::parse::Parser::parse2(parser, attr) {
        errors.push(e);
    }
    args
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
    let args = parse_operator_args(attr, &mut errors);
    let mut f = match parse_fn(TokenStream::new(), item, "operator", &mut errors) {
        Ok(f) => f,
        Err(e) => return e,
    };
    let sig = errors.check(signature::parse_operator(&f.sig));
    if let (Some(g), Some(sig)) = (&args.gradient, &sig) {
        check_gradient_signature(g, sig, &mut errors);
    }
    errors.check(reject::check_body(&f.block, Context::Operator));
    match (errors.finish(), sig) {
        (Ok(()), Some(sig)) => {
            prelude_names::insert_clash_check(&mut f.block);
            rewrite::rewrite_body(&mut f.block, Pos::Value);
            Expansion::ok(wrapper(
                &f,
                &sig,
                WrapperBody::Trace(args.gradient.as_ref()),
            ))
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
    prelude_names::insert_clash_check(&mut f.block);
    rewrite::rewrite_body(&mut f.block, tail);
    Expansion::ok(f.into_token_stream())
}

#[derive(Clone, Copy)]
enum WrapperBody<'a> {
    /// The traced body, and the gradient function of `#[operator(gradient = ..)]`.
    Trace(Option<&'a syn::ExprPath>),
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
    let gradient = match body {
        WrapperBody::Stub => None,
        WrapperBody::Trace(g) => Some(g),
    };
    let Some(gradient) = gradient else {
        return quote! {
            #(#attrs)*
            #[allow(unused_variables)]
            #vis #fn_token #ident #generics (#(#params),*) #output #where_clause {
                ::core::unreachable!("this #[operator] function did not compile")
            }
        };
    };

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
    let keyed = quote_spanned! {at=>
        #[allow(unused_imports)]
        use ::ovl::__rt::{KeyByScalar as _, KeyByTraceArg as _, KeyNone as _};
        #[allow(unused_mut, unused_variables)]
        let mut __ovl_key = ::ovl::__rt::TraceKey::new();
        #(#key)*
    };
    let body = match gradient {
        None => quote_spanned! {at=>
            {
                #keyed
                ::ovl::__rt::trace_operator_keyed::<#ret, _>(#site, __ovl_key, #closure)
            }
        },
        // A call with a gradient attached is traced every time (the memo keys calls without).
        Some(g) => {
            let (prelude, gradient_fn) = gradient_closure(g, sig);
            let call = quote_spanned! {at=>
                ::ovl::__rt::trace_operator_with_gradient::<#ret, _, _>(#site, #closure, __ovl_gradient)
            };
            quote! {{ #keyed #prelude let __ovl_gradient = #gradient_fn; #call }}
        }
    };
    quote! {
        #(#attrs)*
        #vis #fn_token #ident #generics (#(#params),*) #output #where_clause #body
    }
}

/// An operator with a gradient needs tensor inputs, and constants it can capture by name.
fn check_gradient_signature(g: &syn::ExprPath, sig: &OperatorSignature, errors: &mut Errors) {
    if !sig
        .params
        .iter()
        .any(|p| !matches!(p.kind, ParamKind::Constant))
    {
        errors.push(syn::Error::new_spanned(
            g,
            "an operator without tensor parameters has nothing to differentiate: remove \
             `gradient = ..`",
        ));
    }
    for p in &sig.params {
        if matches!(p.kind, ParamKind::Constant)
            && !matches!(&*p.arg.pat, syn::Pat::Ident(i) if i.subpat.is_none() && i.by_ref.is_none())
        {
            errors.push(syn::Error::new_spanned(
                &p.arg.pat,
                "with `#[operator(gradient = ..)]`, every constant parameter must be a plain name \
                 (it is passed on to the gradient function): bind it to a name and destructure \
                 it inside the body",
            ));
        }
    }
}

/// The gradient function of `#[operator(gradient = g)]`, as a closure for
/// `trace_operator_with_gradient`, and what must run before the call (copies of the constants
/// and the lengths of list inputs, which the traced body consumes):
///
/// ```text
/// let __ovl_gc_0 = Clone::clone(&k); let __ovl_gl_1 = xs.len();
/// move |call| {
///     let __ovl_in_0 = RT::grad_input::<E0>(call, &mut i); ..          // the tensor inputs
///     let __ovl_dy_0 = <<R0 as RT::Outputs>::Lazy as RT::OutputGrads>::from_call(call, &mut j); ..
///     let (__ovl_g_0, ..) = g(__ovl_in_0, .., __ovl_dy_0, .., Clone::clone(&__ovl_gc_0), ..);
///     vec![RT::input_gradient::<E0, _>(__ovl_g_0), ..]                  // typed: checked by rustc
/// }
/// ```
///
/// The call and the checks carry the span of `g`, so that a gradient function of the wrong
/// arity or types is reported there.
fn gradient_closure(g: &syn::ExprPath, sig: &OperatorSignature) -> (TokenStream, TokenStream) {
    let span = g.span();
    let mut prelude = Vec::new();
    let mut take_inputs = Vec::new();
    let mut input_args = Vec::new();
    let mut const_args = Vec::new();
    let mut grads = Vec::new();
    let mut collect = Vec::new();
    for (n, p) in sig.params.iter().enumerate() {
        let name = match &*p.arg.pat {
            syn::Pat::Ident(i) => &i.ident,
            _ => unreachable!("checked by check_gradient_signature"),
        };
        match &p.kind {
            ParamKind::Constant => {
                let copy = quote::format_ident!("__ovl_gc_{}", n);
                prelude
                    .push(quote_spanned!(span=> let #copy = ::core::clone::Clone::clone(&#name);));
                const_args.push(quote_spanned!(span=> ::core::clone::Clone::clone(&#copy)));
            }
            ParamKind::Tensor { elem } => {
                let v = quote::format_ident!("__ovl_in_{}", n);
                take_inputs.push(quote_spanned!(span=>
                    let #v = ::ovl::__rt::grad_input::<#elem>(__ovl_call, &mut __ovl_i);));
                input_args.push(v);
                let gv = quote::format_ident!("__ovl_g_{}", n);
                collect.push(quote_spanned!(span=>
                    __ovl_grads.push(::ovl::__rt::input_gradient::<#elem, _>(#gv));));
                grads.push(gv);
            }
            ParamKind::TensorList { elem } => {
                let len = quote::format_ident!("__ovl_gl_{}", n);
                prelude.push(quote_spanned!(span=> let #len = #name.len();));
                let v = quote::format_ident!("__ovl_in_{}", n);
                take_inputs.push(quote_spanned!(span=>
                    let #v = ::ovl::__rt::grad_input_list::<#elem>(__ovl_call, &mut __ovl_i, #len);));
                input_args.push(v);
                let gv = quote::format_ident!("__ovl_g_{}", n);
                collect.push(quote_spanned!(span=>
                    __ovl_grads.extend(::ovl::__rt::input_gradients::<#elem, _>(#gv));));
                grads.push(gv);
            }
        }
    }
    let outputs: Vec<&syn::Type> = match strip_parens(&sig.output) {
        syn::Type::Tuple(t) => t.elems.iter().collect(),
        other => vec![other],
    };
    let mut output_args = Vec::new();
    let mut take_outputs = Vec::new();
    for (n, ty) in outputs.iter().enumerate() {
        let v = quote::format_ident!("__ovl_dy_{}", n);
        take_outputs.push(quote_spanned!(span=>
            let #v = <<#ty as ::ovl::__rt::Outputs>::Lazy as ::ovl::__rt::OutputGrads>::from_call(
                __ovl_call, &mut __ovl_j);));
        output_args.push(v);
    }
    let destructure = if grads.len() == 1 {
        quote!(#(#grads)*)
    } else {
        quote_spanned!(span=> (#(#grads),*))
    };
    let call = quote_spanned! {span=>
        let #destructure = #g(#(#input_args,)* #(#output_args,)* #(#const_args),*);
    };
    let closure = quote! {
        move |__ovl_call: &::ovl::__rt::GradientCall<'_>|
            -> ::std::vec::Vec<::core::option::Option<::ovl::__rt::LazyTensor>> {
            let mut __ovl_i = 0usize;
            let mut __ovl_j = 0usize;
            #(#take_inputs)*
            #(#take_outputs)*
            #call
            let mut __ovl_grads = ::std::vec::Vec::new();
            #(#collect)*
            __ovl_grads
        }
    };
    (quote!(#(#prelude)*), closure)
}

fn strip_parens(ty: &syn::Type) -> &syn::Type {
    match ty {
        syn::Type::Paren(p) => strip_parens(&p.elem),
        syn::Type::Group(g) => strip_parens(&g.elem),
        other => other,
    }
}

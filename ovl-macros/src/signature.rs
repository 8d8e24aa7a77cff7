//! The signature of an operator: its parameters (tensor, tensor list, trace-time constant) and
//! its outputs, checked and classified before any code is generated. Also the (smaller) checks
//! on the signature of a `#[helper]`.

use crate::errors::Errors;
use syn::visit::Visit;
use syn::{FnArg, GenericArgument, Pat, PathArguments, ReturnType, Signature, Type};

/// What a parameter of an operator is.
#[derive(Debug)]
pub(crate) enum ParamKind {
    /// `x: Tensor<E>`: one tensor input.
    Tensor { elem: Type },
    /// `xs: Vec<Tensor<E>>`: a list of tensor inputs.
    TensorList { elem: Type },
    /// Anything else: a trace-time constant, passed through as written.
    Constant,
}

/// One parameter of an operator.
#[derive(Debug)]
pub(crate) struct Param {
    pub(crate) arg: syn::PatType,
    pub(crate) kind: ParamKind,
}

impl Param {
    /// The identifier and `mut` of a tensor parameter (checked to be `x` or `mut x`).
    pub(crate) fn ident(&self) -> (&syn::Ident, Option<&syn::token::Mut>) {
        match &*self.arg.pat {
            Pat::Ident(p) => (&p.ident, p.mutability.as_ref()),
            _ => unreachable!("checked by `parse_operator`"),
        }
    }
}

/// A checked operator signature.
#[derive(Debug)]
pub(crate) struct OperatorSignature {
    pub(crate) params: Vec<Param>,
    /// `RET` in `-> RET`.
    pub(crate) output: Type,
}

/// Checks and classifies the signature of an `#[operator]` function; every problem is
/// reported, not only the first.
pub(crate) fn parse_operator(sig: &Signature) -> Result<OperatorSignature, syn::Error> {
    let mut errors = Errors::default();
    check_qualifiers(sig, "#[operator]", &mut errors);
    let mut params = Vec::new();
    for input in &sig.inputs {
        match input {
            FnArg::Receiver(r) => errors.push(syn::Error::new_spanned(
                r,
                "#[operator] cannot take `self`: an operator is a free function of its tensors \
                 and constants; pass the value as a parameter (`x: Tensor<f32>`, or a constant)",
            )),
            FnArg::Typed(arg) => {
                reject_impl_trait(&arg.ty, "#[operator]", &mut errors);
                let kind = classify(&arg.ty, &mut errors);
                if !matches!(kind, ParamKind::Constant) {
                    check_tensor_pattern(&arg.pat, &mut errors);
                }
                params.push(Param {
                    arg: arg.clone(),
                    kind,
                });
            }
        }
    }
    let output = match &sig.output {
        ReturnType::Type(_, ty) if !is_unit(ty) => {
            if let Some(t) = find_impl_trait(ty) {
                errors.push(syn::Error::new_spanned(
                    t,
                    "`impl Trait` is not supported in the return type of #[operator]: return the \
                     concrete output type, e.g. `Tensor<f32>` or `(Tensor<f32>, Tensor<i32>)`",
                ));
            }
            Some((**ty).clone())
        }
        other => {
            let at = match other {
                ReturnType::Type(arrow, ty) => {
                    syn::Error::new_spanned(quote::quote!(#arrow #ty), MISSING_RETURN)
                }
                ReturnType::Default => {
                    syn::Error::new(sig.paren_token.span.close(), MISSING_RETURN)
                }
            };
            errors.push(at);
            None
        }
    };
    errors.finish()?;
    Ok(OperatorSignature {
        params,
        output: output.expect("checked"),
    })
}

const MISSING_RETURN: &str = "an operator must return its output tensor(s): add a return type, \
     e.g. `-> Tensor<f32>` or `-> (Tensor<f32>, Tensor<i32>)`, and return the tensors made with \
     `output(..)` / `output_like(..)`";

/// Checks the signature of a `#[helper]` function (`self` and any parameter are allowed).
pub(crate) fn check_helper(sig: &Signature) -> Result<(), syn::Error> {
    let mut errors = Errors::default();
    check_qualifiers(sig, "#[helper]", &mut errors);
    errors.finish()
}

/// `async`, `const`, `unsafe`, `extern` and variadic functions cannot be traced.
fn check_qualifiers(sig: &Signature, what: &str, errors: &mut Errors) {
    if let Some(t) = &sig.asyncness {
        errors.push(syn::Error::new(
            t.span,
            format!("{what} functions cannot be `async`: their body is traced synchronously, once; remove `async`"),
        ));
    }
    if let Some(t) = &sig.constness {
        errors.push(syn::Error::new(
            t.span,
            format!("{what} functions cannot be `const`: their body is traced at run time; remove `const`"),
        ));
    }
    if let Some(t) = &sig.unsafety {
        errors.push(syn::Error::new(
            t.span,
            format!(
                "{what} functions cannot be `unsafe`: remove `unsafe`, and move unsafe code into a plain \
                 function (without {what}) that the body calls"
            ),
        ));
    }
    if let Some(abi) = &sig.abi {
        errors.push(syn::Error::new_spanned(
            abi,
            format!("{what} functions cannot have an `extern` ABI: remove it"),
        ));
    }
    if let Some(v) = &sig.variadic {
        errors.push(syn::Error::new_spanned(
            v,
            format!("{what} functions cannot be variadic"),
        ));
    }
}

/// A tensor parameter is bound to a plain identifier: `x` or `mut x`.
fn check_tensor_pattern(pat: &Pat, errors: &mut Errors) {
    let ok = matches!(pat, Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none());
    if !ok {
        errors.push(syn::Error::new_spanned(
            pat,
            "a tensor parameter must be a plain identifier (`x: Tensor<f32>` or `mut x: Tensor<f32>`): \
             bind it to a name and destructure it inside the body",
        ));
    }
}

/// `impl Trait` anywhere in a parameter type.
fn reject_impl_trait(ty: &Type, what: &str, errors: &mut Errors) {
    if let Some(t) = find_impl_trait(ty) {
        errors.push(syn::Error::new_spanned(
            t,
            format!(
                "`impl Trait` parameters are not supported by {what}: declare a named generic \
                 parameter instead, e.g. `fn op<F: Trait>(.., f: F)`"
            ),
        ));
    }
}

fn find_impl_trait(ty: &Type) -> Option<&syn::TypeImplTrait> {
    struct Find<'a>(Option<&'a syn::TypeImplTrait>);
    impl<'a> Visit<'a> for Find<'a> {
        fn visit_type_impl_trait(&mut self, t: &'a syn::TypeImplTrait) {
            self.0.get_or_insert(t);
        }
    }
    let mut find = Find(None);
    find.visit_type(ty);
    find.0
}

fn is_unit(ty: &Type) -> bool {
    matches!(ty, Type::Tuple(t) if t.elems.is_empty())
}

/// The single type argument of a path type whose last segment is `name`: `E` in
/// `Tensor<E>`, `ovl::Tensor<E>`.
fn generic_arg<'a>(ty: &'a Type, name: &str) -> Option<&'a Type> {
    let Type::Path(p) = ty else { return None };
    if p.qself.is_some() {
        return None;
    }
    let last = p.path.segments.last()?;
    if last.ident != name {
        return None;
    }
    let PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    match args.args.iter().collect::<Vec<_>>()[..] {
        [GenericArgument::Type(t)] => Some(t),
        _ => None,
    }
}

/// Whether a type mentions `Tensor<..>` anywhere.
fn mentions_tensor(ty: &Type) -> Option<&Type> {
    struct Find<'a>(Option<&'a Type>);
    impl<'a> Visit<'a> for Find<'a> {
        fn visit_type(&mut self, t: &'a Type) {
            if self.0.is_none() && generic_arg(t, "Tensor").is_some() {
                self.0 = Some(t);
            }
            syn::visit::visit_type(self, t);
        }
    }
    let mut find = Find(None);
    find.visit_type(ty);
    find.0
}

/// Classifies a parameter by its type; a tensor in any other shape is an error.
fn classify(ty: &Type, errors: &mut Errors) -> ParamKind {
    if let Some(elem) = generic_arg(ty, "Tensor") {
        return ParamKind::Tensor { elem: elem.clone() };
    }
    if let Some(elem) = generic_arg(ty, "Vec").and_then(|t| generic_arg(t, "Tensor")) {
        return ParamKind::TensorList { elem: elem.clone() };
    }
    if mentions_tensor(ty).is_some() {
        errors.push(syn::Error::new_spanned(
            ty,
            "a tensor parameter must be `Tensor<E>` (one tensor, by value) or `Vec<Tensor<E>>` \
             (a list of tensors); references, slices, arrays and other wrappers of tensors are \
             not supported",
        ));
    }
    ParamKind::Constant
}

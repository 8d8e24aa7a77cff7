//! Snapshot tests of the expansion, without a runtime: each file `tests/cases/NAME.rs` is one
//! function under `#[operator]` or `#[helper]`; the snapshot `tests/snapshots/NAME.snap` holds
//! its expansion, pretty-printed, preceded by the compile errors with their `line:column` in the
//! case file.
//!
//! Add a case by adding a file; review a new or changed snapshot with `cargo insta review` (or
//! run with `INSTA_UPDATE=always` and read the diff).

use crate::expand::{self, Expansion};
use quote::ToTokens;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Expands the function of a case file as the compiler would: the attribute is taken off the
/// item and its arguments passed apart.
fn expand_case(source: &str) -> Expansion {
    let file: syn::File = syn::parse_str(source).expect("the case parses");
    let [syn::Item::Fn(f)] = &file.items[..] else {
        panic!("a case holds one function");
    };
    let mut f = f.clone();
    let at = f
        .attrs
        .iter()
        .position(|a| a.path().is_ident("operator") || a.path().is_ident("helper"))
        .expect("the case function has #[operator] or #[helper]");
    let attr = f.attrs.remove(at);
    let args = match &attr.meta {
        syn::Meta::List(list) => list.tokens.clone(),
        _ => Default::default(),
    };
    if attr.path().is_ident("operator") {
        expand::operator(args, f.into_token_stream())
    } else {
        expand::helper(args, f.into_token_stream())
    }
}

/// The errors (one a line, at their position) and the pretty-printed tokens.
fn render(expansion: Expansion) -> String {
    let mut out = String::new();
    if let Some(errors) = &expansion.errors {
        for e in errors {
            let at = e.span().start();
            writeln!(out, "error at {}:{}: {}", at.line, at.column + 1, e).unwrap();
        }
        out.push('\n');
    }
    if expansion.tokens.is_empty() {
        out.push_str("(no item)\n");
    } else {
        let file: syn::File = syn::parse2(expansion.tokens).expect("the expansion parses as Rust");
        out.push_str(&prettyplease::unparse(&file));
    }
    out
}

fn cases() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cases");
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/cases exists")
        .map(|e| e.expect("readable").path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .collect();
    cases.sort();
    cases
}

#[test]
fn expansions() {
    let mut failed = Vec::new();
    for path in cases() {
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let source = std::fs::read_to_string(&path).unwrap();
        let result = std::panic::catch_unwind(|| {
            let rendered = render(expand_case(&source));
            let mut settings = insta::Settings::clone_current();
            settings.set_snapshot_path("../tests/snapshots");
            settings.set_prepend_module_to_snapshot(false);
            settings.set_omit_expression(true);
            settings.set_description(source.as_str());
            settings.set_input_file(&path);
            settings.bind(|| insta::assert_snapshot!(name.as_str(), rendered));
        });
        if result.is_err() {
            failed.push(name);
        }
    }
    assert!(failed.is_empty(), "snapshots that differ: {failed:?}");
}

/// Each rejected construct has a case whose name starts with `reject_`, and it does fail.
#[test]
fn rejection_cases_fail() {
    for path in cases() {
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let source = std::fs::read_to_string(&path).unwrap();
        let failed = expand_case(&source).errors.is_some();
        assert_eq!(
            failed,
            name.starts_with("reject_"),
            "case `{name}`: a `reject_` case must fail and any other must succeed"
        );
    }
}

/// An attribute on something else than a function: the errors, and the item kept as it was.
#[test]
fn not_a_function() {
    let expansion = expand::operator(
        quote::quote!(fast),
        quote::quote!(
            struct S;
        ),
    );
    let messages: Vec<String> = expansion
        .errors
        .into_iter()
        .flatten()
        .map(|e| e.to_string())
        .collect();
    assert_eq!(
        messages,
        [
            "unknown argument of #[operator]: the only one is `gradient = my_grad` (the function that computes the input gradients); write `#[operator]` or `#[operator(gradient = my_grad)]`",
            "#[operator] applies to a function: `#[operator] fn name(x: Tensor<f32>) -> Tensor<f32> { .. }`",
        ]
    );
    assert_eq!(expansion.tokens.to_string(), "struct S ;");
    let helper = expand::helper(
        Default::default(),
        quote::quote!(
            const C: u8 = 1;
        ),
    );
    assert!(helper.errors.is_some());
    assert_eq!(helper.tokens.to_string(), "const C : u8 = 1 ;");
}

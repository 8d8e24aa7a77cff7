//! The Python package `ovl_tf` reads the files `ovl::export` writes, so it mirrors three of its
//! constants (Python cannot import Rust constants without loading the bridge library, which
//! reading a bad bundle must not need). This test keeps the two in step: the Rust side is the
//! source of truth.

use std::path::Path;

/// The source of the module `ovl_tf/<module>.py`.
fn python_source(module: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("python/ovl_tf/{module}.py"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The right-hand side of `name = value` at the start of a line.
fn assignment<'a>(source: &'a str, name: &str) -> &'a str {
    source
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{name} = ")))
        .unwrap_or_else(|| panic!("the ovl_tf module defines no `{name} = ...`"))
        .trim()
}

#[test]
fn ovl_tf_mirrors_the_bundle_constants() {
    let bundle = python_source("_bundle");
    assert_eq!(
        assignment(&bundle, "BUNDLE_FORMAT"),
        format!("{:?}", ovl::export::BUNDLE_FORMAT)
    );
    assert_eq!(
        assignment(&bundle, "_BUNDLE_VERSION"),
        ovl::export::BUNDLE_VERSION.to_string()
    );
    let header = std::str::from_utf8(ovl::program::SEALED_PROGRAM_HEADER).unwrap();
    assert_eq!(
        assignment(&python_source("_sealed"), "_SEALED_PROGRAM_HEADER"),
        format!("b{header:?}")
    );
}

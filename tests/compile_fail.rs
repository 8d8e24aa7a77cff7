//! Every construct `#[operator]` rejects is a compile error at the user's span with a message
//! that says what to write instead. Expected messages live next to each case (`.stderr`);
//! regenerate them with `TRYBUILD=overwrite cargo test --test compile_fail` and review the diff.

#[test]
fn rejected_constructs() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/compile_fail/*.rs");
}

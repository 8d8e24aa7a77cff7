//! The IR text (`ovl_ir::text::to_text`) of every fixture (`ovl_ir::fixtures`) against
//! `tests/golden/text/<fixture>.txt`. Run with `OVL_BLESS=1` to rewrite the files after an
//! intended change, and review the diff.

use ovl_ir::{fixtures, text};
use ovl_testkit::golden::{assert_golden, assert_only_files};

#[test]
fn ir_text_of_every_fixture() {
    for f in fixtures::all() {
        assert_golden(
            format!("tests/golden/text/{}.txt", f.name),
            &text::to_text(&f.dag),
        );
    }
    let names: Vec<String> = fixtures::all()
        .iter()
        .map(|f| format!("{}.txt", f.name))
        .collect();
    assert_only_files("tests/golden/text", &names);
}

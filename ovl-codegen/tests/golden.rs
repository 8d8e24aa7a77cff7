//! The generated C++ and CUDA of every fixture (`ovl_ir::fixtures`) against
//! `tests/golden/cpp/<fixture>.cpp` and `tests/golden/cuda/<fixture>.cu`: the emitters' output
//! must stay byte-identical unless a change means it to differ. Run with `OVL_BLESS=1` to
//! rewrite the files after an intended change, and review the diff.

use ovl_codegen::{cuda::generate_cuda, generate_cpp};
use ovl_ir::fixtures;
use ovl_testkit::golden::{assert_golden, assert_only_files};

/// The key written into generated sources (the cache key in real use).
const KEY: &str = "golden";

/// The golden file names of the fixtures with extension `ext`.
fn names(ext: &str) -> Vec<String> {
    fixtures::all()
        .iter()
        .map(|f| format!("{}.{ext}", f.name))
        .collect()
}

#[test]
fn generated_cpp_of_every_fixture() {
    for f in fixtures::all() {
        let src = generate_cpp(&f.dag, KEY).unwrap_or_else(|e| panic!("{}: {e}", f.name));
        assert_golden(format!("tests/golden/cpp/{}.cpp", f.name), &src);
    }
    assert_only_files("tests/golden/cpp", &names("cpp"));
}

#[test]
fn generated_cuda_of_every_fixture() {
    for f in fixtures::all() {
        let src = generate_cuda(&f.dag, KEY).unwrap_or_else(|e| panic!("{}: {e}", f.name));
        assert_golden(format!("tests/golden/cuda/{}.cu", f.name), &src);
    }
    assert_only_files("tests/golden/cuda", &names("cu"));
}

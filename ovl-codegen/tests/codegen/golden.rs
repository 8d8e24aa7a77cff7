//! The generated C++ and CUDA of every fixture (`ovl_ir::fixtures`, the symbolic ones too)
//! against
//! `tests/golden/cpp/<fixture>.cpp` and `tests/golden/cuda/<fixture>.cu`: the emitters' output
//! must stay byte-identical unless a change means it to differ. The fixed prelude every source
//! starts with is pinned once (`tests/golden/cpp/prelude.hpp`, `tests/golden/cuda/prelude.cuh`)
//! and replaced by a marker line in the per-fixture files. Run with `OVL_BLESS=1` to rewrite the
//! files after an intended change, and review the diff.

use ovl_codegen::{cuda::generate_cuda, generate_cpp, CPP_PRELUDE, CUDA_PRELUDE};
use ovl_ir::fixtures;
use ovl_testkit::golden::{assert_golden, assert_only_files};

/// The key written into generated sources (the cache key in real use).
const KEY: &str = "golden";

/// The golden file names of the fixtures with extension `ext`, and the prelude's.
fn names(ext: &str, prelude: &str) -> Vec<String> {
    let mut names: Vec<String> = programs()
        .iter()
        .map(|(name, _)| format!("{name}.{ext}"))
        .collect();
    names.push(prelude.to_string());
    names
}

/// Every fixture's name and program, the symbolic ones after the others, then the row kernels.
fn programs() -> Vec<(&'static str, ovl_ir::ir::ExpressionDag)> {
    let mut all: Vec<_> = fixtures::all()
        .into_iter()
        .map(|f| (f.name, f.dag))
        .collect();
    all.extend(fixtures::symbolic().into_iter().map(|f| (f.name, f.dag)));
    all.extend(fixtures::row_programs());
    all.extend(fixtures::column_programs());
    all
}

/// `src` with its prelude replaced by a marker line (the prelude must be there, once).
fn without_prelude(src: &str, prelude: &str, file: &str) -> String {
    assert_eq!(
        src.matches(prelude).count(),
        1,
        "the prelude is not in the source once"
    );
    src.replace(prelude, &format!("// ... the prelude ({file}) ...\n"))
}

#[test]
fn generated_cpp_of_every_fixture() {
    for (name, dag) in programs() {
        let src = generate_cpp(&dag, KEY).unwrap_or_else(|e| panic!("{name}: {e}"));
        let src = without_prelude(&src, CPP_PRELUDE, "prelude.hpp");
        assert_golden(format!("tests/golden/cpp/{name}.cpp"), &src);
    }
    assert_golden("tests/golden/cpp/prelude.hpp", CPP_PRELUDE);
    assert_only_files("tests/golden/cpp", &names("cpp", "prelude.hpp"));
}

#[test]
fn generated_cuda_of_every_fixture() {
    for (name, dag) in programs() {
        let src = generate_cuda(&dag, KEY).unwrap_or_else(|e| panic!("{name}: {e}"));
        let src = without_prelude(&src, CUDA_PRELUDE, "prelude.cuh");
        assert_golden(format!("tests/golden/cuda/{name}.cu"), &src);
    }
    assert_golden("tests/golden/cuda/prelude.cuh", CUDA_PRELUDE);
    assert_only_files("tests/golden/cuda", &names("cu", "prelude.cuh"));
}

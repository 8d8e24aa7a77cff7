//! Operators with sizes given at run time (`proto/ovl.proto`, "Symbolic sizes";
//! `ovl_ir::fixtures::symbolic`): one compilation runs every size. For each fixture, C++ at
//! sizes 0, 1, 2, 7 and 1024 (each run through a copy of the program traced at that size, as a
//! caller would hold it) must compile once (one cache entry, later lookups answered from
//! memory) and agree bit for bit with the interpreter on the operator specialised for those
//! values, faults included. Bad symbol values are errors, never panics. The CUDA source of each
//! fixture is compiled by NVRTC and assembled by ptxas where those are found (GPU execution is
//! not tested here: what did not run is printed).

#[allow(unused_imports)]
use crate::common;

use common::{bits, element, zero_outputs, TestCache};
use ovl_codegen::{CacheOutcome, RunError};
use ovl_ir::fixtures::{self, SymbolicFixture};
use ovl_ir::ir;
use ovl_ir::symbolic::{dim_size, specialize_operator};
use ovl_ir::{DType, HostTensor};
use ovl_runtime::compile_with_outcome;
use ovl_runtime::cuda::{self, CudaCompileOptions};
use ovl_testkit::without_hang;
use std::io::Write as _;
use std::path::Path;

/// Writes to stderr directly (the test harness captures only `print!`/`eprint!`).
fn say(text: &str) {
    let _ = writeln!(std::io::stderr(), "{text}");
}

/// The sizes every fixture runs at.
const SIZES: [u64; 5] = [0, 1, 2, 7, 1024];

/// The symbol values for size `n`: S0 = n, S1 = n % 3 + 1, ...
fn values(dag: &ir::ExpressionDag, n: u64) -> Vec<u64> {
    (0..dag.symbol_count as u64)
        .map(|k| if k == 0 { n } else { n % 3 + k })
        .collect()
}

/// The program as traced at `symbols`: the example size of every symbolic dimension set to its
/// size for those values (generated code must not depend on it).
fn traced_at(dag: &ir::ExpressionDag, symbols: &[u64]) -> ir::ExpressionDag {
    let mut d = dag.clone();
    let set = |shape: &mut Vec<u64>, symbolic: &[ir::SymbolicDim]| {
        for s in symbolic {
            if let Ok(n) = dim_size(s, symbols) {
                shape[s.dim as usize] = n;
            }
        }
    };
    let sw = d.symbolic_workgroup.clone();
    set(&mut d.workgroup_shape, &sw);
    for t in d.inputs.iter_mut().chain(&mut d.outputs) {
        let st = t.symbolic.clone();
        set(&mut t.shape, &st);
    }
    d
}

/// The number of C++ entries in a cache root.
fn cpp_entries(root: &Path) -> usize {
    std::fs::read_dir(root.join("v1").join("cpu"))
        .map(|d| d.flatten().filter(|e| e.path().is_dir()).count())
        .unwrap_or(0)
}

/// Runs fixture `f` at every size from one compilation, on 1 and 3 threads, against the
/// interpreter on the specialised operator.
fn check_fixture(f: &SymbolicFixture) {
    let cache = TestCache::new();
    let mut faults = 0;
    for (k, &n) in SIZES.iter().enumerate() {
        let symbols = values(&f.dag, n);
        let traced = traced_at(&f.dag, &symbols);
        let (op, outcome) = compile_with_outcome(&traced, &cache.options())
            .unwrap_or_else(|e| panic!("{}: compilation failed: {e}", f.name));
        let expected_outcome = if k == 0 {
            CacheOutcome::Compiled
        } else {
            CacheOutcome::Memory
        };
        assert_eq!(outcome, expected_outcome, "{} at size {n}", f.name);
        assert_eq!(op.symbol_count(), f.dag.symbol_count as usize);
        let concrete = specialize_operator(&f.dag, &symbols).expect("valid values");
        assert_eq!(
            op.workgroup_shape(&symbols).unwrap(),
            concrete.workgroup_shape,
            "{} at {symbols:?}",
            f.name
        );
        let inputs = (f.inputs)(&symbols);
        let refs: Vec<&HostTensor> = inputs.iter().collect();
        let mut expected = zero_outputs(&concrete);
        let interp = ovl_core::interp::interpret_with(
            &concrete,
            &refs,
            &mut expected,
            &ovl_core::interp::InterpOptions {
                threads: Some(1),
                ..Default::default()
            },
        );
        for threads in [1, 3] {
            let (op, ins, c) = (op.clone(), inputs.clone(), concrete.clone());
            let values = symbols.clone();
            let (result, got) = without_hang("the compiled operator", move || {
                let mut out = zero_outputs(&c);
                let refs: Vec<&HostTensor> = ins.iter().collect();
                (op.run(&refs, &mut out, &values, threads), out)
            });
            let what = format!("{} at {symbols:?} on {threads} thread(s)", f.name);
            match (&result, &interp) {
                (Ok(()), Ok(())) => {}
                (
                    Err(RunError::IndexOutOfBounds(g)),
                    Err(ovl_core::interp::InterpError::IndexOutOfBounds(e)),
                ) => {
                    assert_eq!(g, e, "{what}: a different fault");
                    faults += 1;
                }
                _ => panic!("{what}: compiled {result:?}, interpreter {interp:?}"),
            }
            for (o, (g, e)) in got.iter().zip(&expected).enumerate() {
                assert_eq!(g.shape, e.shape, "{what}: output {o}");
                for (i, (x, y)) in bits(g).iter().zip(&bits(e)).enumerate() {
                    assert_eq!(
                        x,
                        y,
                        "{what}: output {o} element {i}: {} vs interpreter {}",
                        element(g, i),
                        element(e, i)
                    );
                }
            }
        }
    }
    assert_eq!(cpp_entries(cache.dir.path()), 1, "{}: one library", f.name);
    assert_eq!(
        faults > 0,
        f.faults,
        "{}: faults at some size: {}",
        f.name,
        faults > 0
    );
}

#[test]
fn every_symbolic_fixture_runs_every_size_from_one_compilation() {
    let all = fixtures::symbolic();
    assert!(all.len() >= 5);
    for f in &all {
        ovl_ir::validate::validate(&f.dag).unwrap_or_else(|e| panic!("{}: {e}", f.name));
        check_fixture(f);
    }
}

#[test]
fn positions_matching_a_symbolic_dimension_need_no_bounds_check() {
    // sym_elementwise: every index is a position on a workgroup axis sized like the tensor's
    // dimension; sym_symbol_loop: j < S0 indexes a dimension of size S0; sym_shifted_read:
    // x[p + 1] is proven (x has S0 + 1 elements), y[p + 2] is checked.
    let src = |dag: &ir::ExpressionDag| ovl_codegen::generate_cpp(dag, "k").unwrap();
    for dag in [
        fixtures::sym_elementwise(4),
        fixtures::sym_symbol_loop(4),
        fixtures::sym_row_sum(4),
    ] {
        let s = src(&dag);
        assert!(!s.contains("ovl::inb("), "{}: {s}", dag.name);
    }
    let s = src(&fixtures::sym_shifted_read(4));
    assert_eq!(s.matches("ovl::inb(").count(), 1, "{s}"); // y's check
    assert!(
        s.contains("ovl::inb(v") && s.contains("(uint64_t)(ovl_S0 + 1LL)"),
        "{s}"
    );
}

/// The assembly of generated C++ (compiled with the backend's flags, `-S`).
fn assembly(source: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let cpp = dir.path().join("op.cpp");
    let asm = dir.path().join("op.s");
    std::fs::write(&cpp, source).unwrap();
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let flags: Vec<String> = ovl_codegen::compiler_flags()
        .into_iter()
        .filter(|f| f != "-shared")
        .collect();
    let out = std::process::Command::new(&cxx)
        .args(&flags)
        .arg("-S")
        .arg("-o")
        .arg(&asm)
        .arg(&cpp)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cxx}: {e}"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read_to_string(&asm).unwrap()
}

/// The assembly of the kernel function alone.
fn kernel_assembly(asm: &str) -> String {
    let start = asm
        .lines()
        .position(|l| l.contains("ovl_kernel") && l.ends_with(':') && !l.starts_with('.'))
        .expect("the kernel's label");
    asm.lines()
        .skip(start)
        .take_while(|l| !l.contains(".cfi_endproc"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn an_elementwise_kernel_with_a_symbolic_leading_dimension_still_vectorizes() {
    // out = a * b + a over [S0, 64] and over [5, 64]: both kernels multiply packed floats
    // (mulps / vmulps), so the row loop vectorized; the symbolic one has no bounds check.
    let make = |symbolic: bool| {
        let mut dag = fixtures::sym_elementwise(5);
        dag.name = "wide".into();
        dag.workgroup_shape[1] = 64;
        for t in dag.inputs.iter_mut().chain(&mut dag.outputs) {
            t.shape[1] = 64;
        }
        if symbolic {
            dag
        } else {
            specialize_operator(&dag, &[5]).unwrap()
        }
    };
    for symbolic in [true, false] {
        let src = ovl_codegen::generate_cpp(&make(symbolic), "k").unwrap();
        let asm = kernel_assembly(&assembly(&src));
        let packed = asm
            .lines()
            .any(|l| l.trim_start().starts_with("vmulps") || l.trim_start().starts_with("mulps"));
        assert!(
            packed,
            "symbolic {symbolic}: no packed multiply in the kernel:\n{asm}"
        );
    }
}

#[test]
fn a_concrete_and_a_symbolic_operator_never_share_a_cache_entry() {
    // The specialised operator has the symbolic one's example shapes and expressions.
    let symbolic = fixtures::sym_elementwise(4);
    let concrete = specialize_operator(&symbolic, &[4]).unwrap();
    assert_eq!(concrete.workgroup_shape, symbolic.workgroup_shape);
    let cache = TestCache::new();
    let (a, _) = compile_with_outcome(&symbolic, &cache.options()).unwrap();
    let (b, outcome) = compile_with_outcome(&concrete, &cache.options()).unwrap();
    assert_eq!(outcome, CacheOutcome::Compiled);
    assert_ne!(a.cache_key(), b.cache_key());
    assert_eq!((a.symbol_count(), b.symbol_count()), (1, 0));
    assert_eq!(cpp_entries(cache.dir.path()), 2);
    // Traced at another size, the symbolic operator is the same entry.
    let other = traced_at(&symbolic, &[9]);
    let (c, outcome) = compile_with_outcome(&other, &cache.options()).unwrap();
    assert_eq!(outcome, CacheOutcome::Memory);
    assert_eq!(c.cache_key(), a.cache_key());
    assert_eq!(cpp_entries(cache.dir.path()), 2);
}

#[test]
fn bad_symbol_values_are_errors() {
    let mut dag = fixtures::sym_elementwise(4);
    // Sizes S0 - 2: S0 = 1 makes them negative.
    dag.symbolic_workgroup[0].offset = -2;
    for t in dag.inputs.iter_mut().chain(&mut dag.outputs) {
        t.symbolic[0].offset = -2;
    }
    let cache = TestCache::new();
    let (op, _) = compile_with_outcome(&dag, &cache.options()).unwrap();
    let a = HostTensor::zeros(DType::F32, &[3, 5]);
    let mut out = vec![HostTensor::zeros(DType::F32, &[3, 5])];

    let err = op.run(&[&a, &a], &mut out, &[], 1).unwrap_err();
    assert!(
        matches!(
            err,
            RunError::SymbolCount {
                expected: 1,
                got: 0,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("takes 1 symbol value"), "{err}");
    let err = op.run(&[&a, &a], &mut out, &[5, 5], 1).unwrap_err();
    assert!(matches!(err, RunError::SymbolCount { got: 2, .. }), "{err}");

    let err = op.run(&[&a, &a], &mut out, &[1], 1).unwrap_err();
    assert!(matches!(err, RunError::SymbolValues { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("[1]") && text.contains("s0-2") && text.contains("-1"),
        "{text}"
    );
    assert!(op.worker_count(&[1]).is_err());
    assert!(op.worker_count(&[u64::MAX]).is_err());
    assert_eq!(op.worker_count(&[2]).unwrap(), 0);
    assert_eq!(op.worker_count(&[5]).unwrap(), 15);

    // S0 = 5 wants [3, 5] tensors: a [4, 5] input is a type error naming both shapes.
    let wrong = HostTensor::zeros(DType::F32, &[4, 5]);
    let err = op.run(&[&a, &wrong], &mut out, &[5], 1).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, RunError::TensorType { .. }), "{text}");
    assert!(text.contains("[3, 5]") && text.contains("[4, 5]"), "{text}");

    // S0 = 2: no worker; the outputs keep their contents.
    let e = HostTensor::zeros(DType::F32, &[0, 5]);
    let mut empty = vec![HostTensor::zeros(DType::F32, &[0, 5])];
    op.run(&[&e, &e], &mut empty, &[2], 0).unwrap();
    // SAFETY: the buffers are empty tensors of the right types; nothing is accessed.
    unsafe {
        let ptr = e.data.as_ptr() as *const std::ffi::c_void;
        let out = empty[0].data.as_mut_ptr() as *mut std::ffi::c_void;
        op.run_raw(&[ptr, ptr], &[out], &[2], 1).unwrap();
        let err = op.run_raw(&[ptr, ptr], &[out], &[0], 1).unwrap_err();
        assert!(matches!(err, RunError::SymbolValues { .. }), "{err}");
    }
}

#[test]
fn symbolic_fixtures_compile_for_cuda() {
    let tools = cuda::nvrtc_status().and_then(|_| cuda::ptxas_path());
    let cache = tempfile::tempdir().expect("a temporary directory");
    let options = CudaCompileOptions::default().with_cache_dir(cache.path());
    match tools {
        Ok(_) => {
            for f in fixtures::symbolic() {
                for arch in [80, 90] {
                    let a = cuda::validate(&f.dag, arch, &options)
                        .unwrap_or_else(|e| panic!("{} for sm_{arch}: {e}", f.name));
                    let ptx = String::from_utf8_lossy(a.bytes());
                    assert!(ptx.contains(".entry ovl_kernel"), "{}: {ptx}", f.name);
                    // One .param per tensor, symbol value and the status.
                    let params = ptx.matches(".param .u64").count();
                    let expected =
                        f.dag.inputs.len() + f.dag.outputs.len() + f.dag.symbol_count as usize + 1;
                    assert_eq!(params, expected, "{}: {ptx}", f.name);
                }
                // Traced at another size: the same CUDA entry.
                let other = traced_at(&f.dag, &values(&f.dag, 7));
                let a = cuda::validate(&f.dag, 80, &options).unwrap();
                let b = cuda::validate(&other, 80, &options).unwrap();
                assert_eq!(a.cache_key(), b.cache_key(), "{}", f.name);
            }
            say("symbolic.rs: every symbolic fixture compiled by NVRTC and assembled by ptxas (sm_80, sm_90)");
        }
        Err(e) => say(&format!(
            "symbolic.rs: CUDA compilation did not run: NVRTC or ptxas not found: {}",
            e.to_string().lines().next().unwrap_or_default()
        )),
    }
    match cuda::gpu_status() {
        Ok(gpu) => {
            for f in fixtures::symbolic() {
                let op = cuda::load(&f.dag, &options)
                    .unwrap_or_else(|e| panic!("{}: loading on the GPU failed: {e}", f.name));
                for n in SIZES {
                    let symbols = values(&f.dag, n);
                    let concrete = specialize_operator(&f.dag, &symbols).unwrap();
                    let inputs = (f.inputs)(&symbols);
                    let refs: Vec<&HostTensor> = inputs.iter().collect();
                    let mut expected = zero_outputs(&concrete);
                    let interp = ovl_core::interp::interpret(&concrete, &refs, &mut expected);
                    let mut got = zero_outputs(&concrete);
                    let result = op.run(&refs, &mut got, &symbols);
                    match (&result, &interp) {
                        (Ok(_), Ok(())) => {}
                        (
                            Err(RunError::IndexOutOfBounds(g)),
                            Err(ovl_core::interp::InterpError::IndexOutOfBounds(e)),
                        ) => assert_eq!(g, e, "{} at {symbols:?}", f.name),
                        _ => panic!(
                            "{} at {symbols:?}: GPU {result:?}, interpreter {interp:?}",
                            f.name
                        ),
                    }
                    for (g, e) in got.iter().zip(&expected) {
                        assert_eq!(bits(g), bits(e), "{} at {symbols:?} on the GPU", f.name);
                    }
                }
            }
            say(&format!(
                "symbolic.rs: every symbolic fixture ran on the GPU {} (sm_{}) at every size",
                gpu.name, gpu.arch
            ));
        }
        Err(e) => say(&format!(
            "symbolic.rs: GPU execution did not run: no GPU: {}",
            e.to_string().lines().next().unwrap_or_default()
        )),
    }
}

#[test]
fn a_large_symbolic_workgroup_is_split_over_threads() {
    // 30011 x 5 workers: enough work to run on several threads, chunks ending mid-row; checked
    // against plain Rust.
    let f = fixtures::symbolic()
        .into_iter()
        .find(|f| f.name == "sym_elementwise")
        .unwrap();
    let cache = TestCache::new();
    let (op, _) = compile_with_outcome(&f.dag, &cache.options()).unwrap();
    let n = 30011u64;
    let inputs = (f.inputs)(&[n]);
    let (a, b) = (
        inputs[0].as_slice::<f32>().unwrap(),
        inputs[1].as_slice::<f32>().unwrap(),
    );
    for threads in [0, 2, 3, 7] {
        let mut out = vec![HostTensor::zeros(DType::F32, &[n as usize, 5])];
        op.run(&[&inputs[0], &inputs[1]], &mut out, &[n], threads)
            .unwrap();
        let got = out[0].as_slice::<f32>().unwrap();
        for k in 0..a.len() {
            assert_eq!(
                got[k].to_bits(),
                (a[k] * b[k] + a[k]).to_bits(),
                "element {k}"
            );
        }
    }
}

#[test]
fn a_fault_in_a_large_symbolic_workgroup_is_the_interpreters_on_several_threads() {
    // sym_shifted_read faults in its last worker only; with 20000 workers the run is split.
    let f = fixtures::symbolic()
        .into_iter()
        .find(|f| f.name == "sym_shifted_read")
        .unwrap();
    let cache = TestCache::new();
    let (op, _) = compile_with_outcome(&f.dag, &cache.options()).unwrap();
    let symbols = [20000u64];
    let concrete = specialize_operator(&f.dag, &symbols).unwrap();
    let inputs = (f.inputs)(&symbols);
    let refs: Vec<&HostTensor> = inputs.iter().collect();
    let mut expected = zero_outputs(&concrete);
    let Err(ovl_core::interp::InterpError::IndexOutOfBounds(want)) =
        ovl_core::interp::interpret(&concrete, &refs, &mut expected)
    else {
        panic!("the interpreter reports the fault");
    };
    for threads in [0, 3] {
        let mut got = zero_outputs(&concrete);
        let Err(RunError::IndexOutOfBounds(fault)) = op.run(&refs, &mut got, &symbols, threads)
        else {
            panic!("C++ reports the fault");
        };
        assert_eq!(fault, want);
        assert_eq!(fault.position, vec![19999]);
        assert_eq!(bits(&got[0]), bits(&expected[0]));
    }
}

//! The operator cache seen from `evaluate`: a second evaluation does not recompile, a changed
//! operator gets a new key, and processes compiling the same operator at once all succeed.
//!
//! The tests of this file share the process-wide compiler counter, so they run one at a time
//! (`SERIAL`). Each uses its own cache directory.

use ndarray::{Array1, ArrayD};
use ovl::prelude::*;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

static SERIAL: Mutex<()> = Mutex::new(());

#[operator]
fn affine(x: Tensor<f32>, scale: f32, shift: f32) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = x[[i]] * scale + shift;
    out
}

fn options(cache: &Path) -> Options {
    Options {
        cache_dir: Some(cache.to_path_buf()),
        ..Options::cpu()
    }
}

fn input() -> Array1<f32> {
    Array1::from(vec![1.0, -2.0, 0.5, 4.0])
}

fn expected(scale: f32, shift: f32) -> ArrayD<f32> {
    input().mapv(|v| v * scale + shift).into_dyn()
}

/// Evaluates `affine` and returns the result, the number of compiler runs and the time taken.
fn timed(scale: f32, shift: f32, options: &Options) -> (ArrayD<f32>, u64, Duration) {
    let runs = ovl::compiler_invocations();
    let start = Instant::now();
    let out = evaluate_with(&affine(input(), scale, shift), options).expect("evaluate");
    (out, ovl::compiler_invocations() - runs, start.elapsed())
}

/// The compiled operators in a cache directory.
fn entries(cache: &Path) -> usize {
    std::fs::read_dir(cache.join("v1").join("cpu")).map_or(0, |d| d.count())
}

#[test]
fn a_second_evaluation_does_not_recompile() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let cache = tempfile::tempdir().expect("temp dir");
    let options = options(cache.path());

    let (first, compiled, cold) = timed(2.0, 1.0, &options);
    assert_eq!(first, expected(2.0, 1.0));
    assert_eq!(compiled, 1, "the first evaluation compiles the operator");

    // A new trace of the same operator: found in the process (no compiler, no disk).
    let (second, compiled, warm) = timed(2.0, 1.0, &options);
    assert_eq!(second, expected(2.0, 1.0));
    assert_eq!(compiled, 0, "the second evaluation must not recompile");
    assert_eq!(entries(cache.path()), 1);
    println!("first evaluation (compile) {cold:?}, second (warm cache) {warm:?}");
    assert!(
        warm < cold,
        "a warm evaluation ({warm:?}) outlasted the cold one ({cold:?})"
    );
}

#[test]
fn a_changed_operator_gets_a_new_key() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let cache = tempfile::tempdir().expect("temp dir");
    let options = options(cache.path());

    let key = |scale: f32, shift: f32| {
        let graph = ovl::graph(affine(input(), scale, shift)).expect("trace");
        ovl::ir_tools::canonical_hash(&graph.dag.operators[0]).to_string()
    };
    assert_eq!(key(2.0, 1.0), key(2.0, 1.0));
    assert_ne!(
        key(2.0, 1.0),
        key(2.0, 1.5),
        "a changed constant changes the key"
    );

    let (a, compiled_a, _) = timed(3.0, 0.0, &options);
    let (b, compiled_b, _) = timed(3.0, 0.25, &options);
    assert_eq!(a, expected(3.0, 0.0));
    assert_eq!(b, expected(3.0, 0.25));
    assert_eq!((compiled_a, compiled_b), (1, 1));
    assert_eq!(
        entries(cache.path()),
        2,
        "one cache entry per operator body"
    );
}

const CHILD_ENV: &str = "OVL_OPERATOR_CACHE_CHILD";

/// The body of each child process of `processes_evaluating_at_once_all_succeed`; in a normal
/// test run it only says so.
#[test]
fn child_evaluates() {
    if std::env::var_os(CHILD_ENV).is_none() {
        println!("run as a child process by processes_evaluating_at_once_all_succeed");
        return;
    }
    // The cache directory comes from OVL_CACHE_DIR, set by the parent.
    let out = evaluate(&affine(input(), -1.0, 0.5)).expect("evaluate in a child");
    assert_eq!(out, expected(-1.0, 0.5));
    println!("child ok, compiler runs: {}", ovl::compiler_invocations());
}

#[test]
fn processes_evaluating_at_once_all_succeed() {
    let cache = tempfile::tempdir().expect("temp dir");
    let exe = std::env::current_exe().expect("test executable");
    let children: Vec<_> = (0..4)
        .map(|_| {
            std::process::Command::new(&exe)
                .args(["--exact", "child_evaluates", "--nocapture"])
                .env(CHILD_ENV, "1")
                .env("OVL_CACHE_DIR", cache.path())
                .env_remove("OVL_FORCE_RECOMPILE")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn a child")
        })
        .collect();
    let mut compiled = 0;
    for child in children {
        let out = child.wait_with_output().expect("wait for a child");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "a child failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let runs: u64 = stdout
            .lines()
            .find_map(|l| l.split("child ok, compiler runs: ").nth(1))
            .expect("the child ran")
            .trim()
            .parse()
            .expect("a count");
        compiled += runs;
    }
    assert!(compiled >= 1, "someone compiled the operator");
    assert_eq!(
        entries(cache.path()),
        1,
        "all children share one cache entry"
    );
}

/// A program of several distinct operators (and one repeated) compiles each distinct one once,
/// the distinct ones at the same time on a multi-core machine, and every kernel computes its own
/// operator; after `clear_caches` the libraries are found again on disk without the compiler.
#[test]
fn distinct_operators_compile_once_each_and_run_right() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let cache = tempfile::tempdir().expect("temp dir");
    // No fusion: one kernel per operator call.
    let options = options(cache.path()).with_opt_level(0);
    let chain = || {
        let a = affine(input(), 2.0, 1.0);
        let b = affine(a, 3.0, -0.5);
        let c = affine(b, 2.0, 1.0); // the body of `a` again
        affine(c, 0.25, 4.0)
    };
    let want = input().mapv(|v| (((v * 2.0 + 1.0) * 3.0 - 0.5) * 2.0 + 1.0) * 0.25 + 4.0);

    let runs = ovl::compiler_invocations();
    let got = evaluate_with(&chain(), &options).expect("evaluate");
    assert_eq!(got, want.clone().into_dyn());
    assert_eq!(
        ovl::compiler_invocations() - runs,
        3,
        "three distinct operators, each compiled once"
    );
    assert_eq!(entries(cache.path()), 3);

    ovl::clear_caches();
    let runs = ovl::compiler_invocations();
    let again = evaluate_with(&chain(), &options).expect("evaluate after clear_caches");
    assert_eq!(again, want.into_dyn());
    assert_eq!(
        ovl::compiler_invocations() - runs,
        0,
        "found on disk after clear_caches"
    );
}

//! Every hand-built fixture (`ovl_ir::fixtures`) on every backend: the reference interpreter
//! and the C++ backend (on 1 and 3 threads) must agree exactly (bit for bit, any NaN matching
//! any NaN; f32 `exp` / `tanh` / `sigmoid` within the fixture's stated ulps); the CUDA source of
//! each is compiled by NVRTC and assembled by ptxas for sm_80 and sm_90 when those are found,
//! and run on the GPU against the interpreter when there is one. What did not run is printed
//! (past the test harness's capture) as "did not run: ...".

#[allow(unused_imports)]
use crate::common;

use common::{bits, compiled, run, zero_outputs};
use ovl_codegen::cuda::{self, CudaCompileOptions};
use ovl_ir::fixtures::{self, Fixture};
use ovl_ir::{HostTensor, TensorData};
use std::io::Write as _;

/// Writes to stderr directly (the test harness captures only `print!`/`eprint!`).
fn say(text: &str) {
    let _ = writeln!(std::io::stderr(), "{text}");
}

/// The interpreter's outputs of a fixture (single-threaded, so row-major order).
fn interpreted(f: &Fixture) -> Vec<HostTensor> {
    interpreted_in(f, Default::default())
}

/// [`interpreted`] with reductions in `order` (the CUDA backend's for a GPU's results).
fn interpreted_in(f: &Fixture, order: ovl_ir::cooperative::ReductionOrder) -> Vec<HostTensor> {
    let inputs: Vec<&HostTensor> = f.inputs.iter().collect();
    let mut out = zero_outputs(&f.dag);
    ovl_core::interp::interpret_with(
        &f.dag,
        &inputs,
        &mut out,
        &ovl_core::interp::InterpOptions {
            threads: Some(1),
            reduction_order: order,
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("{}: the interpreter failed: {e}", f.name));
    out
}

/// Asserts that `got` equals the interpreter's `expected` exactly (see the module docs).
fn assert_same(f: &Fixture, backend: &str, got: &[HostTensor], expected: &[HostTensor]) {
    assert_eq!(got.len(), expected.len());
    for (k, (g, e)) in got.iter().zip(expected).enumerate() {
        assert_eq!(g.dtype(), e.dtype(), "{} output {k} on {backend}", f.name);
        assert_eq!(g.shape, e.shape, "{} output {k} on {backend}", f.name);
        if let (TensorData::F32(gv), TensorData::F32(ev)) = (&g.data, &e.data) {
            for (i, (x, y)) in gv.iter().zip(ev).enumerate() {
                let ulps = (x.to_bits() as i64 - y.to_bits() as i64).unsigned_abs();
                let same = (x.is_nan() && y.is_nan())
                    || x.to_bits() == y.to_bits()
                    || (x.is_finite() && y.is_finite() && ulps <= f.f32_ulps as u64);
                assert!(
                    same,
                    "{} output {k} element {i} on {backend}: {x:e} vs interpreter {y:e} \
                     (allowed {} ulps)",
                    f.name, f.f32_ulps
                );
            }
            continue;
        }
        for (i, (x, y)) in bits(g).iter().zip(&bits(e)).enumerate() {
            assert_eq!(
                x,
                y,
                "{} output {k} element {i} on {backend}: {:?} vs interpreter {:?}",
                f.name,
                common::element(g, i),
                common::element(e, i)
            );
        }
    }
}

#[test]
fn every_fixture_runs_the_same_on_the_interpreter_and_cpp() {
    for f in fixtures::all() {
        let expected = interpreted(&f);
        let (op, _cache) = compiled(&f.dag);
        let inputs: Vec<&HostTensor> = f.inputs.iter().collect();
        for threads in [1, 3] {
            let got = run(&op, &f.dag, &inputs, threads)
                .unwrap_or_else(|e| panic!("{}: C++ on {threads} threads failed: {e}", f.name));
            assert_same(&f, &format!("C++ ({threads} threads)"), &got, &expected);
        }
    }
}

#[test]
fn every_fixture_compiles_for_cuda_and_runs_on_a_gpu_if_there_is_one() {
    let tools = cuda::nvrtc_status().and_then(|_| cuda::ptxas_path());
    let cache = tempfile::tempdir().expect("a temporary directory");
    let options = CudaCompileOptions::default().with_cache_dir(cache.path());
    match tools {
        Ok(_) => {
            for f in fixtures::all() {
                for arch in [80, 90] {
                    let a = cuda::validate(&f.dag, arch, &options)
                        .unwrap_or_else(|e| panic!("{} for sm_{arch}: {e}", f.name));
                    let ptx = String::from_utf8_lossy(a.bytes());
                    assert!(ptx.contains(".entry ovl_kernel"), "{}: {ptx}", f.name);
                }
            }
            say("fixtures.rs: every fixture compiled by NVRTC and assembled by ptxas (sm_80, sm_90)");
        }
        Err(e) => say(&format!(
            "fixtures.rs: CUDA compilation did not run: NVRTC or ptxas not found: {}",
            e.to_string().lines().next().unwrap_or_default()
        )),
    }
    match cuda::gpu_status() {
        Ok(gpu) => {
            for f in fixtures::all() {
                let op = cuda::load(&f.dag, &options)
                    .unwrap_or_else(|e| panic!("{}: loading on the GPU failed: {e}", f.name));
                let inputs: Vec<&HostTensor> = f.inputs.iter().collect();
                let mut got = zero_outputs(&f.dag);
                op.run(&inputs, &mut got, &[])
                    .unwrap_or_else(|e| panic!("{}: running on the GPU failed: {e}", f.name));
                let cuda_order = ovl_ir::cooperative::ReductionOrder::Cuda;
                assert_same(&f, "CUDA", &got, &interpreted_in(&f, cuda_order));
            }
            say(&format!(
                "fixtures.rs: every fixture ran on the GPU {} (sm_{}) and matched the interpreter",
                gpu.name, gpu.arch
            ));
        }
        Err(e) => say(&format!(
            "fixtures.rs: GPU execution did not run: no GPU: {}",
            e.to_string().lines().next().unwrap_or_default()
        )),
    }
}

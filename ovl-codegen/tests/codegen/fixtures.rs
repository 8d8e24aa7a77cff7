//! Every hand-built fixture (`ovl_ir::fixtures`) on every backend: the reference interpreter
//! and the C++ backend (on 1 and 3 threads) must agree exactly (bit for bit, any NaN matching
//! any NaN; a float output computed through math functions within the math contract's bound
//! for it, `ovl_ir::accuracy`, or the fixture's stated ulps); the CUDA source of
//! each is compiled by NVRTC and assembled by ptxas for sm_80 and sm_90 when those are found,
//! and run on the GPU against the interpreter when there is one. What did not run is printed
//! (past the test harness's capture) as "did not run: ...".

#[allow(unused_imports)]
use crate::common;

use common::{bits, compiled, run, zero_outputs};
use ovl_ir::accuracy::MathBackend;
use ovl_ir::fixtures::{self, Fixture};
use ovl_ir::{HostTensor, TensorData};
use ovl_runtime::cuda::{self, CudaCompileOptions};
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
pub(crate) fn interpreted_in(
    f: &Fixture,
    order: ovl_ir::cooperative::ReductionOrder,
) -> Vec<HostTensor> {
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

/// Asserts that `got` equals the interpreter's `expected` exactly, except that a float output
/// may be off by the math contract's bound for it on `math` (`ovl_ir::accuracy::output_ulps`)
/// or by the fixture's own `f32_ulps`, whichever is larger (see the module docs).
pub(crate) fn assert_same(
    f: &Fixture,
    backend: &str,
    math: MathBackend,
    got: &[HostTensor],
    expected: &[HostTensor],
) {
    assert_eq!(got.len(), expected.len());
    let bounds = ovl_ir::accuracy::output_ulps(&f.dag, math);
    let scales = function_scales(f, math);
    for (k, (g, e)) in got.iter().zip(expected).enumerate() {
        assert_eq!(g.dtype(), e.dtype(), "{} output {k} on {backend}", f.name);
        assert_eq!(g.shape, e.shape, "{} output {k} on {backend}", f.name);
        let allowed = u64::from(bounds[k].max(f.f32_ulps));
        let floats: Option<Vec<(f64, f64, u64)>> = match (&g.data, &e.data) {
            (TensorData::F32(gv), TensorData::F32(ev)) => Some(
                gv.iter()
                    .zip(ev)
                    .map(|(x, y)| {
                        let apart = (x.to_bits() as i64 - y.to_bits() as i64).unsigned_abs();
                        (f64::from(*x), f64::from(*y), apart)
                    })
                    .collect(),
            ),
            (TensorData::F64(gv), TensorData::F64(ev)) => Some(
                gv.iter()
                    .zip(ev)
                    .map(|(x, y)| {
                        let apart = (x.to_bits() as i64).abs_diff(y.to_bits() as i64);
                        (*x, *y, apart)
                    })
                    .collect(),
            ),
            _ => None,
        };
        if let Some(pairs) = floats {
            for (i, (x, y, apart)) in pairs.into_iter().enumerate() {
                // A value that cancels is compared on the scale of the largest function result
                // it is computed from (`ovl_ir::accuracy`).
                let scale = scales[k].get(i).copied().unwrap_or(0.0).max(y.abs());
                let f32_output = matches!(e.data, TensorData::F32(_));
                let on_scale = (x - y).abs() <= allowed as f64 * ulp(scale, f32_output);
                let same = (x.is_nan() && y.is_nan())
                    || apart == 0
                    || (x.is_finite() && y.is_finite() && (apart <= allowed || on_scale));
                assert!(
                    same,
                    "{} output {k} element {i} on {backend}: {x:e} vs interpreter {y:e} \
                     ({apart} ulps apart, allowed {allowed})",
                    f.name
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

/// For each output element of `f`: the largest magnitude among the results of the math
/// functions with a bound on `math` that its value is computed from (0 where there are none),
/// computed by the interpreter on `ovl_ir::accuracy::with_function_results`.
fn function_scales(f: &Fixture, math: MathBackend) -> Vec<Vec<f64>> {
    let none = || vec![Vec::new(); f.dag.outputs.len()];
    let Some((dag, extra)) = ovl_ir::accuracy::with_function_results(&f.dag, math) else {
        return none();
    };
    let inputs: Vec<&HostTensor> = f.inputs.iter().collect();
    let mut out = zero_outputs(&dag);
    let options = ovl_core::interp::InterpOptions {
        threads: Some(1),
        ..Default::default()
    };
    if ovl_core::interp::interpret_with(&dag, &inputs, &mut out, &options).is_err() {
        return none();
    }
    let magnitudes = |t: &HostTensor| -> Vec<f64> {
        match &t.data {
            TensorData::F32(v) => v.iter().map(|x| f64::from(x.abs())).collect(),
            TensorData::F64(v) => v.iter().map(|x| x.abs()).collect(),
            _ => Vec::new(),
        }
    };
    extra
        .iter()
        .map(|outputs| {
            let mut scale: Vec<f64> = Vec::new();
            for &o in outputs {
                let m = magnitudes(&out[o]);
                scale.resize(scale.len().max(m.len()), 0.0);
                for (s, v) in scale.iter_mut().zip(m) {
                    if v.is_finite() {
                        *s = s.max(v);
                    }
                }
            }
            scale
        })
        .collect()
}

/// The distance from `|x|` to the next float of its type (f32 when `single`).
fn ulp(x: f64, single: bool) -> f64 {
    if single {
        let a = (x.abs() as f32).min(f32::MAX);
        f64::from(f32::from_bits(a.to_bits() + 1) - a)
    } else {
        let a = x.abs().min(f64::MAX);
        f64::from_bits(a.to_bits() + 1) - a
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
            let name = format!("C++ ({threads} threads)");
            assert_same(&f, &name, MathBackend::Cpp, &got, &expected);
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
                let expected = interpreted_in(&f, cuda_order);
                assert_same(&f, "CUDA", MathBackend::Cuda, &got, &expected);
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

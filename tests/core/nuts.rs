//! The NUTS operator (`ovl_stdlib::nuts`): its samples of a correlated Gaussian against the
//! truth, the same trajectories on the interpreter and the C++ backend, and draw-for-draw
//! agreement with a NumPy transcription of the same algorithm and generator
//! (`benches/nuts_numpy.py`, run by the project's Python: `$OVL_PYTHON`, else `.venv`), the
//! sampler's errors and divergences.

use crate::nuts_setup::{ar1_covariance, initial_positions, run, Run};
use ndarray::{Array1, ArrayD, Axis};
use ovl::Options;
use ovl_stdlib::nuts::LogDensity;
use ovl_stdlib::nuts_models::{ar1_precision, logistic_data, Gaussian, Logistic};
use std::path::PathBuf;

const KEY: [u32; 2] = [0x0123_4567, 0x89ab_cdef];

/// The closed-form precision is the inverse of the covariance.
#[test]
fn ar1_precision_inverts_the_covariance() {
    for (dim, rho) in [(2, 0.3), (10, 0.9), (100, 0.9)] {
        let eye = ar1_precision(dim, rho).dot(&ar1_covariance(dim, rho));
        for ((i, j), v) in eye.indexed_iter() {
            let want = if i == j { 1.0 } else { 0.0 };
            assert!((v - want).abs() < 1e-9, "({i}, {j}): {v}");
        }
    }
}

/// Means and covariances of 64 chains x 400 draws (after 100 discarded) of a 10-dimensional
/// AR(1) Gaussian (rho = 0.9): each within 5 Monte Carlo standard errors of the truth, the
/// standard errors from the spread of the 64 independent chains' own estimates (batch means,
/// one batch per chain).
#[test]
fn gaussian_moments_match_the_truth() {
    let (dim, rho, chains, warmup, kept) = (10, 0.9, 64, 100, 400);
    let prec = ar1_precision(dim, rho).into_dyn();
    let cov = ar1_covariance(dim, rho);
    let init = initial_positions(chains, dim, 7);
    let r = run::<Gaussian>(
        KEY,
        &init,
        0.25,
        &Array1::ones(dim),
        &[prec],
        warmup + kept,
        10,
        &Options::cpu(),
    );
    assert_eq!(r.divergent.sum(), 0, "divergences");
    let accept = r.accept.mean().unwrap();
    assert!(accept > 0.6, "mean acceptance statistic {accept}");
    // Per chain: its mean of x_i and of (x_i x_j) (the true mean is 0).
    let draws = r
        .samples
        .slice_axis(Axis(1), (warmup..warmup + kept).into());
    let mut stats: Vec<(String, f64, Vec<f64>)> = Vec::new();
    for i in 0..dim {
        let per_chain = (0..chains)
            .map(|c| (0..kept).map(|t| draws[[c, t, i]]).sum::<f64>() / kept as f64)
            .collect();
        stats.push((format!("mean {i}"), 0.0, per_chain));
        for j in i..dim {
            let per_chain = (0..chains)
                .map(|c| {
                    (0..kept)
                        .map(|t| draws[[c, t, i]] * draws[[c, t, j]])
                        .sum::<f64>()
                        / kept as f64
                })
                .collect();
            stats.push((format!("cov ({i}, {j})"), cov[[i, j]], per_chain));
        }
    }
    for (name, truth, per_chain) in stats {
        let n = per_chain.len() as f64;
        let mean = per_chain.iter().sum::<f64>() / n;
        let var = per_chain.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
        let se = (var / n).sqrt();
        // The test has power: standard errors well below the scale of the values.
        assert!(se < 0.06, "{name}: standard error {se}");
        assert!(
            (mean - truth).abs() < 5.0 * se,
            "{name}: {mean} vs {truth} (standard error {se})"
        );
    }
}

/// Discrete statistics equal, samples equal to rounding (reports how many bit for bit).
fn assert_same_run(what: &str, a: &Run, b: &Run, tol: f64) -> usize {
    assert_eq!(a.depth, b.depth, "{what}: tree depths");
    assert_eq!(a.leapfrogs, b.leapfrogs, "{what}: leapfrog steps");
    assert_eq!(a.divergent, b.divergent, "{what}: divergences");
    let mut bitwise = 0;
    for (x, y) in [(&a.samples, &b.samples), (&a.accept, &b.accept)] {
        assert_eq!(x.shape(), y.shape());
        for (i, (u, v)) in x.iter().zip(y.iter()).enumerate() {
            assert!(
                (u - v).abs() <= tol * (1.0 + u.abs()),
                "{what}: element {i}: {u} vs {v}"
            );
            bitwise += usize::from(u.to_bits() == v.to_bits());
        }
    }
    bitwise
}

fn logistic_inputs(chains: usize) -> (Vec<ArrayD<f64>>, ndarray::Array2<f64>) {
    let (x, y, _) = logistic_data(200, 10, 3);
    (
        vec![x.into_dyn(), y.into_dyn()],
        initial_positions(chains, 10, 11).mapv(|v| 0.2 * v),
    )
}

fn both<M: LogDensity>(data: &[ArrayD<f64>], init: &ndarray::Array2<f64>, step: f64) {
    let dim = init.ncols();
    let go = |o: &Options| run::<M>(KEY, init, step, &Array1::ones(dim), data, 4, 10, o);
    let (interp, cpp) = (go(&Options::interpreter()), go(&Options::cpu()));
    let n = interp.samples.len() + interp.accept.len();
    let bitwise = assert_same_run("interpreter vs C++", &interp, &cpp, 1e-12);
    println!("interpreter vs C++: {bitwise} of {n} values bit for bit");
    assert!(interp.leapfrogs.iter().all(|&l| l >= 1));
}

#[test]
fn interpreter_and_cpp_run_the_same_trajectories() {
    let dim = 10;
    let prec = ar1_precision(dim, 0.9).into_dyn();
    both::<Gaussian>(&[prec], &initial_positions(3, dim, 5), 0.25);
    let (data, init) = logistic_inputs(2);
    both::<Logistic>(&data, &init, 0.1);
}

/// The project's Python (`$OVL_PYTHON`, else `.venv/bin/python` of the checkout).
fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("OVL_PYTHON").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    assert!(
        venv.exists(),
        "no Python with NumPy: set OVL_PYTHON or make .venv (scripts/python-env.sh)"
    );
    venv
}

/// Runs `benches/nuts_numpy.py` on the same inputs and compares.
fn numpy_agrees<M: LogDensity>(
    model: &str,
    data: &[ArrayD<f64>],
    init: &ndarray::Array2<f64>,
    step: f64,
    transitions: usize,
) {
    let dim = init.ncols();
    let ours = run::<M>(
        KEY,
        init,
        step,
        &Array1::ones(dim),
        data,
        transitions,
        10,
        &Options::cpu(),
    );
    let nested = |a: &ArrayD<f64>| -> serde_json::Value {
        match a.ndim() {
            1 => serde_json::json!(a.iter().copied().collect::<Vec<f64>>()),
            _ => serde_json::json!(a
                .outer_iter()
                .map(|r| r.iter().copied().collect::<Vec<f64>>())
                .collect::<Vec<_>>()),
        }
    };
    let spec = serde_json::json!({
        "model": model,
        "key": KEY,
        "init": nested(&init.clone().into_dyn()),
        "step": step,
        "inv_mass": vec![1.0; dim],
        "data": data.iter().map(nested).collect::<Vec<_>>(),
        "transitions": transitions,
        "max_depth": 10,
    });
    let dir = tempfile::tempdir().unwrap();
    let (inp, out) = (dir.path().join("in.json"), dir.path().join("out.json"));
    std::fs::write(&inp, spec.to_string()).unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/nuts_numpy.py");
    let status = std::process::Command::new(python())
        .arg(&script)
        .arg(&inp)
        .arg(&out)
        .status()
        .expect("running python");
    assert!(status.success(), "{} failed", script.display());
    let got: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let flat = |v: &serde_json::Value| -> Vec<f64> {
        fn walk(v: &serde_json::Value, out: &mut Vec<f64>) {
            match v {
                serde_json::Value::Array(xs) => xs.iter().for_each(|x| walk(x, out)),
                x => out.push(x.as_f64().unwrap()),
            }
        }
        let mut out = Vec::new();
        walk(v, &mut out);
        out
    };
    let as_f64 = |a: &ArrayD<i32>| a.iter().map(|&v| f64::from(v)).collect::<Vec<f64>>();
    assert_eq!(
        flat(&got["depth"]),
        as_f64(&ours.depth),
        "{model}: tree depths"
    );
    assert_eq!(
        flat(&got["leapfrogs"]),
        as_f64(&ours.leapfrogs),
        "{model}: leapfrogs"
    );
    assert_eq!(
        flat(&got["divergent"]),
        as_f64(&ours.divergent),
        "{model}: divergences"
    );
    for (name, mine) in [("samples", &ours.samples), ("accept", &ours.accept)] {
        let theirs = flat(&got[name]);
        assert_eq!(theirs.len(), mine.len());
        for (i, (a, b)) in mine.iter().zip(&theirs).enumerate() {
            assert!(
                (a - b).abs() <= 1e-9 * (1.0 + a.abs()),
                "{model}: {name} element {i}: ovl {a}, NumPy {b}"
            );
        }
    }
    // The chains moved: the comparison is not of initial positions.
    assert!(ours.leapfrogs.iter().map(|&l| l as usize).sum::<usize>() > 10 * transitions);
}

#[test]
fn numpy_transcription_agrees_draw_for_draw() {
    let dim = 10;
    let prec = ar1_precision(dim, 0.9).into_dyn();
    numpy_agrees::<Gaussian>("gaussian", &[prec], &initial_positions(4, dim, 9), 0.25, 6);
    let (data, init) = logistic_inputs(2);
    numpy_agrees::<Logistic>("logistic", &data, &init, 0.1, 4);
}

/// A standard normal whose log density is NaN where `q[0] > 1` (a model that fails there).
struct NanAboveOne;

#[ovl::prelude::helper]
fn nan_above_one(
    q: &ovl::prelude::Tensor<f64>,
    grad: &ovl::prelude::Tensor<f64>,
) -> ovl::prelude::Expr<f64> {
    use ovl::prelude::*;
    let d = q.dims::<1>()[0];
    let mut lp = variable(0.0f64);
    for j in 0..d {
        grad[[j]] = -q[[j]];
        lp += q[[j]] * q[[j]];
    }
    select(q[[0]] > 1.0, f64::NAN, -0.5 * lp.get())
}

impl LogDensity for NanAboveOne {
    fn log_density(
        q: &ovl::prelude::Tensor<f64>,
        grad: &ovl::prelude::Tensor<f64>,
        _data: &[ovl::prelude::Tensor<f64>],
    ) -> ovl::prelude::Expr<f64> {
        nan_above_one(q, grad)
    }
}

/// NaN log densities are divergences, counted, and never accepted.
#[test]
fn nan_log_density_is_a_counted_divergence() {
    let (chains, dim) = (8, 3);
    let init = initial_positions(chains, dim, 4).mapv(|v| 0.5 * v);
    for options in [Options::interpreter(), Options::cpu()] {
        let r = run::<NanAboveOne>(KEY, &init, 0.5, &Array1::ones(dim), &[], 50, 10, &options);
        let divergences = r.divergent.sum();
        assert!(divergences > 10, "{divergences} divergences");
        assert!(r.samples.iter().all(|v| v.is_finite()));
        for c in 0..chains {
            for t in 0..50 {
                assert!(r.samples[[c, t, 0]] <= 1.0, "chain {c} accepted q[0] > 1");
            }
        }
    }
}

/// Arguments the sampler cannot run with are errors naming the problem.
#[test]
fn bad_arguments_are_errors() {
    use ovl_stdlib::nuts::nuts;
    let call_dim = |dim: usize, key: Vec<u32>, steps: usize, inv: usize, depth: usize| {
        let outs = nuts::<Gaussian>(
            Array1::from(key),
            initial_positions(2, dim, 1),
            Array1::from_elem(steps, 0.1),
            Array1::<f64>::ones(inv),
            vec![ovl::Lazy::from(ar1_precision(dim, 0.5).into_dyn())],
            3,
            depth,
        );
        match ovl::evaluate_with(&outs.0, &Options::interpreter()) {
            Ok(_) => panic!("no error"),
            Err(e) => e.to_string(),
        }
    };
    let dim = 10;
    let call = |key, steps, inv, depth| call_dim(dim, key, steps, inv, depth);
    let e = call(vec![1, 2, 3], 2, dim, 10);
    assert!(
        e.contains("the key must be two u32 words, shape [2], not [3]"),
        "{e}"
    );
    let e = call(vec![1, 2], 3, dim, 10);
    assert!(
        e.contains("step_size must have one step per chain, shape [2]"),
        "{e}"
    );
    let e = call(vec![1, 2], 2, 7, 10);
    assert!(e.contains("inv_mass"), "{e}");
    let e = call(vec![1, 2], 2, dim, 31);
    assert!(e.contains("max_depth 31 is out of range: 1 to 30"), "{e}");
    let e = call(vec![1, 2], 2, dim, 0);
    assert!(e.contains("max_depth 0 is out of range"), "{e}");
    // 1,000 dimensions x 10 levels of checkpoints x 8 bytes: over 64 KiB.
    let e = call_dim(1000, vec![1, 2], 2, 1000, 10);
    assert!(e.contains("use max_depth 8 or less"), "{e}");
}

/// A chain's draws are keyed by its index, not by the number of chains: the first two chains of
/// a run of five are a run of two.
#[test]
fn a_chain_does_not_depend_on_the_others() {
    let dim = 10;
    let prec = [ar1_precision(dim, 0.9).into_dyn()];
    let init = initial_positions(5, dim, 2);
    let ones = Array1::ones(dim);
    let five = run::<Gaussian>(KEY, &init, 0.25, &ones, &prec, 5, 10, &Options::cpu());
    let two_init = init.slice(ndarray::s![..2, ..]).to_owned();
    let two = run::<Gaussian>(KEY, &two_init, 0.25, &ones, &prec, 5, 10, &Options::cpu());
    let first = |a: &ArrayD<f64>| a.slice_axis(Axis(0), (0..2).into()).to_owned();
    assert_eq!(first(&five.samples), two.samples);
    let firsti = |a: &ArrayD<i32>| a.slice_axis(Axis(0), (0..2).into()).to_owned();
    assert_eq!(firsti(&five.leapfrogs), two.leapfrogs);
    assert_ne!(
        five.samples.slice(ndarray::s![0, .., ..]),
        five.samples.slice(ndarray::s![1, .., ..])
    );
}

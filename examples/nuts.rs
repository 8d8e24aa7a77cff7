//! The No-U-Turn sampler as one operator (`ovl_stdlib::nuts`), one worker per chain, on two
//! models: a 100-dimensional Gaussian with AR(1) correlation 0.9 (the autobatching paper's
//! synthetic benchmark; its precision matrix is an input) and a Bayesian logistic regression on
//! a seeded synthetic data set (N = 200, D = 10).
//!
//! `cargo run --release --example nuts` samples both and prints what the chains found.
//! `cargo run --release --example nuts -- --bench [--chains 1,16,256] [--repeats 3]
//! [--out DIR]` times them (the minimum of the repeats, the first run compiling) and writes
//! `DIR/nuts-ovl.json` (`scripts/bench-nuts.sh` runs it).

use ndarray::{Array1, Array2, ArrayD, Axis};
use ovl::{Lazy, Options};
use ovl_stdlib::nuts::{nuts, LogDensity};
use ovl_stdlib::nuts_models::{ar1_precision, lcg_uniforms, logistic_data, Gaussian, Logistic};
use std::time::Instant;

const KEY: [u32; 2] = [2024, 11];
const MAX_DEPTH: usize = 10;

/// A model's inputs for the sampler.
struct Problem {
    name: &'static str,
    data: Vec<ArrayD<f64>>,
    step: f64,
    dim: usize,
    /// Transitions to discard before estimating (0 when the chains start at exact draws).
    warmup_fraction: f64,
    init: fn(usize, usize) -> Array2<f64>,
}

/// Exact draws of the AR(1) Gaussian (`x_0 ~ N(0, 1)`, `x_i = rho x_{i-1} + sqrt(1 - rho^2)
/// e_i`): the chains start in the stationary distribution.
fn gaussian_init(chains: usize, dim: usize) -> Array2<f64> {
    let u = lcg_uniforms(17, chains * dim * 2);
    let normal = |k: usize| {
        let (a, b) = (1.0 - u[2 * k], u[2 * k + 1]);
        (-2.0 * a.ln()).sqrt() * (std::f64::consts::TAU * b).cos()
    };
    let mut x = Array2::zeros((chains, dim));
    for c in 0..chains {
        x[[c, 0]] = normal(c * dim);
        for i in 1..dim {
            x[[c, i]] = 0.9 * x[[c, i - 1]] + (1.0f64 - 0.81).sqrt() * normal(c * dim + i);
        }
    }
    x
}

/// The logistic chains start at the coefficients that made the data (in the posterior's bulk).
fn logistic_init(chains: usize, dim: usize) -> Array2<f64> {
    let (_, _, beta) = logistic_data(200, dim, 5);
    Array2::from_shape_fn((chains, dim), |(_, j)| beta[j])
}

fn problems() -> Vec<Problem> {
    let (x, y, _) = logistic_data(200, 10, 5);
    vec![
        Problem {
            name: "gaussian100",
            data: vec![ar1_precision(100, 0.9).into_dyn()],
            step: 0.2,
            dim: 100,
            warmup_fraction: 0.0,
            init: gaussian_init,
        },
        Problem {
            name: "logistic",
            data: vec![x.into_dyn(), y.into_dyn()],
            step: 0.1,
            dim: 10,
            warmup_fraction: 0.2,
            init: logistic_init,
        },
    ]
}

struct Output {
    samples: ArrayD<f64>,
    leapfrogs: ArrayD<i32>,
    depth: ArrayD<i32>,
    divergent: ArrayD<i32>,
    accept: ArrayD<f64>,
    seconds: f64,
}

fn sample<M: LogDensity>(p: &Problem, chains: usize, transitions: usize) -> Output {
    let outs = nuts::<M>(
        Array1::from(KEY.to_vec()),
        (p.init)(chains, p.dim),
        Array1::from_elem(chains, p.step),
        Array1::<f64>::ones(p.dim),
        p.data.iter().map(|d| Lazy::from(d.clone())).collect(),
        transitions,
        MAX_DEPTH,
    );
    let start = Instant::now();
    let (samples, depth, leapfrogs, divergent, accept) = ovl::evaluate_with(
        (&outs.0, &outs.1, &outs.2, &outs.3, &outs.4),
        &Options::cpu(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    Output {
        samples,
        leapfrogs,
        depth,
        divergent,
        accept,
        seconds: start.elapsed().as_secs_f64(),
    }
}

fn run(p: &Problem, chains: usize, transitions: usize) -> Output {
    if p.name == "gaussian100" {
        sample::<Gaussian>(p, chains, transitions)
    } else {
        sample::<Logistic>(p, chains, transitions)
    }
}

/// Effective sample size of each coordinate's mean by batch means: the kept draws of each chain
/// cut into `b` batches (`b` = ceil(20 / chains), at least 1), `ESS = n s^2 / (L var(batch
/// means))` with `n` the draws, `L` the batch length and `s^2` the draws' variance (the same
/// estimator as `benches/nuts_peers.py`). Returns the smallest over coordinates.
fn min_ess(samples: &ArrayD<f64>, skip: usize) -> f64 {
    let [chains, transitions, dim] = [samples.shape()[0], samples.shape()[1], samples.shape()[2]];
    let kept = transitions - skip;
    let per_chain = 20usize.div_ceil(chains).max(1).min(kept);
    let len = kept / per_chain;
    let mut best = f64::INFINITY;
    for i in 0..dim {
        let mut means = Vec::new();
        let mut all = Vec::new();
        for c in 0..chains {
            for b in 0..per_chain {
                let xs: Vec<f64> = (0..len)
                    .map(|t| samples[[c, skip + b * len + t, i]])
                    .collect();
                means.push(xs.iter().sum::<f64>() / len as f64);
                all.extend(xs);
            }
        }
        let n = all.len() as f64;
        let mean = all.iter().sum::<f64>() / n;
        let s2 = all.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
        let m = means.len() as f64;
        let var_means = means.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (m - 1.0);
        best = best.min(n * s2 / (len as f64 * var_means));
    }
    best
}

fn parse_list(v: &str) -> Vec<usize> {
    v.split(',')
        .map(|s| s.trim().parse().expect("a number"))
        .collect()
}

/// Transitions per chain for a run of `chains`: fewer for many chains (the same order of work).
fn transitions_for(p: &Problem, chains: usize) -> usize {
    let base = if p.name == "gaussian100" { 400 } else { 1000 };
    (base * 16 / chains.max(16)).clamp(25, base)
}

fn bench(args: &[String]) {
    let mut chains = vec![1, 16, 256, 4096];
    let mut repeats = 3;
    let mut out = std::path::PathBuf::from("target/nuts-bench");
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--chains" => chains = parse_list(it.next().expect("--chains N,N")),
            "--repeats" => repeats = it.next().expect("--repeats N").parse().unwrap(),
            "--out" => out = it.next().expect("--out DIR").into(),
            "--bench" => {}
            other => panic!("unknown argument {other}"),
        }
    }
    // The inputs, for the peers (benches/nuts_peers.py): data, step size, initial positions of
    // the most chains (fewer chains take the first rows) and transitions per chain count.
    let most = chains.iter().copied().max().unwrap_or(1);
    let nested = |a: &ArrayD<f64>| -> serde_json::Value {
        match a.ndim() {
            1 => serde_json::json!(a.iter().copied().collect::<Vec<f64>>()),
            _ => serde_json::json!(a
                .outer_iter()
                .map(|r| r.iter().copied().collect::<Vec<f64>>())
                .collect::<Vec<_>>()),
        }
    };
    let inputs: Vec<serde_json::Value> = problems()
        .iter()
        .map(|p| {
            serde_json::json!({
                "model": p.name, "dim": p.dim, "step": p.step, "max_depth": MAX_DEPTH,
                "warmup_fraction": p.warmup_fraction,
                "data": p.data.iter().map(nested).collect::<Vec<_>>(),
                "init": nested(&(p.init)(most, p.dim).into_dyn()),
                "transitions": chains.iter()
                    .map(|&c| (c.to_string(), transitions_for(p, c)))
                    .collect::<std::collections::BTreeMap<_, _>>(),
            })
        })
        .collect();
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(
        out.join("problems.json"),
        serde_json::json!(inputs).to_string(),
    )
    .unwrap();
    let mut rows = Vec::new();
    for p in problems() {
        for &c in &chains {
            let t = transitions_for(&p, c);
            let _compile = run(&p, c, t); // the same kernel: compiles it
            let mut best: Option<Output> = None;
            for _ in 0..repeats {
                let o = run(&p, c, t);
                if best.as_ref().is_none_or(|b| o.seconds < b.seconds) {
                    best = Some(o);
                }
            }
            let o = best.unwrap();
            let leapfrogs = o.leapfrogs.iter().map(|&l| f64::from(l)).sum::<f64>();
            let ess = min_ess(&o.samples, (t as f64 * p.warmup_fraction) as usize);
            let row = serde_json::json!({
                "model": p.name, "chains": c, "impl": "ovl-cpu", "transitions": t,
                "seconds": o.seconds, "leapfrogs": leapfrogs,
                "leapfrogs_per_s": leapfrogs / o.seconds, "ess": ess,
                "ess_per_s": ess / o.seconds,
                "mean_depth": o.depth.mapv(f64::from).mean().unwrap(),
                "mean_accept": o.accept.mean().unwrap(),
                "divergences": o.divergent.sum(), "repeats": repeats,
            });
            println!("{row}");
            rows.push(row);
        }
    }
    let path = out.join("nuts-ovl.json");
    std::fs::write(&path, serde_json::json!({ "rows": rows }).to_string()).unwrap();
    println!("wrote {}", path.display());
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--bench") {
        return bench(&args);
    }
    for p in problems() {
        let (chains, transitions) = (16, 200);
        let o = run(&p, chains, transitions);
        let skip = (transitions as f64 * p.warmup_fraction) as usize;
        let kept = o.samples.slice_axis(Axis(1), (skip..).into());
        let flat = kept
            .to_shape((chains * (transitions - skip), p.dim))
            .unwrap()
            .to_owned();
        let mean = flat.mean_axis(Axis(0)).unwrap();
        let var = flat.var_axis(Axis(0), 1.0);
        let leapfrogs: i64 = o.leapfrogs.iter().map(|&l| i64::from(l)).sum();
        println!(
            "{}: {chains} chains x {transitions} transitions in {:.2} s (the first run \
             compiles), {leapfrogs} leapfrog steps, mean tree depth {:.2}, mean acceptance \
             statistic {:.3}, {} divergences, smallest ESS of a mean {:.0}",
            p.name,
            o.seconds,
            o.depth.mapv(f64::from).mean().unwrap(),
            o.accept.mean().unwrap(),
            o.divergent.sum(),
            min_ess(&o.samples, skip)
        );
        let show = |a: &Array1<f64>| {
            a.iter()
                .take(5)
                .map(|v| format!("{v:.3}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        println!("  mean of the first coordinates: {}", show(&mean));
        println!("  variance of the first ones:    {}", show(&var));
        if p.name == "logistic" {
            let (_, _, beta) = logistic_data(200, p.dim, 5);
            println!("  the coefficients that made the data: {}", show(&beta));
        } else {
            println!("  (the truth: means 0, variances 1)");
        }
    }
}

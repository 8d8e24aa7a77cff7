//! Does fusion ever make a graph slower? (Issue 32, item 4.) A menu of the merges the fusion
//! search makes — elementwise chains, a row statistic fused with its consumers (last axis and
//! axis 0), an epilogue after a library call, index substitution through a transpose, the
//! LSTM cell from small operators, one LSTM step with its two products, and the gates of a step
//! whose product is written as an operator (a worker per element) and such a product read
//! through a transpose — each
//! evaluated on the CPU unfused (`opt_level` 0: one kernel per operator) and fused (3), on
//! sizes large enough to measure. For each: the kernels, the sum of the kernels' best times
//! (`ovl::profile`), the best wall time of a whole evaluation, and fused / unfused for both;
//! a ratio above 1 is a merge that lost. The two evaluations' results are compared first.
//!
//! `cargo bench --bench fusion_menu -- [--quick]` prints the table and writes
//! `target/fusion-menu-bench/fusion_menu.json`. `-- --random N [--seed S]` runs N random
//! graphs instead (`fusion_menu/random.rs`: chains of elementwise operators, transposes,
//! statistics, softmax along either axis and a product per element on 512 x 512 matrices),
//! the property "no graph is slower fused" checked on graphs nobody chose
//! (`fusion_menu_random.json`). `--explain` prints the fusion report and the fused kernels'
//! times of every case that came out slower; `--only K` runs case K (of the menu, or random
//! graph K) alone and, with `--explain`, also prints its fusion report and fused operators' IR.

mod common;
#[path = "../tests/support/lstm_small_ops.rs"]
mod lstm_small_ops;
#[path = "fusion_menu/random.rs"]
mod random;

use common::machine;
use ndarray::{ArrayD, IxDyn};
use ovl::prelude::*;
use ovl_stdlib as ops;
use serde_json::json;
use std::time::{Duration, Instant};

type BoxError = Box<dyn std::error::Error>;

/// Deterministic values in [-1.5, 1.5) of `shape`.
fn data(shape: &[usize], seed: usize) -> Lazy<f32> {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|i| ((i * 7919 + seed * 104_729) % 1013) as f32 / 1013.0 * 3.0 - 1.5)
        .collect();
    Lazy::from(ArrayD::from_shape_vec(IxDyn(shape), v).expect("shape"))
}

#[path = "../tests/support/product_per_element.rs"]
mod product_per_element;
use product_per_element::product_per_element;

/// One case of the menu: its name, what it merges, and its outputs.
struct Case {
    name: String,
    merges: &'static str,
    outputs: Vec<Lazy<f32>>,
}

fn menu() -> Vec<Case> {
    let x = data(&[2048, 2048], 1);
    let y = data(&[2048, 2048], 2);
    let chain = {
        let mut t = ops::add(&x, &y);
        for k in 0..8 {
            t = if k % 2 == 0 {
                ops::tanh(ops::mul(&t, &y))
            } else {
                ops::sub(&t, &x)
            };
        }
        t
    };
    let rows = data(&[1024, 4096], 3);
    let softmax_ops = {
        let e = ops::exp(ops::sub(&rows, ops::max_keepdim(&rows, 1)));
        ops::div(&e, ops::sum_keepdim(&e, 1))
    };
    // Its gradient for an incoming `dy`, as `ovl::backward` derives it.
    let softmax_ops_dx = {
        let dy = data(&[1024, 4096], 18);
        ovl::backward(&[(&softmax_ops, &dy)], &[&rows])
            .expect("backward")
            .of(&rows)
            .expect("a gradient of x")
    };
    let gamma = data(&[4096], 4);
    let beta = data(&[4096], 5);
    let layernorm_affine = ops::add(ops::mul(ops::layernorm(&rows, 1e-5), &gamma), &beta);
    let cols = data(&[4096, 1024], 6);
    let softmax_axis0 = {
        let e = ops::exp(ops::sub(&cols, ops::max_keepdim(&cols, 0)));
        ops::div(&e, ops::sum_keepdim(&e, 0))
    };
    let a = data(&[256, 1024], 7);
    let w = data(&[1024, 1024], 8);
    let bias = data(&[1024], 9);
    let dense_relu = ops::relu(ops::add(ops::matmul(&a, &w), &bias));
    let two = Lazy::from(ndarray::arr0(2.0f32).into_dyn());
    let transposed = ops::add(ops::mul(ops::transpose(&x, &[1, 0]), &two), &y);
    let z = data(&[1024, 4 * 1024], 10);
    let c = data(&[1024, 1024], 11);
    let (cell_c, cell_h) = lstm_small_ops::lstm_cell(&z, &c, 1.0);
    let (xs, hs) = (data(&[64, 1024], 12), data(&[64, 1024], 13));
    let (wx, wh, b4) = (
        data(&[1024, 4096], 14),
        data(&[1024, 4096], 15),
        data(&[4096], 16),
    );
    let step_z = ops::add(ops::add(ops::matmul(&xs, &wx), ops::matmul(&hs, &wh)), &b4);
    let (step_c, step_h) = lstm_small_ops::lstm_cell(&step_z, &data(&[64, 1024], 17), 1.0);
    let user_t = {
        let z = product_per_element(data(&[256, 256], 19), data(&[256, 256], 20));
        let zt = ops::transpose(&z, &[1, 0]);
        ops::mul(&zt, &zt)
    };
    let user_z = product_per_element(&xs, &wx);
    let (user_c, user_h) = lstm_small_ops::lstm_cell(&user_z, &data(&[64, 1024], 18), 1.0);
    vec![
        Case {
            name: "elementwise chain 2048x2048".into(),
            merges: "13 elementwise operators, vertical",
            outputs: vec![chain],
        },
        Case {
            name: "softmax from ops 1024x4096".into(),
            merges: "row max and sum with their consumers (row buffer)",
            outputs: vec![softmax_ops.clone()],
        },
        Case {
            name: "softmax from ops, forward + backward 1024x4096".into(),
            merges: "the forward's statistics, the gradient's row sum and their consumers",
            outputs: vec![softmax_ops.clone(), softmax_ops_dx],
        },
        Case {
            name: "layer norm * gamma + beta 1024x4096".into(),
            merges: "epilogue after a row kernel",
            outputs: vec![layernorm_affine],
        },
        Case {
            name: "softmax along axis 0, 4096x1024".into(),
            merges: "column statistics with their consumers (blocked workers)",
            outputs: vec![softmax_axis0],
        },
        Case {
            name: "dense + bias + relu 256x1024x1024".into(),
            merges: "elementwise after a library call (the call stays a boundary)",
            outputs: vec![dense_relu],
        },
        Case {
            name: "transpose * 2 + y 2048x2048".into(),
            merges: "index substitution through a transpose",
            outputs: vec![transposed],
        },
        Case {
            name: "LSTM cell from small ops 1024x1024".into(),
            merges: "split, sigmoid, tanh, mul, add: 11 operators",
            outputs: vec![cell_c, cell_h],
        },
        Case {
            name: "LSTM step 64x1024 (two products + cell)".into(),
            merges: "bias and cell after two library calls",
            outputs: vec![step_c, step_h],
        },
        Case {
            name: "product per element, transposed, 256^3".into(),
            merges: "a user-written product read through a transpose (refused: strided)",
            outputs: vec![user_t],
        },
        Case {
            name: "LSTM gates 64x1024, product per element".into(),
            merges: "a user-written product substituted into the cell (its four gates' sums)",
            outputs: vec![user_c, user_h],
        },
    ]
}

fn best_of(
    reps: usize,
    mut f: impl FnMut() -> Result<(), ovl::Error>,
) -> Result<Duration, ovl::Error> {
    let mut best = Duration::MAX;
    for _ in 0..reps {
        let t = Instant::now();
        f()?;
        best = best.min(t.elapsed());
    }
    Ok(best)
}

/// The sum of each kernel's best time, the kernel count, and the results.
fn kernels(
    outputs: &[Lazy<f32>],
    options: &Options,
    reps: usize,
) -> Result<(Duration, usize, Vec<ArrayD<f32>>), ovl::Error> {
    let refs: Vec<&Lazy<f32>> = outputs.iter().collect();
    let (results, profile) = ovl::profile(refs.as_slice(), options, reps)?;
    let time = profile.operators.iter().map(|o| o.min()).sum();
    Ok((time, profile.kernel_count(), results))
}

/// The value after `flag` on the command line, parsed.
fn arg<T: std::str::FromStr>(flag: &str) -> Option<T> {
    let args: Vec<String> = std::env::args().collect();
    let i = args.iter().position(|a| a == flag)?;
    args.get(i + 1)?.parse().ok()
}

fn main() -> Result<(), BoxError> {
    let quick = std::env::args().any(|a| a == "--quick");
    let reps = if quick { 3 } else { 10 };
    let random: Option<usize> = arg("--random");
    let explain = std::env::args().any(|a| a == "--explain");
    let only: Option<usize> = arg("--only");
    let cases: Vec<Case> = match random {
        None => menu()
            .into_iter()
            .enumerate()
            .filter(|(k, _)| only.is_none_or(|o| o == *k))
            .map(|(_, case)| case)
            .collect(),
        Some(count) => random::graphs(count, 512, arg("--seed").unwrap_or(1), data)
            .into_iter()
            .enumerate()
            .filter(|(k, _)| only.is_none_or(|o| o == *k))
            .map(|(k, g)| Case {
                name: format!("random {k}: {}", g.name),
                merges: "whatever fusion finds",
                outputs: vec![g.output],
            })
            .collect(),
    };
    let unfused = Options::cpu().with_opt_level(0);
    let fused = Options::cpu().with_opt_level(3);
    println!("fusion menu, f32, CPU ({}), best of {reps}", machine());
    println!(
        "{:<42} {:>8} {:>22} {:>22} {:>9} {:>9}",
        "case", "kernels", "kernel time u / f", "wall u / f", "kernels", "wall"
    );
    let mut rows = Vec::new();
    for case in cases {
        let (ku, nu, ru) = kernels(&case.outputs, &unfused, reps)?;
        let (kf, nf, rf) = kernels(&case.outputs, &fused, reps)?;
        for (u, f) in ru.iter().zip(&rf) {
            let worst = u
                .iter()
                .zip(f.iter())
                .map(|(a, b)| (a - b).abs() / a.abs().max(1.0))
                .fold(0.0f32, f32::max);
            assert!(
                worst < 1e-4,
                "{}: fused and unfused results differ by {worst}",
                case.name
            );
        }
        let refs: Vec<&Lazy<f32>> = case.outputs.iter().collect();
        let wu = best_of(reps, || {
            ovl::evaluate_with(refs.as_slice(), &unfused).map(drop)
        })?;
        let wf = best_of(reps, || {
            ovl::evaluate_with(refs.as_slice(), &fused).map(drop)
        })?;
        let (rk, rw) = (
            kf.as_secs_f64() / ku.as_secs_f64(),
            wf.as_secs_f64() / wu.as_secs_f64(),
        );
        println!(
            "{:<42} {:>3} / {:<2} {:>10.3?} / {:<9.3?} {:>10.3?} / {:<9.3?} {:>8.2}x {:>8.2}x{}",
            case.name,
            nu,
            nf,
            ku,
            kf,
            wu,
            wf,
            rk,
            rw,
            if rk > 1.0 || rw > 1.0 {
                "  <- slower"
            } else {
                ""
            }
        );
        if explain && (rk > 1.0 || rw > 1.0 || only.is_some()) {
            let fusion = ovl::fusion(refs.as_slice(), 3)?;
            println!("{}", fusion.report);
            if only.is_some() {
                println!("{}", ovl::ir_tools::operator_dag_to_text(&fusion.after));
            }
            let (_, profile) = ovl::profile(refs.as_slice(), &fused, reps)?;
            for o in &profile.operators {
                println!("    {:>10.3?}  {}", o.min(), o.name);
            }
        }
        rows.push(json!({
            "case": case.name,
            "merges": case.merges,
            "kernels_unfused": nu,
            "kernels_fused": nf,
            "kernel_time_unfused_us": ku.as_secs_f64() * 1e6,
            "kernel_time_fused_us": kf.as_secs_f64() * 1e6,
            "wall_unfused_us": wu.as_secs_f64() * 1e6,
            "wall_fused_us": wf.as_secs_f64() * 1e6,
        }));
    }
    let dir = std::path::Path::new("target/fusion-menu-bench");
    std::fs::create_dir_all(dir)?;
    let doc = json!({ "machine": machine(), "repetitions": reps, "rows": rows });
    let file = if random.is_some() {
        "fusion_menu_random.json"
    } else {
        "fusion_menu.json"
    };
    std::fs::write(dir.join(file), serde_json::to_string_pretty(&doc)?)?;
    Ok(())
}

//! Derived gradients against written ones (issue 33): the LSTM cell's nonlinearity and layer
//! norm, each written as hand-written operators, forward + backward three ways, every graph
//! recorded once on placeholders and compiled (`ovl::compile`), on the CPU:
//!
//! - **derived**: the forward operator alone, its gradient derived by `ovl::backward` from the
//!   operator's IR (`ovl_ir::grad`), fused with the forward;
//! - **hand-written**: the forward operator and a hand-written gradient operator
//!   (`tests/support/lstm_hand.rs`, `tests/support/reductions.rs`), fused;
//! - **stdlib**: the same computation from stdlib operators with their built-in gradients
//!   (`ovl_stdlib::sigmoid`, `tanh`, ... for the cell; `ovl_stdlib::layernorm`), fused.
//!
//! Before timing, every variant's outputs are compared with the hand-written one's (a variant
//! beyond the tolerance stops the run). Each row: kernels after fusion, best and median time of a
//! call (`Compiled::run_into`) after two warm-up calls.
//!
//! `cargo bench --bench derived_gradients -- [--quick] [--out DIR]` prints the table and writes
//! `DIR/derived_gradients.json` (default `target/derived-gradients-bench`).

mod common;
#[path = "../tests/support/lstm_hand.rs"]
mod lstm_hand;
#[path = "../tests/support/lstm_small_ops.rs"]
mod lstm_small_ops;
#[path = "../tests/support/reductions.rs"]
mod reductions;

use common::{machine, time_calls, Args, Timing};
use ndarray::{ArrayD, IxDyn};
use ovl::prelude::*;
use ovl_stdlib as ops;
use serde_json::json;

type BoxError = Box<dyn std::error::Error>;

const FORGET_BIAS: f32 = 1.0;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Way {
    Derived,
    HandWritten,
    Stdlib,
}

impl Way {
    const ALL: [Way; 3] = [Way::Derived, Way::HandWritten, Way::Stdlib];
    fn name(self) -> &'static str {
        match self {
            Way::Derived => "derived",
            Way::HandWritten => "hand-written",
            Way::Stdlib => "stdlib",
        }
    }
}

/// The cell's outputs and the gradients of `z` and `c` for incoming gradients `dc`, `dh`.
fn lstm(way: Way, p: &[Lazy<f32>; 4]) -> Result<Vec<Lazy<f32>>, ovl::Error> {
    let [z, c, dc, dh] = p;
    let (nc, nh) = match way {
        Way::Derived | Way::HandWritten => lstm_hand::lstm_forward(z, c, FORGET_BIAS),
        Way::Stdlib => {
            let gates = ops::split(z, 1, 4);
            let bias = Lazy::from(ndarray::arr0(FORGET_BIAS));
            let nc = ops::add(
                ops::mul(c, ops::sigmoid(ops::add(&gates[2], bias))),
                ops::mul(ops::sigmoid(&gates[0]), ops::tanh(&gates[1])),
            );
            let nh = ops::mul(ops::tanh(&nc), ops::sigmoid(&gates[3]));
            (nc, nh)
        }
    };
    if way == Way::HandWritten {
        let (dz, dcp) = lstm_hand::lstm_backward(z, c, dc, dh, FORGET_BIAS);
        return Ok(vec![nc, nh, dz, dcp]);
    }
    let grads = ovl::backward(&[(&nc, dc), (&nh, dh)], &[z, c])?;
    let of = |x: &Lazy<f32>| {
        grads
            .of(x)
            .unwrap_or_else(|| panic!("the cell's outputs depend on every input"))
    };
    Ok(vec![nc.clone(), nh.clone(), of(z), of(c)])
}

/// Layer norm of each row and the gradient of `x` for an incoming gradient `dy`.
fn layernorm(way: Way, p: &[Lazy<f32>; 2]) -> Result<Vec<Lazy<f32>>, ovl::Error> {
    let [x, dy] = p;
    let eps = reductions::EPS;
    let y = match way {
        Way::Derived | Way::HandWritten => reductions::layernorm_rows(x, eps),
        Way::Stdlib => ops::layernorm(x, eps as f64),
    };
    if way == Way::HandWritten {
        let dx = reductions::layernorm_rows_grad(x, dy, eps);
        return Ok(vec![y, dx]);
    }
    let grads = ovl::backward(&[(&y, dy)], &[x])?;
    let dx = grads.of(x).unwrap_or_else(|| panic!("y depends on x"));
    Ok(vec![y, dx])
}

struct Measured {
    kernels: usize,
    timing: Timing,
    outputs: Vec<ArrayD<f32>>,
}

/// Compiles `outputs(placeholders)` once and times calls on `data`.
fn measure<const N: usize>(
    data: &[ArrayD<f32>; N],
    outputs: impl Fn(&[Lazy<f32>; N]) -> Result<Vec<Lazy<f32>>, ovl::Error>,
    reps: usize,
) -> Result<Measured, BoxError> {
    let names = ["a", "b", "c", "d", "e", "f"];
    let p: [Lazy<f32>; N] =
        std::array::from_fn(|k| ovl::placeholder::<f32>(names[k], data[k].shape()));
    let handles = outputs(&p)?;
    let step = ovl::compile(p.as_slice(), handles.as_slice(), &Options::cpu())?;
    let feeds: Vec<Lazy<f32>> = data.iter().map(|a| Lazy::from(a.clone())).collect();
    let mut dests: Vec<ArrayD<f32>> = handles
        .iter()
        .map(|h| ArrayD::zeros(IxDyn(h.shape())))
        .collect();
    let timing = time_calls(2, reps, || step.run_into(feeds.as_slice(), &mut dests))?;
    Ok(Measured {
        kernels: step.kernel_count(),
        timing,
        outputs: dests,
    })
}

/// The largest difference between two variants' outputs, relative to the largest magnitude.
fn difference(a: &[ArrayD<f32>], b: &[ArrayD<f32>]) -> f64 {
    let mut worst = 0.0f64;
    for (x, y) in a.iter().zip(b) {
        let scale = y.iter().fold(1.0f64, |m, v| m.max(f64::from(v.abs())));
        for (u, v) in x.iter().zip(y) {
            worst = worst.max(f64::from((u - v).abs()) / scale);
        }
    }
    worst
}

fn main() -> Result<(), BoxError> {
    let args = Args::parse("target/derived-gradients-bench");
    let reps = if args.quick { 10 } else { 30 };
    let random =
        |shape: (usize, usize), seed| lstm_small_ops::pseudo_random(shape, seed).into_dyn();
    let lstm_sizes: &[(usize, usize)] = if args.quick {
        &[(20, 650), (256, 1024)]
    } else {
        &[(20, 200), (20, 650), (256, 1024), (1024, 4096)]
    };
    let norm_sizes: &[(usize, usize)] = if args.quick {
        &[(256, 1024)]
    } else {
        &[(256, 1024), (1024, 4096), (8192, 1024)]
    };
    println!("machine: {}", machine());
    let mut rows = Vec::new();
    let mut report = |what: &str, size: String, results: Vec<(Way, Measured)>| {
        let reference = &results
            .iter()
            .find(|(w, _)| *w == Way::HandWritten)
            .expect("the hand-written variant")
            .1
            .outputs;
        for (way, m) in &results {
            let diff = difference(&m.outputs, reference);
            if diff.is_nan() || diff > 1e-4 {
                return Err(format!(
                    "{what} {size} {}: differs from the hand-written gradient by {diff:e}",
                    way.name()
                ));
            }
            println!(
                "{what:<10} {size:<10} {:<13} {:>2} kernels  best {:>10.1?}  median {:>10.1?}  (max rel. difference to hand-written {diff:.1e})",
                way.name(),
                m.kernels,
                m.timing.best,
                m.timing.median
            );
            rows.push(json!({
                "computation": what,
                "size": size,
                "way": way.name(),
                "kernels": m.kernels,
                "best_us": m.timing.best.as_secs_f64() * 1e6,
                "median_us": m.timing.median.as_secs_f64() * 1e6,
                "max_relative_difference_to_hand_written": diff,
            }));
        }
        Ok(())
    };
    for &(b, h) in lstm_sizes {
        let data = [
            random((b, 4 * h), 1),
            random((b, h), 2),
            random((b, h), 3),
            random((b, h), 4),
        ];
        let results = Way::ALL
            .iter()
            .map(|&w| Ok((w, measure(&data, |p| lstm(w, p), reps)?)))
            .collect::<Result<Vec<_>, BoxError>>()?;
        report("LSTM cell", format!("{b}x{h}"), results)?;
    }
    for &(r, c) in norm_sizes {
        let data = [random((r, c), 5), random((r, c), 6)];
        let results = Way::ALL
            .iter()
            .map(|&w| Ok((w, measure(&data, |p| layernorm(w, p), reps)?)))
            .collect::<Result<Vec<_>, BoxError>>()?;
        report("layer norm", format!("{r}x{c}"), results)?;
    }
    std::fs::create_dir_all(&args.out_dir)?;
    let path = args.out_dir.join("derived_gradients.json");
    let doc = json!({ "machine": machine(), "repetitions": reps, "rows": rows });
    std::fs::write(&path, serde_json::to_string_pretty(&doc)?)?;
    println!("wrote {}", path.display());
    Ok(())
}

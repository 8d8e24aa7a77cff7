//! The LSTM-cell benchmark, OVL side (the paper's section 3 experiment): the cell's
//! nonlinearity forward, and forward + backward, as stdlib operators unfused (opt level 0) and
//! fused automatically (opt level 3), and as hand-fused operators, at the paper's sizes and a
//! bandwidth-bound one, with a triad bandwidth measured in the same run. The unfused, fused and
//! hand-fused variants record the graph again at every call and go through
//! `ovl::evaluate_into_all`, as a training step that rebuilds its graph does; the "compiled once"
//! variants record it once on placeholders (`ovl::compile`) and only feed and run per call.
//! On a machine with a GPU the unfused, fused and hand-fused cells also run on the CUDA backend
//! (kernel time from CUDA events) against a device-to-device copy bandwidth measured in the same
//! run; without one the output says that this part did not run.
//!
//! `cargo bench --bench lstm -- [--quick] [--out DIR]` prints a table and writes `DIR/ovl.json`
//! (default `target/lstm-bench`), and, for the TensorFlow side, `DIR/bundles/lstm_BxH.json`:
//! the automatically fused cell with the gradient `ovl::backward` derives, for `DynamicLib`.
//! With `--gpu-only` it measures only the GPU part (`scripts/bench-gpu.sh`).
//! `scripts/bench-lstm.sh` runs both sides and draws the chart.
//!
//! Bytes counted per hidden unit (f32): forward reads the 4 gate pre-activations and `c` and
//! writes `new_c` and `new_h`: 7 values = 28 B. Forward + backward in one pass reads those 5
//! plus the 2 incoming gradients and writes the 2 outputs plus the 5 input gradients: 14 values
//! = 56 B. Outputs are written into reused arrays (`evaluate_into_all`), as a training loop does.

mod common;
#[path = "../tests/support/lstm_hand.rs"]
mod lstm_hand;
#[path = "../tests/support/lstm_small_ops.rs"]
mod lstm_small_ops;

use common::{device_calls, machine, time_calls, triad_bandwidth, Args, Timing};
use lstm_hand::{lstm_backward, lstm_forward};
use ndarray::{ArrayD, IxDyn};
use ovl::prelude::*;
use ovl_stdlib as ops;
use serde_json::json;
use std::time::Duration;

const FORGET_BIAS: f32 = 1.0;

/// The cell from stdlib operators (the paper's Figure 7 form).
fn cell(z: &Lazy<f32>, c: &Lazy<f32>) -> (Lazy<f32>, Lazy<f32>) {
    let gates = ops::split(z, 1, 4);
    let bias = Lazy::from(ndarray::arr0(FORGET_BIAS));
    let new_c = ops::add(
        ops::mul(c, ops::sigmoid(ops::add(&gates[2], bias))),
        ops::mul(ops::sigmoid(&gates[0]), ops::tanh(&gates[1])),
    );
    let new_h = ops::mul(ops::tanh(&new_c), ops::sigmoid(&gates[3]));
    (new_c, new_h)
}

#[derive(Clone, Copy, PartialEq)]
enum Variant {
    Unfused,
    Fused,
    HandFused,
    /// The fused cell recorded once on placeholders (`ovl::compile`), run with new data.
    FusedCompiled,
    /// The hand-fused operators, likewise.
    HandFusedCompiled,
}

impl Variant {
    const ALL: [Variant; 5] = [
        Variant::Unfused,
        Variant::Fused,
        Variant::HandFused,
        Variant::FusedCompiled,
        Variant::HandFusedCompiled,
    ];
    fn name(self) -> &'static str {
        match self {
            Variant::Unfused => "ovl unfused (opt 0)",
            Variant::Fused => "ovl fused automatically (opt 3)",
            Variant::HandFused => "ovl hand-fused",
            Variant::FusedCompiled => "ovl fused, compiled once",
            Variant::HandFusedCompiled => "ovl hand-fused, compiled once",
        }
    }
    fn options(self) -> Options {
        match self {
            Variant::Unfused | Variant::HandFused | Variant::HandFusedCompiled => {
                Options::cpu().with_opt_level(0)
            }
            Variant::Fused | Variant::FusedCompiled => Options::cpu(),
        }
    }
    fn compiled(self) -> bool {
        matches!(self, Variant::FusedCompiled | Variant::HandFusedCompiled)
    }
    fn hand_fused(self) -> bool {
        matches!(self, Variant::HandFused | Variant::HandFusedCompiled)
    }
}

struct Inputs {
    z: Lazy<f32>,
    c: Lazy<f32>,
    dc: Lazy<f32>,
    dh: Lazy<f32>,
}

impl Inputs {
    /// Deterministic data for batch `b` and hidden size `h`.
    fn pseudo_random(b: usize, h: usize) -> Inputs {
        let [z, c, dc, dh] = Inputs::host(b, h);
        Inputs {
            z: Lazy::from(z),
            c: Lazy::from(c),
            dc: Lazy::from(dc),
            dh: Lazy::from(dh),
        }
    }

    /// The same data as host arrays: `z`, `c`, `dc`, `dh`.
    fn host(b: usize, h: usize) -> [ArrayD<f32>; 4] {
        let a = |shape, seed| lstm_small_ops::pseudo_random(shape, seed).into_dyn();
        [a((b, 4 * h), 1), a((b, h), 2), a((b, h), 3), a((b, h), 4)]
    }

    /// Placeholders of the same shapes, for a graph compiled once.
    fn placeholders(&self) -> Inputs {
        let p = |name: &str, t: &Lazy<f32>| ovl::placeholder::<f32>(name, t.shape());
        Inputs {
            z: p("z", &self.z),
            c: p("c", &self.c),
            dc: p("dc", &self.dc),
            dh: p("dh", &self.dh),
        }
    }
}

/// The pass's name in the tables and the bytes it counts as moved (28 or 56 per hidden unit).
fn pass_and_bytes(b: usize, h: usize, backward: bool) -> (&'static str, f64) {
    if backward {
        ("forward+backward", (b * h * 56) as f64)
    } else {
        ("forward", (b * h * 28) as f64)
    }
}

/// The handles to evaluate for one call: the forward outputs, then (with `backward`) the
/// gradients of `z` and `c`.
fn outputs(v: Variant, x: &Inputs, backward: bool) -> Vec<Lazy<f32>> {
    if v.hand_fused() {
        let (nc, nh) = lstm_forward(&x.z, &x.c, FORGET_BIAS);
        if !backward {
            return vec![nc, nh];
        }
        let (dz, dcp) = lstm_backward(&x.z, &x.c, &x.dc, &x.dh, FORGET_BIAS);
        return vec![nc, nh, dz, dcp];
    }
    let (nc, nh) = cell(&x.z, &x.c);
    if !backward {
        return vec![nc, nh];
    }
    let grads = ovl::backward(&[(&nc, &x.dc), (&nh, &x.dh)], &[&x.z, &x.c])
        .expect("the cell is differentiable");
    let dz = grads.of(&x.z).expect("z gets a gradient");
    let dcp = grads.of(&x.c).expect("c gets a gradient");
    vec![nc, nh, dz, dcp]
}

struct Measured {
    kernels: usize,
    timing: Timing,
}

fn measure(v: Variant, x: &Inputs, backward: bool, reps: usize) -> Result<Measured, ovl::Error> {
    if v.compiled() {
        return measure_compiled(v, x, backward, reps);
    }
    let options = v.options();
    let handles = outputs(v, x, backward);
    let (_, profile) = ovl::profile(handles.as_slice(), &options, 1)?;
    let mut dests: Vec<ArrayD<f32>> = handles
        .iter()
        .map(|h| ArrayD::zeros(IxDyn(h.shape())))
        .collect();
    // Two warm-up calls (compile or load, fault the pages in); each call records the graph
    // again, as a training step would.
    let timing = time_calls(2, reps, || {
        let handles = outputs(v, x, backward);
        let refs: Vec<&Lazy<f32>> = handles.iter().collect();
        ovl::evaluate_into_all(&refs, &mut dests, &options)
    })?;
    Ok(Measured {
        kernels: profile.kernel_count(),
        timing,
    })
}

/// [`measure`] for a graph recorded once on placeholders and compiled (`ovl::compile`): each
/// call only feeds the inputs and runs the kernels.
fn measure_compiled(
    v: Variant,
    x: &Inputs,
    backward: bool,
    reps: usize,
) -> Result<Measured, ovl::Error> {
    let p = x.placeholders();
    let handles = outputs(v, &p, backward);
    let step = ovl::compile((&p.z, &p.c, &p.dc, &p.dh), handles.as_slice(), &v.options())?;
    let mut dests: Vec<ArrayD<f32>> = handles
        .iter()
        .map(|h| ArrayD::zeros(IxDyn(h.shape())))
        .collect();
    let feeds = (&x.z, &x.c, &x.dc, &x.dh);
    let timing = time_calls(2, reps, || step.run_into(feeds, &mut dests))?;
    Ok(Measured {
        kernels: step.kernel_count(),
        timing,
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse("target/lstm-bench");
    let gpu_only = args.flag("--gpu-only");
    let (quick, out_dir) = (args.quick, args.out_dir);
    let sizes: &[(usize, usize)] = if quick {
        &[(20, 200), (20, 650), (1024, 4096)]
    } else {
        &[(20, 200), (20, 650), (20, 1500), (1024, 4096)]
    };
    let reps = if quick { 5 } else { 20 };
    if gpu_only {
        // `--gpu-only` (scripts/bench-gpu.sh): the GPU part alone, into DIR/ovl.json.
        let gpu = gpu_section(sizes, reps)?;
        std::fs::create_dir_all(&out_dir)?;
        let path = out_dir.join("ovl.json");
        let doc = json!({ "machine": machine(), "gpu": gpu });
        std::fs::write(&path, serde_json::to_string_pretty(&doc)?)?;
        println!("wrote {}", path.display());
        return Ok(());
    }

    let triad = triad_bandwidth(if quick { 5 } else { 20 });
    println!("triad bandwidth: {:.1} GB/s", triad / 1e9);
    let mut rows = Vec::new();
    for &(b, h) in sizes {
        let x = Inputs::pseudo_random(b, h);
        for backward in [false, true] {
            let (pass, bytes) = pass_and_bytes(b, h, backward);
            let reps = if b * h > 1 << 20 { reps.min(10) } else { reps };
            for v in Variant::ALL {
                let m = measure(v, &x, backward, reps)?;
                let gbps = m.timing.gb_per_s(bytes);
                println!(
                    "B={b:<5} H={h:<5} {pass:<17} {:<32} {:>3} kernels  best {:>10.1?}  median {:>10.1?}  {:6.1} GB/s ({:3.0}% of triad)",
                    v.name(),
                    m.kernels,
                    m.timing.best,
                    m.timing.median,
                    gbps,
                    100.0 * gbps * 1e9 / triad
                );
                rows.push(json!({
                    "variant": v.name(),
                    "batch": b,
                    "hidden": h,
                    "pass": pass,
                    "kernels": m.kernels,
                    "best_us": m.timing.best.as_secs_f64() * 1e6,
                    "median_us": m.timing.median.as_secs_f64() * 1e6,
                    "gb_per_s": gbps,
                    "fraction_of_triad": gbps * 1e9 / triad,
                }));
            }
        }
    }
    std::fs::create_dir_all(out_dir.join("bundles"))?;
    for &(b, h) in sizes {
        let file = out_dir.join("bundles").join(format!("lstm_{b}x{h}.json"));
        let bundle = export_cell(b, h, &file)?;
        println!(
            "exported {} ({} forward kernel(s), {} gradient kernel(s))",
            file.display(),
            bundle.kernel_count(),
            bundle.gradient_kernel_count()
        );
    }
    // A GPU failure is reported in the output, not allowed to lose the CPU results.
    let gpu = gpu_section(sizes, reps).unwrap_or_else(|e| {
        println!("GPU PART FAILED: {e}");
        json!({ "skipped": format!("it failed: {e}") })
    });
    let path = out_dir.join("ovl.json");
    let doc = json!({
        "machine": machine(),
        "triad_gb_per_s": triad / 1e9,
        "bytes_per_hidden_unit": {"forward": 28, "forward+backward": 56},
        "rows": rows,
        "gpu": gpu,
    });
    std::fs::write(&path, serde_json::to_string_pretty(&doc)?)?;
    println!("wrote {}", path.display());
    Ok(())
}

/// The GPU side: the unfused, fused and hand-fused cells on the CUDA backend, each call's time
/// the sum of its kernels' GPU times (CUDA events around each launch; the host-device copies
/// `evaluate` makes around them are not counted), against GPU 0's device-to-device copy
/// bandwidth measured in the same run; then the fused and hand-fused cells compiled once and
/// called on device tensors (`common::device_calls`: a whole call's wall time, synchronized).
/// Without a GPU (or NVRTC) it prints that this part did not run and why, and records the
/// reason in place of the rows.
fn gpu_section(
    sizes: &[(usize, usize)],
    reps: usize,
) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let not_run = |why: String| {
        println!("GPU PART DID NOT RUN: {why}");
        json!({ "skipped": why })
    };
    let info = match ovl::cuda::gpu_status() {
        Ok(info) => info,
        Err(e) => return Ok(not_run(e.to_string())),
    };
    if let Err(e) = ovl::cuda::nvrtc_status() {
        return Ok(not_run(e.to_string()));
    }
    let copy = ovl::cuda::device_copy_bandwidth(256 << 20, 20)?;
    println!(
        "GPU: {} (sm_{}), device-to-device copy bandwidth {:.0} GB/s",
        info.name,
        info.arch,
        copy / 1e9
    );
    let mut rows = Vec::new();
    for &(b, h) in sizes {
        let x = Inputs::pseudo_random(b, h);
        let host = Inputs::host(b, h);
        for backward in [false, true] {
            let (pass, bytes) = pass_and_bytes(b, h, backward);
            for v in [Variant::Unfused, Variant::Fused, Variant::HandFused] {
                let options = Options {
                    target: ovl::Target::Cuda,
                    ..v.options()
                };
                let handles = outputs(v, &x, backward);
                let (_, profile) = ovl::profile(handles.as_slice(), &options, reps + 2)?;
                // Per call: the sum of its kernels' times; the first two calls are warm-up.
                let mut times: Vec<Duration> = (2..profile.iterations)
                    .map(|i| profile.operators.iter().map(|op| op.times[i]).sum())
                    .collect();
                times.sort();
                let (best, median) = (times[0], times[times.len() / 2]);
                let gbps = bytes / best.as_secs_f64() / 1e9;
                let name = format!("{} CUDA", v.name());
                println!(
                    "B={b:<5} H={h:<5} {pass:<17} {name:<37} {:>3} kernels  best {:>10.1?}  median {:>10.1?}  {gbps:7.1} GB/s ({:3.0}% of copy)",
                    profile.kernel_count(),
                    best,
                    median,
                    100.0 * gbps * 1e9 / copy
                );
                rows.push(json!({
                    "variant": name,
                    "batch": b,
                    "hidden": h,
                    "pass": pass,
                    "kernels": profile.kernel_count(),
                    "best_us": best.as_secs_f64() * 1e6,
                    "median_us": median.as_secs_f64() * 1e6,
                    "gb_per_s": gbps,
                }));
                if v == Variant::Unfused {
                    continue;
                }
                // Compiled once on placeholders and called on device tensors: a whole call's
                // wall time, as a GPU user sees it (no host copy; synchronized after each).
                let p = x.placeholders();
                let handles = outputs(v, &p, backward);
                let step = ovl::compile((&p.z, &p.c, &p.dc, &p.dh), handles.as_slice(), &options)?;
                let call = device_calls(
                    &step,
                    &[&host[0], &host[1], &host[2], &host[3]],
                    3,
                    reps.max(10),
                )?;
                let name = format!("{} CUDA, call on device tensors", v.name());
                println!(
                    "B={b:<5} H={h:<5} {pass:<17} {name:<37} {:>3} kernels  GPU best {:>10.1?}  wall best {:>10.1?}  median {:>10.1?}  {:7.1} GB/s ({:3.0}% of copy)",
                    step.kernel_count(),
                    call.gpu.best,
                    call.wall.best,
                    call.wall.median,
                    bytes / call.gpu.best.as_secs_f64() / 1e9,
                    100.0 * bytes / call.gpu.best.as_secs_f64() / copy,
                );
                rows.push(json!({
                    "variant": name,
                    "batch": b,
                    "hidden": h,
                    "pass": pass,
                    "kernels": step.kernel_count(),
                    "best_us": call.wall.best.as_secs_f64() * 1e6,
                    "median_us": call.wall.median.as_secs_f64() * 1e6,
                    "gpu_best_us": call.gpu.best.as_secs_f64() * 1e6,
                    "gpu_median_us": call.gpu.median.as_secs_f64() * 1e6,
                    "gb_per_s": bytes / call.gpu.best.as_secs_f64() / 1e9,
                }));
            }
        }
    }
    Ok(json!({
        "device": format!("{} (sm_{}, {} SMs)", info.name, info.arch, info.multiprocessors),
        "copy_gb_per_s": copy / 1e9,
        "timing": "sum of the kernels' GPU times (CUDA events), host-device copies not counted; rows '..., call on device tensors': best_us/median_us the wall time of Compiled::run_device_into plus ovl::cuda::synchronize, gpu_*_us CUDA events around the call (ovl::cuda::gpu_time)",
        "rows": rows,
    }))
}

/// Writes the bundle of the fused cell and its gradient for TensorFlow's `DynamicLib`.
fn export_cell(b: usize, h: usize, file: &std::path::Path) -> Result<ovl::Bundle, ovl::Error> {
    let z = ovl::placeholder::<f32>("z", &[b, 4 * h]);
    let c = ovl::placeholder::<f32>("c", &[b, h]);
    let (new_c, new_h) = cell(&z, &c);
    let d_new_c = ovl::placeholder::<f32>("d_new_c", &[b, h]);
    let d_new_h = ovl::placeholder::<f32>("d_new_h", &[b, h]);
    let grads = ovl::backward(&[(&new_c, &d_new_c), (&new_h, &d_new_h)], &[&z, &c])?;
    let missing = |input: &str| ovl::Error::Export {
        name: format!("lstm_{b}x{h}"),
        why: Box::new(ovl::ExportError::NoGradient {
            input: input.to_string(),
        }),
    };
    let dz = grads.of(&z).ok_or_else(|| missing("z"))?;
    let dc = grads.of(&c).ok_or_else(|| missing("c"))?;
    ovl::as_tensorflow((&z, &c), (&new_c, &new_h))
        .name(&format!("lstm_{b}x{h}"))
        .gradient((&d_new_c, &d_new_h), (&dz, &dc))
        .write(file)
}

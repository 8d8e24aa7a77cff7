//! The reductions benchmark, ovl side (issue 14): layer norm, softmax, RMS norm and logsumexp
//! along the last axis of a `[rows, cols]` f32 tensor, forward and forward + backward (the
//! gradient with respect to `x` for an incoming gradient `dy`), each written three ways
//! (`tests/support/reductions.rs`: from stdlib operators, as one hand-written operator, and the
//! stdlib function), each run two ways: recorded again at every call and evaluated with
//! `ovl::evaluate_into_all` (the plan cache finds the compiled graph), and recorded once on
//! placeholders and compiled (`ovl::compile`, then `run_into` per call). A STREAM triad measured
//! in the same run (before and after the kernels, the better of the two) gives the fraction of
//! the memory bandwidth each reaches.
//!
//! `cargo bench --bench reductions -- [--quick] [--out DIR]` prints a line per measurement and
//! writes `DIR/ovl.json` (default `target/reductions-bench`); with `--gpu` it measures the
//! kernels' GPU time instead (see `gpu`; `scripts/gpu-check.sh` runs it), the same kernels
//! along axis 0 and a sum over axis 0 too (`reductions/columns.rs`), and writes
//! `DIR/ovl_gpu.json`. Before timing, every variant's
//! outputs are checked against TensorFlow's (the files `benches/reductions_tf.py` leaves in
//! `DIR/data`, same inputs) and against a plain-Rust f64 reference; a variant outside the
//! tolerance stops the run. Without `DIR/data` (the benchmark run on its own) the inputs are
//! generated here and only the f64 check runs, which the output says.
//! `scripts/bench-reductions.sh` runs all sides and writes the report.
//!
//! Bytes counted (f32): forward reads `x` once and writes `y` once; forward + backward reads `x`
//! and `dy` once and writes `y` and `dx` once (for logsumexp `y` and `dy` have one value per
//! row). Recomputation and re-reads inside a kernel are not counted: the figure is the least
//! traffic any implementation needs.

#[path = "reductions/columns.rs"]
mod columns;
mod common;
#[path = "../tests/support/reductions.rs"]
mod reductions;

use common::{device_calls, machine, time_calls, triad_bandwidth, Args, Timing};
use ndarray::{Array2, ArrayD, Ix2, IxDyn};
use ovl::prelude::*;
use reductions::{max_abs_error, outputs, reference, Kernel, Way};
use serde_json::json;
use std::path::{Path, PathBuf};

type BoxError = Box<dyn std::error::Error>;
/// A result `(y, dx)`.
type Pair = (ArrayD<f32>, ArrayD<f32>);

/// Sizes (rows, cols): the full run, and `--quick`.
const FULL: [(usize, usize); 4] = [(256, 1024), (1024, 4096), (8192, 1024), (64, 65536)];
const QUICK: [(usize, usize); 2] = [(256, 1024), (1024, 4096)];

/// One ovl variant: a way of writing the kernel, evaluated per call or compiled once.
#[derive(Clone, Copy)]
struct Variant {
    way: Way,
    compiled: bool,
}

impl Variant {
    fn all() -> impl Iterator<Item = Variant> {
        Way::ALL.into_iter().flat_map(|way| {
            [false, true]
                .into_iter()
                .map(move |compiled| Variant { way, compiled })
        })
    }

    fn name(self) -> String {
        if self.compiled {
            format!("ovl {}, compiled once", self.way.name())
        } else {
            format!("ovl {}", self.way.name())
        }
    }
}

/// The inputs of one size and the results to check against.
struct Case {
    rows: usize,
    cols: usize,
    x: Lazy<f32>,
    x_host: Array2<f32>,
    /// The incoming gradient of a `[rows, cols]` output, and of logsumexp's `[rows]`.
    dy: ArrayD<f32>,
    dy_row: ArrayD<f32>,
    /// Where TensorFlow's inputs and results are, when `benches/reductions_tf.py` wrote them.
    tf_dir: Option<PathBuf>,
}

impl Case {
    fn load(rows: usize, cols: usize, out_dir: &Path) -> Result<Case, BoxError> {
        let dir = out_dir.join("data").join(format!("{rows}x{cols}"));
        let (x, dy, dy_row, tf_dir) = if dir.join("x.f32").exists() {
            (
                read_f32(&dir.join("x.f32"), &[rows, cols])?,
                read_f32(&dir.join("dy.f32"), &[rows, cols])?,
                read_f32(&dir.join("dy_row.f32"), &[rows])?,
                Some(dir),
            )
        } else {
            (
                reductions::pseudo_random(&[rows, cols], 1),
                reductions::pseudo_random(&[rows, cols], 2),
                reductions::pseudo_random(&[rows], 3),
                None,
            )
        };
        let x_host = x.into_dimensionality::<Ix2>()?;
        Ok(Case {
            rows,
            cols,
            x: Lazy::from(x_host.clone()),
            x_host,
            dy,
            dy_row,
            tf_dir,
        })
    }

    /// The incoming gradient for `kernel`'s output.
    fn dy(&self, kernel: Kernel) -> &ArrayD<f32> {
        if kernel.keeps_shape() {
            &self.dy
        } else {
            &self.dy_row
        }
    }

    /// TensorFlow's `(y, dx)` for `kernel`, when present.
    fn tensorflow(&self, kernel: Kernel) -> Result<Option<Pair>, BoxError> {
        let Some(dir) = &self.tf_dir else {
            return Ok(None);
        };
        let y_shape: Vec<usize> = if kernel.keeps_shape() {
            vec![self.rows, self.cols]
        } else {
            vec![self.rows]
        };
        let y = read_f32(&dir.join(format!("{}_y.f32", kernel.name())), &y_shape)?;
        let dx = read_f32(
            &dir.join(format!("{}_dx.f32", kernel.name())),
            &[self.rows, self.cols],
        )?;
        Ok(Some((y, dx)))
    }

    /// The bytes a pass must move at least (see the module's documentation).
    fn bytes(&self, kernel: Kernel, backward: bool) -> f64 {
        let full = (self.rows * self.cols * 4) as f64;
        let per_output = if kernel.keeps_shape() {
            full
        } else {
            (self.rows * 4) as f64
        };
        if backward {
            2.0 * (full + per_output)
        } else {
            full + per_output
        }
    }
}

/// A raw little-endian f32 file of the given shape.
fn read_f32(path: &Path, shape: &[usize]) -> Result<ArrayD<f32>, BoxError> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let want: usize = shape.iter().product();
    if bytes.len() != want * 4 {
        return Err(format!(
            "{}: {} bytes, expected {} f32 values of shape {shape:?}; rerun \
             benches/reductions_tf.py (scripts/bench-reductions.sh does)",
            path.display(),
            bytes.len(),
            want
        )
        .into());
    }
    let values = bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    Ok(ArrayD::from_shape_vec(IxDyn(shape), values)?)
}

/// What the outputs are checked against: TensorFlow's results (when present) and the f64
/// reference.
struct Expected {
    tensorflow: Option<Pair>,
    f64: (ArrayD<f64>, ArrayD<f64>),
}

/// The largest errors of `got` (`[y]` or `[y, dx]`) against TensorFlow and against the f64
/// reference; an error (stopping the run) when one is outside the tolerance.
fn check(
    got: &[ArrayD<f32>],
    expected: &Expected,
    what: &str,
) -> Result<(Option<f64>, f64), String> {
    let mut worst_tf: Option<f64> = None;
    let mut worst_ref = 0.0f64;
    let names = ["y", "dx"];
    for (k, g) in got.iter().enumerate() {
        let want_ref = if k == 0 {
            &expected.f64.0
        } else {
            &expected.f64.1
        };
        let (err, ok) = max_abs_error(g, want_ref);
        if !ok {
            return Err(format!(
                "{what}: {} differs from the f64 reference by up to {err:e}",
                names[k]
            ));
        }
        worst_ref = worst_ref.max(err);
        if let Some((ty, tdx)) = &expected.tensorflow {
            let want = if k == 0 { ty } else { tdx };
            let (err, ok) = max_abs_error(g, want);
            if !ok {
                return Err(format!(
                    "{what}: {} differs from TensorFlow's by up to {err:e}",
                    names[k]
                ));
            }
            worst_tf = Some(worst_tf.unwrap_or(0.0).max(err));
        }
    }
    Ok((worst_tf, worst_ref))
}

struct Measured {
    kernels: usize,
    timing: Timing,
    error_vs_tensorflow: Option<f64>,
    error_vs_f64: f64,
}

/// Times one variant: checks its outputs first (the first call), then two more warm-up calls
/// and `reps` timed ones.
fn measure(
    case: &Case,
    kernel: Kernel,
    v: Variant,
    backward: bool,
    expected: &Expected,
    reps: usize,
) -> Result<Measured, BoxError> {
    let options = Options::cpu();
    let dy = Lazy::from(case.dy(kernel).clone());
    let what = format!(
        "{} {}x{} {}, {}",
        kernel.name(),
        case.rows,
        case.cols,
        if backward {
            "forward+backward"
        } else {
            "forward"
        },
        v.name()
    );
    if v.compiled {
        let px = ovl::placeholder::<f32>("x", &[case.rows, case.cols]);
        let pdy = ovl::placeholder::<f32>("dy", case.dy(kernel).shape());
        let handles = outputs(kernel, v.way, &px, backward.then_some(&pdy))?;
        let feeds: Vec<Lazy<f32>> = if backward { vec![px, pdy] } else { vec![px] };
        let step = ovl::compile(&feeds, handles.as_slice(), &options)?;
        let mut dests = zeros_like(&handles);
        let data: Vec<Lazy<f32>> = if backward {
            vec![case.x.clone(), dy]
        } else {
            vec![case.x.clone()]
        };
        step.run_into(&data, &mut dests)?;
        let (error_vs_tensorflow, error_vs_f64) = check(&dests, expected, &what)?;
        let timing = time_calls(2, reps, || step.run_into(&data, &mut dests))?;
        return Ok(Measured {
            kernels: step.kernel_count(),
            timing,
            error_vs_tensorflow,
            error_vs_f64,
        });
    }
    let handles = outputs(kernel, v.way, &case.x, backward.then_some(&dy))?;
    let (_, profile) = ovl::profile(handles.as_slice(), &options, 1)?;
    let mut dests = zeros_like(&handles);
    let call = |dests: &mut Vec<ArrayD<f32>>| -> Result<(), ovl::Error> {
        // Each call records the graph again (and derives its gradient), as a training step
        // would; the plan cache finds the fused, compiled graph.
        let handles = outputs(kernel, v.way, &case.x, backward.then_some(&dy))?;
        let refs: Vec<&Lazy<f32>> = handles.iter().collect();
        ovl::evaluate_into_all(&refs, dests, &options)
    };
    call(&mut dests)?;
    let (error_vs_tensorflow, error_vs_f64) = check(&dests, expected, &what)?;
    let timing = time_calls(2, reps, || call(&mut dests))?;
    Ok(Measured {
        kernels: profile.kernel_count(),
        timing,
        error_vs_tensorflow,
        error_vs_f64,
    })
}

fn zeros_like(handles: &[Lazy<f32>]) -> Vec<ArrayD<f32>> {
    handles
        .iter()
        .map(|h| ArrayD::zeros(IxDyn(h.shape())))
        .collect()
}

/// The sizes of the GPU part (`--gpu`), in full and quick runs.
const GPU_SIZES: [(usize, usize); 2] = [(1024, 4096), (8192, 1024)];

/// `--gpu`: the kernels on this process's GPU (issue 29) instead of the CPU. For each size,
/// kernel, pass and way: the sum of the operators' kernel times (CUDA events, `ovl::profile`;
/// the copies of inputs and outputs between host and device are not counted), best and median
/// of the calls after two warm-up calls, and the bandwidth that is as a fraction of the
/// device-to-device copy bandwidth measured in the same run; then the same graph compiled once
/// on placeholders and called on device tensors (`common::device_calls`: the wall time of a
/// whole call, synchronized, no host copy). Outputs are checked against the f64 reference
/// first. Writes `DIR/ovl_gpu.json`; without a GPU it says that it did not run.
fn gpu(args: &Args) -> Result<(), BoxError> {
    let info = match ovl::cuda::gpu_status() {
        Ok(info) => info,
        Err(e) => {
            let why = e.to_string().lines().next().unwrap_or_default().to_string();
            println!("reductions --gpu: GPU EXECUTION DID NOT RUN: {why}");
            let n = columns::check_without_gpu(&Options::cpu())?;
            println!("reductions --gpu: the {n} column kernels checked on the CPU instead");
            std::fs::create_dir_all(&args.out_dir)?;
            let doc = json!({ "machine": machine(), "skipped": why });
            std::fs::write(
                args.out_dir.join("ovl_gpu.json"),
                serde_json::to_string_pretty(&doc)?,
            )?;
            return Ok(());
        }
    };
    let copy = ovl::cuda::device_copy_bandwidth(256 << 20, 20)?;
    println!(
        "GPU: {} (sm_{}), device-to-device copy bandwidth {:.0} GB/s",
        info.name,
        info.arch,
        copy / 1e9
    );
    let reps = if args.quick { 10 } else { 30 };
    let options = Options::cuda();
    let mut rows = Vec::new();
    for &(r, c) in &GPU_SIZES {
        let case = Case::load(r, c, &args.out_dir)?;
        for kernel in Kernel::ALL {
            let (y64, dx64) = reference(kernel, &case.x_host, case.dy(kernel));
            let expected = Expected {
                tensorflow: None,
                f64: (y64, dx64),
            };
            let dy = Lazy::from(case.dy(kernel).clone());
            for backward in [false, true] {
                let pass = if backward {
                    "forward+backward"
                } else {
                    "forward"
                };
                for way in Way::ALL {
                    let handles = outputs(kernel, way, &case.x, backward.then_some(&dy))?;
                    let (got, profile) = ovl::profile(handles.as_slice(), &options, reps + 2)?;
                    let name = format!("ovl {} CUDA", way.name());
                    let what = format!("{} {r}x{c} {pass}, {name}", kernel.name());
                    let (_, error_vs_f64) = check(&got, &expected, &what)?;
                    let mut times: Vec<std::time::Duration> = (2..profile.iterations)
                        .map(|i| profile.operators.iter().map(|op| op.times[i]).sum())
                        .collect();
                    times.sort();
                    let (best, median) = (times[0], times[times.len() / 2]);
                    let gbps = case.bytes(kernel, backward) / best.as_secs_f64() / 1e9;
                    println!(
                        "{:<9} {r:>5}x{c:<6} {pass:<16} {name:<22} {:>2} kernels  best {:>10.1?}  median {:>10.1?}  {gbps:7.1} GB/s ({:3.0}% of copy)  max err vs f64 {error_vs_f64:.1e}",
                        kernel.name(),
                        profile.kernel_count(),
                        best,
                        median,
                        100.0 * gbps * 1e9 / copy
                    );
                    // The same graph compiled once on placeholders and called on device
                    // tensors: the wall time of a whole call, as a GPU user sees it.
                    let px = ovl::placeholder::<f32>("x", &[r, c]);
                    let pdy = ovl::placeholder::<f32>("dy", case.dy(kernel).shape());
                    let handles = outputs(kernel, way, &px, backward.then_some(&pdy))?;
                    let feeds: Vec<Lazy<f32>> = if backward { vec![px, pdy] } else { vec![px] };
                    let step = ovl::compile(&feeds, handles.as_slice(), &options)?;
                    let x_dyn = case.x_host.clone().into_dyn();
                    let mut data = vec![&x_dyn];
                    if backward {
                        data.push(case.dy(kernel));
                    }
                    let call = device_calls(&step, &data, 3, reps)?;
                    check(&call.outputs, &expected, &format!("{what}, device tensors"))?;
                    println!(
                        "{:<9} {r:>5}x{c:<6} {pass:<16} {:<22} {:>2} kernels  GPU best {:>10.1?}  wall best {:>10.1?}  median {:>10.1?}  per call on device tensors",
                        kernel.name(),
                        format!("{name}, call"),
                        step.kernel_count(),
                        call.gpu.best,
                        call.wall.best,
                        call.wall.median,
                    );
                    rows.push(json!({
                        "kernel": kernel.name(),
                        "variant": name,
                        "rows": r,
                        "cols": c,
                        "pass": pass,
                        "kernels": profile.kernel_count(),
                        "best_us": best.as_secs_f64() * 1e6,
                        "median_us": median.as_secs_f64() * 1e6,
                        "gb_per_s": gbps,
                        "fraction_of_copy": gbps * 1e9 / copy,
                        "max_abs_error_vs_f64": error_vs_f64,
                        "call_best_us": call.wall.best.as_secs_f64() * 1e6,
                        "call_median_us": call.wall.median.as_secs_f64() * 1e6,
                        "call_gpu_best_us": call.gpu.best.as_secs_f64() * 1e6,
                        "call_gpu_median_us": call.gpu.median.as_secs_f64() * 1e6,
                    }));
                }
            }
        }
    }
    // The rows are written first: a run stopped during the column part keeps them.
    let save = |rows: &[serde_json::Value]| -> Result<(), BoxError> {
        std::fs::create_dir_all(&args.out_dir)?;
        let path = args.out_dir.join("ovl_gpu.json");
        let doc = json!({
            "machine": machine(),
            "device": format!("{} (sm_{}, {} SMs)", info.name, info.arch, info.multiprocessors),
            "copy_gb_per_s": copy / 1e9,
            "timing": "best_us/median_us: sum of the kernels' GPU times (CUDA events, ovl::profile); call_best_us/call_median_us: wall time of Compiled::run_device_into on device tensors plus ovl::cuda::synchronize; call_gpu_*: CUDA events around that call (ovl::cuda::gpu_time)",
            "repetitions": reps,
            "rows": rows,
        });
        std::fs::write(&path, serde_json::to_string_pretty(&doc)?)?;
        println!("wrote {}", path.display());
        Ok(())
    };
    save(&rows)?;
    // Reductions down columns (along axis 0), same measurements.
    columns::measure(reps, copy, &mut rows)?;
    save(&rows)
}

fn main() -> Result<(), BoxError> {
    let args = Args::parse("target/reductions-bench");
    if args.flag("--gpu") {
        return gpu(&args);
    }
    let sizes: &[(usize, usize)] = if args.quick { &QUICK } else { &FULL };
    let reps = if args.quick { 5 } else { 20 };

    // The triad runs before and after the kernels; the better of the two is the reference (a
    // shared machine's bandwidth drifts during a run).
    let triad_start = triad_bandwidth(reps);
    println!("triad bandwidth: {:.1} GB/s", triad_start / 1e9);
    let mut rows = Vec::new();
    let mut checked_against_tensorflow = true;
    for &(r, c) in sizes {
        let case = Case::load(r, c, &args.out_dir)?;
        if case.tf_dir.is_none() {
            checked_against_tensorflow = false;
            println!(
                "{r}x{c}: no TensorFlow results in {} (benches/reductions_tf.py writes them; \
                 scripts/bench-reductions.sh runs it first): inputs generated here, outputs \
                 checked against the f64 reference only",
                args.out_dir.join("data").display()
            );
        }
        for kernel in Kernel::ALL {
            let (y64, dx64) = reference(kernel, &case.x_host, case.dy(kernel));
            let expected = Expected {
                tensorflow: case.tensorflow(kernel)?,
                f64: (y64, dx64),
            };
            for backward in [false, true] {
                let pass = if backward {
                    "forward+backward"
                } else {
                    "forward"
                };
                let bytes = case.bytes(kernel, backward);
                for v in Variant::all() {
                    let m = measure(&case, kernel, v, backward, &expected, reps)?;
                    let gbps = m.timing.gb_per_s(bytes);
                    let err = m
                        .error_vs_tensorflow
                        .map_or("-".to_string(), |e| format!("{e:.1e}"));
                    println!(
                        "{:<9} {r:>5}x{c:<6} {pass:<16} {:<40} {:>2} kernels  best {:>10.1?}  median {:>10.1?}  {gbps:6.1} GB/s ({:3.0}% of the first triad)  max err vs TF {err}, vs f64 {:.1e}",
                        kernel.name(),
                        v.name(),
                        m.kernels,
                        m.timing.best,
                        m.timing.median,
                        100.0 * gbps * 1e9 / triad_start,
                        m.error_vs_f64,
                    );
                    rows.push(json!({
                        "kernel": kernel.name(),
                        "variant": v.name(),
                        "rows": r,
                        "cols": c,
                        "pass": pass,
                        "kernels": m.kernels,
                        "best_us": m.timing.best.as_secs_f64() * 1e6,
                        "median_us": m.timing.median.as_secs_f64() * 1e6,
                        "gb_per_s": gbps,
                        "max_abs_error_vs_tensorflow": m.error_vs_tensorflow,
                        "max_abs_error_vs_f64": m.error_vs_f64,
                    }));
                }
            }
        }
    }
    let triad_end = triad_bandwidth(reps);
    let triad = triad_start.max(triad_end);
    println!(
        "triad bandwidth at the end: {:.1} GB/s; the reference is {:.1} GB/s",
        triad_end / 1e9,
        triad / 1e9
    );
    for row in &mut rows {
        let gbps = row["gb_per_s"].as_f64().unwrap_or(0.0);
        row["fraction_of_triad"] = json!(gbps * 1e9 / triad);
    }
    std::fs::create_dir_all(&args.out_dir)?;
    let path = args.out_dir.join("ovl.json");
    let doc = json!({
        "machine": machine(),
        "triad_gb_per_s": triad / 1e9,
        "triad_start_gb_per_s": triad_start / 1e9,
        "triad_end_gb_per_s": triad_end / 1e9,
        "repetitions": reps,
        "checked_against_tensorflow": checked_against_tensorflow,
        "bytes": "forward: x read once, y written once; forward+backward: x and dy read once, \
                  y and dx written once (f32; logsumexp's y and dy have one value per row)",
        "rows": rows,
    });
    std::fs::write(&path, serde_json::to_string_pretty(&doc)?)?;
    println!("wrote {}", path.display());
    Ok(())
}

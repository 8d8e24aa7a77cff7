//! `--gpu`, column part: reductions down the columns of a `[rows, cols]` f32 tensor (along
//! axis 0), which the GPU runs with a block of neighbouring columns times row-threads
//! (`ovl_ir::cooperative::Layout::Columns`): a sum over axis 0 (forward), and softmax, layer
//! norm, RMS norm and logsumexp composed from stdlib operators along axis 0 (forward and
//! forward + backward, the gradient `ovl::backward` derives). Measured as the row part is: the
//! kernels' GPU time (`ovl::profile`) and a call compiled once on device tensors, after a
//! check against the f64 reference (computed on the transposed tensor). Each row of the JSON
//! names its kernel `"<kernel> axis 0"` and its variant [`VARIANT`];
//! `benches/reductions_gpu_peers.py` measures the peers under the same names.

use super::reductions::{ops_along, outputs_along, pseudo_random, reference, Kernel};
use super::{check, device_calls, BoxError, Expected};
use ndarray::{ArrayD, Ix2};
use ovl::prelude::*;
use serde_json::{json, Value};

/// The sizes (rows, cols): few long columns, and more shorter ones.
pub const SIZES: [(usize, usize); 2] = [(8192, 1024), (1024, 4096)];

/// The variant name of the column rows in `ovl_gpu.json` (`benches/gpu_report.py` reads it).
pub const VARIANT: &str = "ovl stdlib ops along axis 0 CUDA";

/// A column kernel: one of the row benchmark's kernels along axis 0, or a plain sum.
#[derive(Clone, Copy)]
enum Column {
    Sum,
    Of(Kernel),
}

impl Column {
    fn all() -> Vec<Column> {
        std::iter::once(Column::Sum)
            .chain(Kernel::ALL.into_iter().map(Column::Of))
            .collect()
    }

    fn name(self) -> String {
        match self {
            Column::Sum => "sum axis 0".into(),
            Column::Of(k) => format!("{} axis 0", k.name()),
        }
    }

    /// Whether its output has `x`'s shape (else one value per column).
    fn keeps_shape(self) -> bool {
        match self {
            Column::Sum => false,
            Column::Of(k) => k.keeps_shape(),
        }
    }

    /// The passes measured: the sum's gradient is a broadcast (no reduction), so forward only.
    fn passes(self) -> &'static [bool] {
        match self {
            Column::Sum => &[false],
            Column::Of(_) => &[false, true],
        }
    }

    fn outputs(self, x: &Lazy<f32>, dy: Option<&Lazy<f32>>) -> Result<Vec<Lazy<f32>>, ovl::Error> {
        match self {
            Column::Sum => Ok(vec![ovl_stdlib::sum(x, 0)]),
            Column::Of(k) => match dy {
                Some(dy) => outputs_along(k, x, 0, Some(dy)),
                None => Ok(vec![ops_along(k, x, 0)]),
            },
        }
    }

    /// The f64 reference `(y, dx)` (for the sum, dx is the broadcast `dy`).
    fn reference(self, x: &ArrayD<f32>, dy: &ArrayD<f32>) -> (ArrayD<f64>, ArrayD<f64>) {
        let x2 = x.view().into_dimensionality::<Ix2>().expect("a matrix");
        match self {
            Column::Sum => {
                let y = x2.mapv(f64::from).sum_axis(ndarray::Axis(0)).into_dyn();
                let dx = dy
                    .mapv(f64::from)
                    .broadcast(x.shape())
                    .expect("broadcast")
                    .to_owned();
                (y, dx)
            }
            Column::Of(k) => {
                let xt = x2.t().as_standard_layout().to_owned();
                let dyt = if k.keeps_shape() {
                    let d = dy.view().into_dimensionality::<Ix2>().expect("a matrix");
                    d.t().as_standard_layout().to_owned().into_dyn()
                } else {
                    dy.clone()
                };
                let (y, dx) = reference(k, &xt, &dyt);
                let back = |a: ArrayD<f64>| {
                    let a = a.into_dimensionality::<Ix2>().expect("a matrix");
                    a.t().as_standard_layout().to_owned().into_dyn()
                };
                let y = if k.keeps_shape() { back(y) } else { y };
                (y, back(dx))
            }
        }
    }
}

/// Without a GPU: every column kernel and pass at a small size with a partial block of
/// columns, evaluated with `options` (the C++ backend), checked against the same f64 reference
/// the GPU run uses, so that a dry run finds a wrong reference before a GPU run would stop on
/// it. Returns how many were checked.
pub fn check_without_gpu(options: &Options) -> Result<usize, BoxError> {
    let (r, c) = (300, 37);
    let x_host = pseudo_random(&[r, c], 5);
    let x = Lazy::from(x_host.clone());
    let mut checked = 0;
    for kernel in Column::all() {
        let dy_host = if kernel.keeps_shape() {
            pseudo_random(&[r, c], 6)
        } else {
            pseudo_random(&[c], 6)
        };
        let expected = Expected {
            tensorflow: None,
            f64: kernel.reference(&x_host, &dy_host),
        };
        let dy = Lazy::from(dy_host);
        for &backward in kernel.passes() {
            let handles = kernel.outputs(&x, backward.then_some(&dy))?;
            let refs: Vec<&Lazy<f32>> = handles.iter().collect();
            let mut got: Vec<ArrayD<f32>> = handles
                .iter()
                .map(|h| ArrayD::zeros(ndarray::IxDyn(h.shape())))
                .collect();
            ovl::evaluate_into_all(&refs, &mut got, options)?;
            let what = format!("{} {r}x{c} backward {backward}", kernel.name());
            check(&got, &expected, &what)?;
            checked += 1;
        }
    }
    Ok(checked)
}

/// Measures every column kernel at [`SIZES`] on the GPU, appending a JSON row per kernel and
/// pass to `rows`; `copy` is the device-to-device copy bandwidth (bytes/s).
pub fn measure(reps: usize, copy: f64, rows: &mut Vec<Value>) -> Result<(), BoxError> {
    let options = Options::cuda();
    for &(r, c) in &SIZES {
        let x_host = pseudo_random(&[r, c], (r * 31 + c) as u64);
        let x = Lazy::from(x_host.clone());
        for kernel in Column::all() {
            let dy_host = if kernel.keeps_shape() {
                pseudo_random(&[r, c], 7)
            } else {
                pseudo_random(&[c], 8)
            };
            let (y64, dx64) = kernel.reference(&x_host, &dy_host);
            let expected = Expected {
                tensorflow: None,
                f64: (y64, dx64),
            };
            let dy = Lazy::from(dy_host.clone());
            let full = (r * c * 4) as f64;
            let per_output = if kernel.keeps_shape() {
                full
            } else {
                (c * 4) as f64
            };
            for &backward in kernel.passes() {
                let pass = if backward {
                    "forward+backward"
                } else {
                    "forward"
                };
                let bytes = if backward {
                    2.0 * (full + per_output)
                } else {
                    full + per_output
                };
                let handles = kernel.outputs(&x, backward.then_some(&dy))?;
                let (got, profile) = ovl::profile(handles.as_slice(), &options, reps + 2)?;
                let what = format!("{} {r}x{c} {pass}, {VARIANT}", kernel.name());
                let (_, error_vs_f64) = check(&got, &expected, &what)?;
                let mut times: Vec<std::time::Duration> = (2..profile.iterations)
                    .map(|i| profile.operators.iter().map(|op| op.times[i]).sum())
                    .collect();
                times.sort();
                let (best, median) = (times[0], times[times.len() / 2]);
                let gbps = bytes / best.as_secs_f64() / 1e9;
                println!(
                    "{:<17} {r:>5}x{c:<6} {pass:<16} {:>2} kernels  best {:>10.1?}  median {:>10.1?}  {gbps:7.1} GB/s ({:3.0}% of copy)  max err vs f64 {error_vs_f64:.1e}",
                    kernel.name(),
                    profile.kernel_count(),
                    best,
                    median,
                    100.0 * gbps * 1e9 / copy
                );
                let px = ovl::placeholder::<f32>("x", &[r, c]);
                let pdy = ovl::placeholder::<f32>("dy", dy_host.shape());
                let handles = kernel.outputs(&px, backward.then_some(&pdy))?;
                let feeds: Vec<Lazy<f32>> = if backward { vec![px, pdy] } else { vec![px] };
                let step = ovl::compile(&feeds, handles.as_slice(), &options)?;
                let mut data = vec![&x_host];
                if backward {
                    data.push(&dy_host);
                }
                let call = device_calls(&step, &data, 3, reps)?;
                check(&call.outputs, &expected, &format!("{what}, device tensors"))?;
                println!(
                    "{:<17} {r:>5}x{c:<6} {pass:<16} {:>2} kernels  GPU best {:>10.1?}  wall best {:>10.1?}  median {:>10.1?}  per call on device tensors",
                    kernel.name(),
                    step.kernel_count(),
                    call.gpu.best,
                    call.wall.best,
                    call.wall.median,
                );
                rows.push(json!({
                    "kernel": kernel.name(),
                    "variant": VARIANT,
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
    Ok(())
}

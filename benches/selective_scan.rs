//! The selective scan of `examples/selective_scan.rs` (issue 52), ovl side: forward, and
//! forward + the derived backward (gradients of `sum(y * g)` for all five inputs), recorded on
//! placeholders and compiled once (`ovl::compile`, f32, CPU), each checked against the
//! example's f64 reference before it is timed. Writes `DIR/ovl.json`;
//! `benches/selective_scan_peers.py` times PyTorch and JAX on the same inputs and writes the
//! table. `scripts/bench-scan.sh` runs both.
//!
//! `cargo bench --bench selective_scan -- [--quick] [--out DIR]`

mod common;
#[allow(dead_code)]
#[path = "../examples/selective_scan.rs"]
mod example;

use common::{machine, time_calls, Args};
use example::{inputs, reference, rel_error, selective_scan};
use ndarray::{ArrayD, IxDyn};
use ovl::{Lazy, Options};
use serde_json::json;

/// (batch, channels, steps, state).
/// (The derived gradients of `A`, `B` and `C`, which many workers read, are gathers that
/// recompute the sweeps of the workers reading each element: their cost grows with `L x N`.)
const SIZES: [(usize, usize, usize, usize); 2] = [(2, 16, 64, 8), (2, 64, 256, 16)];
/// Max |got - want| / max |want| per array, f32 through the scan.
const TOLERANCE: f64 = 2e-3;

fn main() {
    let args = Args::parse("target/scan-bench");
    std::fs::create_dir_all(&args.out_dir).expect("output directory");
    let (sizes, reps) = if args.quick {
        (&SIZES[..1], 3)
    } else {
        (&SIZES[..], 7)
    };
    let mut rows = Vec::new();
    for &size in sizes {
        let (bs, ds, ls, ns) = size;
        let xs = inputs(size);
        let g = inputs((bs, ds, ls, 1))[0].clone();
        let (want_y, want_grads) = reference(&xs, &g);
        let names = ["x", "dt", "a", "b", "c"];
        let shapes: Vec<Vec<usize>> = xs.iter().map(|x| x.shape().to_vec()).collect();
        let ph: Vec<Lazy<f32>> = names
            .iter()
            .zip(&shapes)
            .map(|(n, s)| ovl::placeholder::<f32>(n, s))
            .collect();
        let gp = ovl::placeholder::<f32>("g", &[bs, ds, ls]);
        let y = selective_scan(&ph[0], &ph[1], &ph[2], &ph[3], &ph[4]);
        let grads = ovl::backward(&[(&y, &gp)], &ph.iter().collect::<Vec<_>>()).expect("derive");
        let gs: Vec<Lazy<f32>> = ph.iter().map(|x| grads.of_or_zeros(x)).collect();
        let options = Options::cpu();
        let fwd = ovl::compile(&ph[..], std::slice::from_ref(&y), &options).expect("compile");
        let mut all_in = ph.clone();
        all_in.push(gp.clone());
        let bwd = ovl::compile(&all_in[..], &gs[..], &options).expect("compile backward");
        let feeds: Vec<Lazy<f32>> = xs.iter().cloned().map(Lazy::from).collect();
        let gl = Lazy::from(g);
        let mut ydest = vec![ArrayD::<f32>::zeros(IxDyn(&[bs, ds, ls]))];
        let mut gdest: Vec<ArrayD<f32>> = shapes.iter().map(|s| ArrayD::zeros(IxDyn(s))).collect();
        let run_f = |d: &mut [ArrayD<f32>]| {
            fwd.run_into((&feeds[0], &feeds[1], &feeds[2], &feeds[3], &feeds[4]), d)
        };
        let run_b = |d: &mut [ArrayD<f32>]| {
            bwd.run_into(
                (&feeds[0], &feeds[1], &feeds[2], &feeds[3], &feeds[4], &gl),
                d,
            )
        };
        run_f(&mut ydest).expect("forward");
        run_b(&mut gdest).expect("backward");
        let err = rel_error(&ydest[0], &want_y);
        assert!(err <= TOLERANCE, "y: relative error {err}");
        for (i, n) in names.iter().enumerate() {
            let err = rel_error(&gdest[i], &want_grads[i]);
            assert!(err <= TOLERANCE, "d{n}: relative error {err}");
        }
        let f = time_calls(1, reps, || run_f(&mut ydest)).expect("forward");
        let b = time_calls(1, reps, || run_b(&mut gdest)).expect("backward");
        println!(
            "scan {bs}x{ds}x{ls}x{ns}: forward {:.3} ms, derived backward {:.3} ms",
            f.best.as_secs_f64() * 1e3,
            b.best.as_secs_f64() * 1e3
        );
        rows.push(json!({
            "size": [bs, ds, ls, ns],
            "forward_s": f.best.as_secs_f64(),
            "backward_s": b.best.as_secs_f64(),
        }));
    }
    let report = json!({ "machine": machine(), "rows": rows });
    let path = args.out_dir.join("ovl.json");
    std::fs::write(&path, serde_json::to_string_pretty(&report).unwrap()).expect("write");
    println!("wrote {}", path.display());
}

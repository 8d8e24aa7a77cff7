//! The LSTM cell's forward nonlinearity written from small operators (split into four gates,
//! sigmoid/tanh, multiply, add, a forget-bias constant), evaluated unfused (opt_level 0: 11
//! kernels) and fused (opt_level 3: 1 kernel) on the CPU, best of several runs, at
//! B=20,H=650 and B=1024,H=4096.
//!
//! Run with `cargo bench --bench lstm_fusion` (`-- --quick` for a short run).

use ndarray::Array2;
use ovl::prelude::*;
use std::time::{Duration, Instant};

#[path = "../tests/support/lstm_small_ops.rs"]
mod lstm_small_ops;
use lstm_small_ops::lstm_cell;

fn best_of(reps: usize, mut f: impl FnMut()) -> Duration {
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .min()
        .unwrap_or_default()
}

fn main() -> Result<(), ovl::Error> {
    let quick = std::env::args().any(|a| a == "--quick");
    let reps = if quick { 3 } else { 10 };
    let unfused = Options::cpu().with_opt_level(0);
    let fused = Options::cpu().with_opt_level(3);
    println!("LSTM cell nonlinearity, fp32, CPU, best of {reps}");
    println!(
        "{:>6} {:>6} {:>16} {:>16} {:>8} {:>12}",
        "B", "H", "unfused", "fused", "ratio", "fused GB/s"
    );
    for (b, h) in [(20usize, 650usize), (1024, 4096)] {
        let z = Array2::from_shape_fn((b, 4 * h), |(r, k)| {
            ((r * 31 + k * 7) % 23) as f32 * 0.2 - 2.0
        });
        let c = Array2::from_shape_fn((b, h), |(r, k)| ((r * 5 + k) % 9) as f32 * 0.3 - 1.2);
        let (zl, cl): (Lazy<f32>, Lazy<f32>) = (z.clone().into(), c.clone().into());
        let (new_c, new_h) = lstm_cell(&zl, &cl, 1.0);
        let outputs = (&new_c, &new_h);

        // Warm up (compile into the cache) and check both against each other and plain Rust.
        let (pu, ku) = ovl::profile(outputs, &unfused, 1)?;
        let (pf, kf) = ovl::profile(outputs, &fused, 1)?;
        assert_eq!(pu, pf, "fused and unfused results differ");
        let sig = |x: f32| 1.0 / (1.0 + (-x).exp());
        for (r, k) in [(0, 0), (b / 2, h / 3), (b - 1, h - 1)] {
            let nc =
                c[[r, k]] * sig(z[[r, k + 2 * h]] + 1.0) + sig(z[[r, k]]) * z[[r, k + h]].tanh();
            assert!((pf.0[[r, k]] - nc).abs() < 1e-5);
            assert!((pf.1[[r, k]] - nc.tanh() * sig(z[[r, k + 3 * h]])).abs() < 1e-5);
        }

        let t_unfused = best_of(reps, || {
            ovl::evaluate_with(outputs, &unfused).expect("unfused evaluation");
        });
        let t_fused = best_of(reps, || {
            ovl::evaluate_with(outputs, &fused).expect("fused evaluation");
        });
        // The fused kernel reads z (4 values) and c, and writes new_c and new_h.
        let bytes = (b * h * 7 * std::mem::size_of::<f32>()) as f64;
        println!(
            "{b:>6} {h:>6} {:>16} {:>16} {:>7.2}x {:>12.1}",
            format!("{:.3?} ({}k)", t_unfused, ku.kernel_count()),
            format!("{:.3?} ({}k)", t_fused, kf.kernel_count()),
            t_unfused.as_secs_f64() / t_fused.as_secs_f64(),
            bytes / t_fused.as_secs_f64() / 1e9
        );
    }
    Ok(())
}

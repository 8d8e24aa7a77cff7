//! The reductions benchmark's kernels along axis 0 of a C-order `[4096, 1024]` f32 matrix, from
//! ops with keepdim statistics (`benches/reductions_layouts.rs`), kernel by kernel: on the CPU
//! softmax, layer norm and RMS norm run as a statistics kernel and a pass in memory order
//! (`ovl_fuse`'s `column_pass`), logsumexp as one kernel. Prints each kernel's best time over
//! 30 calls (`ovl::profile`), three rounds, and the fusion report's split passes.
//!
//! Run with `cargo run --release --example column_passes`.

use ndarray::Array2;
use ovl::prelude::*;

#[path = "../tests/support/reductions.rs"]
mod reductions;

fn main() -> Result<(), ovl::Error> {
    let c = Array2::from_shape_fn((4096, 1024), |(i, j)| {
        (((i * 131 + j * 71) % 1009) as f32 / 1009.0) * 4.0 - 2.0
    });
    for round in 1..=3 {
        for kernel in reductions::Kernel::ALL {
            let x = Lazy::from(&c);
            let y = reductions::ops_along(kernel, &x, 0);
            if round == 1 {
                for split in ovl::fusion_with(&y, &Options::cpu())?.report.split_passes {
                    println!("{split}");
                }
            }
            let (_, profile) = ovl::profile(&y, &Options::cpu(), 30)?;
            let kernels: Vec<String> = profile
                .operators
                .iter()
                .map(|o| format!("{} {:.3} ms", o.name, o.min().as_secs_f64() * 1e3))
                .collect();
            println!(
                "round {round} {:<10} {}",
                kernel.name(),
                kernels.join(" | ")
            );
        }
    }
    Ok(())
}

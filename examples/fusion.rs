//! The LSTM cell's nonlinearity from small operators, and what the merger makes of it: the
//! fusion report, the DOT text of the operator DAG before and after fusion (rendered to
//! `lstm_fusion.svg` in the temporary directory when Graphviz is installed), and the kernel
//! counts measured by `profile`.
//!
//! Run with `cargo run --example fusion` (`-- --dot` to print the DOT text).

use ndarray::Array2;
use ovl::prelude::*;

#[path = "../tests/support/lstm_small_ops.rs"]
mod lstm_small_ops;
use lstm_small_ops::{sigmoid_op, split_gates, tanh_op};

fn main() -> Result<(), ovl::Error> {
    let (b, h) = (2, 3);
    let z = Array2::from_shape_fn((b, 4 * h), |(r, k)| (r * 4 * h + k) as f32 * 0.1 - 1.0);
    let c = Array2::from_shape_fn((b, h), |(r, k)| (r * h + k) as f32 * 0.2 - 0.5);
    let (z, c): (Lazy<f32>, Lazy<f32>) = (z.into(), c.into());

    let (i, j, f, o) = split_gates(&z);
    let forget_bias = 1.0f32;
    let new_c = &c * &sigmoid_op(&f + forget_bias) + sigmoid_op(&i) * tanh_op(&j);
    let new_h = tanh_op(&new_c) * sigmoid_op(&o);

    let fusion = ovl::fusion((&new_c, &new_h), 3)?;
    println!("{}", fusion.report);
    if std::env::args().any(|a| a == "--dot") {
        println!("{}", fusion.before_dot());
        println!("{}", fusion.after_dot());
    }
    let svg = std::env::temp_dir().join("lstm_fusion.svg");
    match fusion.render(ovl::ImageFormat::Svg, &svg) {
        Ok(()) => println!("wrote {}", svg.display()),
        Err(e) => println!("no picture: {e}"),
    }
    for level in [0, 3] {
        let ((c1, h1), profile) =
            ovl::profile((&new_c, &new_h), &Options::cpu().with_opt_level(level), 1)?;
        println!(
            "opt_level {level}: {} kernel(s); new_c[0, 0] = {}, new_h[0, 0] = {}",
            profile.kernel_count(),
            c1[[0, 0]],
            h1[[0, 0]]
        );
    }
    Ok(())
}

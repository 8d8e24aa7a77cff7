//! Exports the programs `benches/python_jax.py` times through `ovl.jax`: the LSTM cell's
//! nonlinearity (the automatically fused cell of `benches/lstm.rs`, with the gradient
//! `ovl::backward` derives) at 20x200 and 1024x4096, and the stdlib's layer norm over rows
//! at 1024x4096 with its derived gradient:
//! `cargo run --release -p ovl-py --example bench_bundles -- <directory>`.

use ovl::prelude::*;
use ovl_stdlib as ops;
use std::path::PathBuf;

/// TensorFlow's `LSTMBlockCell` forget bias, as in `benches/lstm.rs`.
const FORGET_BIAS: f32 = 1.0;

/// The cell of `benches/lstm.rs`: gates `i, j, f, o` side by side in `z`.
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

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .ok_or("usage: bench_bundles <output directory>")?,
    );
    std::fs::create_dir_all(&dir)?;
    for (b, h) in [(20usize, 200usize), (1024, 4096)] {
        let z = ovl::placeholder::<f32>("z", &[b, 4 * h]);
        let c = ovl::placeholder::<f32>("c", &[b, h]);
        let (new_c, new_h) = cell(&z, &c);
        let d_new_c = ovl::placeholder::<f32>("d_new_c", &[b, h]);
        let d_new_h = ovl::placeholder::<f32>("d_new_h", &[b, h]);
        let grads = ovl::backward(&[(&new_c, &d_new_c), (&new_h, &d_new_h)], &[&z, &c])?;
        let dz = grads.of(&z).ok_or("lstm: z has no gradient")?;
        let dc = grads.of(&c).ok_or("lstm: c has no gradient")?;
        let name = format!("lstm_{b}x{h}");
        let bundle = ovl::as_tensorflow((&z, &c), (&new_c, &new_h))
            .name(&name)
            .gradient((&d_new_c, &d_new_h), (&dz, &dc))
            .write(dir.join(format!("{name}.json")))?;
        println!("{name}.json: {} kernel(s)", bundle.kernel_count());
    }
    let (rows, cols) = (1024usize, 4096usize);
    let x = ovl::placeholder::<f32>("x", &[rows, cols]);
    let dy = ovl::placeholder::<f32>("dy", &[rows, cols]);
    let y = ops::layernorm(&x, 1e-5);
    let dx = ovl::backward(&[(&y, &dy)], &[&x])?
        .of(&x)
        .ok_or("layernorm: x has no gradient")?;
    let name = format!("layernorm_{rows}x{cols}");
    let bundle = ovl::as_tensorflow(&x, &y)
        .name(&name)
        .gradient(&dy, &dx)
        .write(dir.join(format!("{name}.json")))?;
    println!("{name}.json: {} kernel(s)", bundle.kernel_count());
    Ok(())
}

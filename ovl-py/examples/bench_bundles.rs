//! Exports the programs of the Python benchmarks (`benches/python_torch.py`,
//! `benches/python_jax.py`), each with the
//! gradient `ovl::backward` derives: the LSTM cell (its nonlinearity, as in `benches/lstm.rs`)
//! at 20x200 and 1024x4096, the layer norm at 1024x4096, and `x + 1` on f32[16] (the per-call
//! cost). `cargo run --release -p ovl-py --example bench_bundles -- <directory>`; run by
//! `scripts/bench-python.sh` and `scripts/bench-python-jax.sh`.

use ovl::prelude::*;
use ovl_stdlib as ops;
use std::path::{Path, PathBuf};

const FORGET_BIAS: f32 = 1.0;

/// The cell from stdlib operators (the paper's Figure 7 form), as `benches/lstm.rs` has it.
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

/// `x + 1`.
#[operator]
fn add_one(x: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = x[[i]] + 1.0;
    out
}

fn no_gradient(name: &str, input: &str) -> ovl::Error {
    ovl::Error::Export {
        name: name.to_string(),
        why: Box::new(ovl::ExportError::NoGradient {
            input: input.to_string(),
        }),
    }
}

fn lstm(dir: &Path, b: usize, h: usize) -> Result<(), ovl::Error> {
    let name = format!("lstm_{b}x{h}");
    let z = ovl::placeholder::<f32>("z", &[b, 4 * h]);
    let c = ovl::placeholder::<f32>("c", &[b, h]);
    let (new_c, new_h) = cell(&z, &c);
    let d_new_c = ovl::placeholder::<f32>("d_new_c", &[b, h]);
    let d_new_h = ovl::placeholder::<f32>("d_new_h", &[b, h]);
    let grads = ovl::backward(&[(&new_c, &d_new_c), (&new_h, &d_new_h)], &[&z, &c])?;
    let dz = grads.of(&z).ok_or_else(|| no_gradient(&name, "z"))?;
    let dc = grads.of(&c).ok_or_else(|| no_gradient(&name, "c"))?;
    let bundle = ovl::as_tensorflow((&z, &c), (&new_c, &new_h))
        .name(&name)
        .gradient((&d_new_c, &d_new_h), (&dz, &dc))
        .write(dir.join(format!("{name}.json")))?;
    println!("{name}.json: {} kernel(s)", bundle.kernel_count());
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .ok_or("usage: bench_bundles <output directory>")?,
    );
    std::fs::create_dir_all(&dir)?;
    lstm(&dir, 20, 200)?;
    lstm(&dir, 1024, 4096)?;

    let (b, h) = (1024, 4096);
    let x = ovl::placeholder::<f32>("x", &[b, h]);
    let dy = ovl::placeholder::<f32>("dy", &[b, h]);
    let y = ops::layernorm(&x, 1e-5);
    let dx = ovl::backward(&[(&y, &dy)], &[&x])?
        .of(&x)
        .ok_or_else(|| no_gradient("layernorm", "x"))?;
    let bundle = ovl::as_tensorflow(&x, &y)
        .name(&format!("layernorm_{b}x{h}"))
        .gradient(&dy, &dx)
        .write(dir.join(format!("layernorm_{b}x{h}.json")))?;
    println!(
        "layernorm_{b}x{h}.json: {} kernel(s)",
        bundle.kernel_count()
    );

    let x = ovl::placeholder::<f32>("x", &[16]);
    let bundle = ovl::as_tensorflow(&x, add_one(&x))
        .name("add_one")
        .write(dir.join("add_one.json"))?;
    println!("add_one.json: {} kernel(s)", bundle.kernel_count());
    Ok(())
}

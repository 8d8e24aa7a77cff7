//! Exports the programs the Python tests of the package `ovl` call (`ovl-py/tests`), one bundle
//! file each: `cargo run -p ovl-py --example py_bundles -- <directory>`.
//!
//! Each program is restated with NumPy in the tests, which compare the two. (Not named
//! `make_bundles`: that is the TensorFlow bridge's example, and the examples of a workspace
//! share `target/<profile>/examples/`.)

use ovl::prelude::*;
use std::path::{Path, PathBuf};

/// `2 x + b`, elementwise over a matrix.
#[operator]
fn scale_add(x: Tensor<f32>, b: Tensor<f32>) -> Tensor<f32> {
    let [rows, cols] = x.dims::<2>();
    let p = position_in([rows, cols]);
    let out = output_like(&x);
    out[[p[0], p[1]]] = 2.0 * x[[p[0], p[1]]] + b[[p[0], p[1]]];
    out
}

/// Elementwise minimum and maximum: two outputs.
#[operator]
fn min_max(a: Tensor<f32>, b: Tensor<f32>) -> (Tensor<f32>, Tensor<f32>) {
    let i = position_in(a.shape())[0];
    let lo = output_like(&a);
    let hi = output_like(&a);
    lo[[i]] = min(a[[i]], b[[i]]);
    hi[[i]] = max(a[[i]], b[[i]]);
    (lo, hi)
}

#[operator]
fn affine_f64(x: Tensor<f64>) -> Tensor<f64> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = x[[i]] * 0.5 - 3.0;
    out
}

#[operator]
fn mul_add_i32(a: Tensor<i32>, b: Tensor<i32>) -> Tensor<i32> {
    let i = position_in(a.shape())[0];
    let out = output_like(&a);
    out[[i]] = a[[i]] * b[[i]] + 7;
    out
}

/// `where(m, a, -a)` and `!m`: a bool input and a bool output.
#[operator]
fn masked_negate(m: Tensor<bool>, a: Tensor<f32>) -> (Tensor<f32>, Tensor<bool>) {
    let i = position_in(a.shape())[0];
    let out = output_like(&a);
    let flipped = output(m.shape());
    out[[i]] = select(m[[i]], a[[i]], -a[[i]]);
    flipped[[i]] = !m[[i]];
    (out, flipped)
}

/// Each row of `x` times its factor in `s`.
#[operator]
fn scale_rows(x: Tensor<f32>, s: Tensor<f32>) -> Tensor<f32> {
    let [rows, cols] = x.dims::<2>();
    let p = position_in([rows, cols]);
    let out = output_like(&x);
    out[[p[0], p[1]]] = x[[p[0], p[1]]] * s[[p[0]]];
    out
}

/// `x + 1`: the one-kernel op whose per-call cost the PyTorch and JAX ops are measured by.
#[operator]
fn add_one(x: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = x[[i]] + 1.0;
    out
}

/// Each column of `x` times its factor in `w` (shared by every row).
#[operator]
fn scale_cols(x: Tensor<f32>, w: Tensor<f32>) -> Tensor<f32> {
    let [rows, cols] = x.dims::<2>();
    let p = position_in([rows, cols]);
    let out = output_like(&x);
    out[[p[0], p[1]]] = x[[p[0], p[1]]] * w[[p[1]]];
    out
}

/// The first negative element of `x`: the walk leaves `x` when there is none (an index out of
/// bounds at run time, which the run reports).
#[operator]
fn first_negative(x: Tensor<f32>) -> Tensor<f32> {
    let _ = position_in([1]);
    let out = output::<f32>([1]);
    let mut j = variable(0i64);
    while x[[j]] >= 0.0 {
        j += 1;
    }
    out[[0]] = x[[j]];
    out
}

/// `x` doubled where `m` holds: a bool input next to a float one.
#[operator]
fn masked_scale(m: Tensor<bool>, x: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = select(m[[i]], 2.0 * x[[i]], x[[i]]);
    out
}

/// The gradient of [`masked_scale`], written by hand: `false` for `m` (a bool input has no
/// gradient; the bundle carries zeros of its type), `dy` doubled where `m` holds for `x`.
#[operator]
fn masked_scale_grad(m: Tensor<bool>, dy: Tensor<f32>) -> (Tensor<bool>, Tensor<f32>) {
    let i = position_in(dy.shape())[0];
    let dm = output(m.shape());
    let dx = output_like(&dy);
    dm[[i]] = false;
    dx[[i]] = select(m[[i]], 2.0 * dy[[i]], dy[[i]]);
    (dm, dx)
}

/// `where(m, 2 x, x)`: a bool input next to a float one, with a gradient.
#[operator]
fn masked_double(m: Tensor<bool>, x: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = select(m[[i]], 2.0 * x[[i]], x[[i]]);
    out
}

/// The gradient of [`masked_double`]: `where(m, 2 dy, dy)` for `x`, and `false` everywhere for
/// the bool `m` (which has none: the zeros of its type).
#[operator]
fn masked_double_grad(m: Tensor<bool>, dy: Tensor<f32>) -> (Tensor<f32>, Tensor<bool>) {
    let i = position_in(dy.shape())[0];
    let dx = output_like(&dy);
    let dm = output(m.shape());
    dx[[i]] = select(m[[i]], 2.0 * dy[[i]], dy[[i]]);
    dm[[i]] = select(m[[i]], !m[[i]], m[[i]]);
    (dx, dm)
}

/// The LSTM cell's nonlinearity (the benchmarks' cell: stdlib operators, forget bias 1):
/// `z` holds the 4 gates' pre-activations side by side.
fn lstm_cell(z: &Lazy<f32>, c: &Lazy<f32>) -> (Lazy<f32>, Lazy<f32>) {
    use ovl_stdlib as ops;
    let gates = ops::split(z, 1, 4);
    let bias = Lazy::from(ndarray::arr0(1.0f32));
    let new_c = ops::add(
        ops::mul(c, ops::sigmoid(ops::add(&gates[2], bias))),
        ops::mul(ops::sigmoid(&gates[0]), ops::tanh(&gates[1])),
    );
    let new_h = ops::mul(ops::tanh(&new_c), ops::sigmoid(&gates[3]));
    (new_c, new_h)
}

fn write(dir: &Path, file: &str, export: ovl::TfExport) -> Result<(), ovl::Error> {
    let bundle = export.write(dir.join(file))?;
    println!("{file}: {} kernel(s)", bundle.kernel_count());
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .ok_or("usage: py_bundles <output directory>")?,
    );
    std::fs::create_dir_all(&dir)?;

    // Elementwise, two inputs.
    let (x, b) = (
        ovl::placeholder::<f32>("x", &[4, 5]),
        ovl::placeholder::<f32>("b", &[4, 5]),
    );
    write(
        &dir,
        "scale_add.json",
        ovl::as_tensorflow((&x, &b), scale_add(&x, &b)),
    )?;

    // Two outputs.
    let (a, b) = (
        ovl::placeholder::<f32>("a", &[7]),
        ovl::placeholder::<f32>("b", &[7]),
    );
    let (lo, hi) = min_max(&a, &b);
    write(
        &dir,
        "min_max.json",
        ovl::as_tensorflow((&a, &b), (&lo, &hi)),
    )?;

    // Other dtypes.
    let x = ovl::placeholder::<f64>("x", &[9]);
    write(
        &dir,
        "affine_f64.json",
        ovl::as_tensorflow(&x, affine_f64(&x)),
    )?;
    let (a, b) = (
        ovl::placeholder::<i32>("a", &[9]),
        ovl::placeholder::<i32>("b", &[9]),
    );
    write(
        &dir,
        "mul_add_i32.json",
        ovl::as_tensorflow((&a, &b), mul_add_i32(&a, &b)),
    )?;
    let (m, a) = (
        ovl::placeholder::<bool>("m", &[6]),
        ovl::placeholder::<f32>("a", &[6]),
    );
    let (negated, flipped) = masked_negate(&m, &a);
    write(
        &dir,
        "masked_negate.json",
        ovl::as_tensorflow((&m, &a), (&negated, &flipped)),
    )?;

    // A reduction: the sums of a matrix's rows, and its softmax along rows (the last axis) (from ovl-stdlib).
    let x = ovl::placeholder::<f32>("x", &[3, 8]);
    write(
        &dir,
        "row_stats.json",
        ovl::as_tensorflow(&x, (&ovl_stdlib::sum(&x, 1), &ovl_stdlib::softmax(&x))),
    )?;

    // Any batch: rows scaled by a factor each, and their sums (inputs sharing the batch).
    let bundle = ovl::as_tensorflow_polymorphic(|batch| {
        let x = ovl::placeholder::<f32>("x", &[batch, 5]);
        let s = ovl::placeholder::<f32>("s", &[batch]);
        let y = scale_rows(&x, &s);
        ovl::as_tensorflow((&x, &s), (&y, &ovl_stdlib::sum(&y, 1))).name("scale_rows")
    })
    .write(dir.join("scale_rows_any_batch.json"))?;
    println!(
        "scale_rows_any_batch.json: {} kernel(s)",
        bundle.kernel_count()
    );

    // Gradients derived from the operators' IR: rows scaled by a factor each at any batch
    // (two input gradients: dx = s dy, ds = the rows' sums of x dy), and a layer norm along
    // rows (the stdlib's).
    let bundle = ovl::as_tensorflow_polymorphic(|batch| {
        let x = ovl::placeholder::<f32>("x", &[batch, 5]);
        let s = ovl::placeholder::<f32>("s", &[batch]);
        let dy = ovl::placeholder::<f32>("dy", &[batch, 5]);
        let y = scale_rows(&x, &s);
        let export = ovl::as_tensorflow((&x, &s), &y).name("scale_rows_grad");
        match ovl::backward(&[(&y, &dy)], &[&x, &s]) {
            Ok(g) => match (g.of(&x), g.of(&s)) {
                (Some(dx), Some(ds)) => export.gradient(&dy, (&dx, &ds)),
                _ => export,
            },
            Err(_) => export,
        }
    })
    .write(dir.join("scale_rows_grad.json"))?;
    if bundle.gradient_kernel_count() == 0 {
        return Err("scale_rows_grad: no gradient derived".into());
    }
    let x = ovl::placeholder::<f32>("x", &[6, 33]);
    let dy = ovl::placeholder::<f32>("dy", &[6, 33]);
    let y = ovl_stdlib::layernorm(&x, 1e-5);
    let dx = ovl::backward(&[(&y, &dy)], &[&x])?
        .of(&x)
        .ok_or("layernorm: x has no gradient")?;
    write(
        &dir,
        "layernorm_grad.json",
        ovl::as_tensorflow(&x, &y).gradient(&dy, &dx),
    )?;

    // For `ovl.jax`: a one-kernel op, a polymorphic program with an input shared by every row
    // (vmap and sharding), and a program that fails at run time.
    let x = ovl::placeholder::<f32>("x", &[16]);
    write(&dir, "add_one.json", ovl::as_tensorflow(&x, add_one(&x)))?;
    let bundle = ovl::as_tensorflow_polymorphic(|batch| {
        let x = ovl::placeholder::<f32>("x", &[batch, 5]);
        let w = ovl::placeholder::<f32>("w", &[5]);
        let dy = ovl::placeholder::<f32>("dy", &[batch, 5]);
        let y = scale_cols(&x, &w);
        let export = ovl::as_tensorflow((&x, &w), &y).name("scale_cols");
        match ovl::backward(&[(&y, &dy)], &[&x, &w]) {
            Ok(g) => match (g.of(&x), g.of(&w)) {
                (Some(dx), Some(dw)) => export.gradient(&dy, (&dx, &dw)),
                _ => export,
            },
            Err(_) => export,
        }
    })
    .write(dir.join("scale_cols_grad.json"))?;
    if bundle.gradient_kernel_count() == 0 {
        return Err("scale_cols_grad: no gradient derived".into());
    }
    let (m, x) = (
        ovl::placeholder::<bool>("m", &[6]),
        ovl::placeholder::<f32>("x", &[6]),
    );
    let dy = ovl::placeholder::<f32>("dy", &[6]);
    let (dm, dx) = masked_scale_grad(&m, &dy);
    write(
        &dir,
        "masked_scale_grad.json",
        ovl::as_tensorflow((&m, &x), masked_scale(&m, &x)).gradient(&dy, (&dm, &dx)),
    )?;
    let x = ovl::placeholder::<f32>("x", &[8]);
    write(
        &dir,
        "first_negative.json",
        ovl::as_tensorflow(&x, first_negative(&x)),
    )?;
    // A bool input with a gradient program (written by hand) at any batch: PyTorch gives the
    // bool input no gradient.
    let bundle = ovl::as_tensorflow_polymorphic(|batch| {
        let m = ovl::placeholder::<bool>("m", &[batch]);
        let x = ovl::placeholder::<f32>("x", &[batch]);
        let dy = ovl::placeholder::<f32>("dy", &[batch]);
        let (dx, dm) = masked_double_grad(&m, &dy);
        ovl::as_tensorflow((&m, &x), masked_double(&m, &x))
            .name("masked_double")
            .gradient(&dy, (&dm, &dx))
    })
    .write(dir.join("masked_double.json"))?;
    println!("masked_double.json: {} kernel(s)", bundle.kernel_count());

    // Two outputs with a derived gradient: the LSTM cell, 4 x 8.
    let z = ovl::placeholder::<f32>("z", &[4, 32]);
    let c = ovl::placeholder::<f32>("c", &[4, 8]);
    let (new_c, new_h) = lstm_cell(&z, &c);
    let d_new_c = ovl::placeholder::<f32>("d_new_c", &[4, 8]);
    let d_new_h = ovl::placeholder::<f32>("d_new_h", &[4, 8]);
    let grads = ovl::backward(&[(&new_c, &d_new_c), (&new_h, &d_new_h)], &[&z, &c])?;
    let (dz, dc) = (
        grads.of(&z).ok_or("lstm_cell: z has no gradient")?,
        grads.of(&c).ok_or("lstm_cell: c has no gradient")?,
    );
    write(
        &dir,
        "lstm_cell.json",
        ovl::as_tensorflow((&z, &c), (&new_c, &new_h))
            .name("lstm_cell")
            .gradient((&d_new_c, &d_new_h), (&dz, &dc)),
    )?;
    Ok(())
}

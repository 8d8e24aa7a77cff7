//! Exports the operators the Python tests of `ovl_tf` call, one bundle file each:
//! `cargo run -p ovl-tf-bridge --example make_bundles -- <directory>`.
//!
//! `make_bundles <directory> --lstm BxH [--lstm BxH ..]` exports only the LSTM cell (the one
//! the tests use) at batch `B` and hidden size `H`, as `lstm_cell_BxH.json` (for
//! `ovl-tf-bridge/python/bench_jacobian.py`).
//!
//! Each bundle's computation is restated with TensorFlow ops in the tests
//! (`ovl-tf-bridge/python/tests`), which compare the two.

use ovl::prelude::*;
use std::path::{Path, PathBuf};

/// Hand-written row kernels (`layernorm_rows` is exported below, written with no gradient: its
/// gradient is derived from its IR).
#[path = "../../tests/support/reductions.rs"]
mod reductions;

/// `2 x + b`, with `b` a constant baked into the program.
#[operator]
fn scale_add(x: Tensor<f32>, b: Tensor<f32>) -> Tensor<f32> {
    let [rows, cols] = x.dims::<2>();
    let p = position_in([rows, cols]);
    let out = output_like(&x);
    out[[p[0], p[1]]] = 2.0 * x[[p[0], p[1]]] + b[[p[0], p[1]]];
    out
}

/// `x * x`, elementwise.
#[operator]
fn square(x: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = x[[i]] * x[[i]];
    out
}

/// The gradient of `square`: `2 x dy`.
#[operator]
fn square_grad(x: Tensor<f32>, dy: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = 2.0 * x[[i]] * dy[[i]];
    out
}

/// `x * y` and its gradient (`dx = y dz`, `dy = x dz`): two inputs, two input gradients.
#[operator]
fn mul(x: Tensor<f32>, y: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = x[[i]] * y[[i]];
    out
}

/// A three-point stencil with weights `w`, zero outside the row, written with no gradient:
/// the derived gradient of `x` gathers from the neighbours, that of `w` sums over the row.
#[operator(gradient = auto)]
fn stencil3(x: Tensor<f32>, w: Tensor<f32>) -> Tensor<f32> {
    let n = x.dims::<1>()[0];
    let i = position_in([n])[0];
    let y = output_like(&x);
    let mut acc = variable(w[[1]] * x[[i]]);
    if i > 0 {
        acc += w[[0]] * x[[i - 1]];
    }
    if i < n - 1 {
        acc += w[[2]] * x[[i + 1]];
    }
    y[[i]] = acc;
    y
}

/// Elementwise minimum and maximum: one operator, two outputs.
#[operator]
fn min_max(a: Tensor<f32>, b: Tensor<f32>) -> (Tensor<f32>, Tensor<f32>) {
    let i = position_in(a.shape())[0];
    let lo = output_like(&a);
    let hi = output_like(&a);
    lo[[i]] = min(a[[i]], b[[i]]);
    hi[[i]] = max(a[[i]], b[[i]]);
    (lo, hi)
}

/// The gradient of `min_max`: each upstream gradient goes to the input it came from.
#[operator]
fn min_max_grad(
    a: Tensor<f32>,
    b: Tensor<f32>,
    dlo: Tensor<f32>,
    dhi: Tensor<f32>,
) -> (Tensor<f32>, Tensor<f32>) {
    let i = position_in(a.shape())[0];
    let da = output_like(&a);
    let db = output_like(&a);
    let a_low = a[[i]] <= b[[i]];
    da[[i]] = select(a_low, dlo[[i]], dhi[[i]]);
    db[[i]] = select(a_low, dhi[[i]], dlo[[i]]);
    (da, db)
}

#[operator]
fn sigmoid_op(x: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = sigmoid(x[[i]]);
    out
}

#[operator]
fn tanh_op(x: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = tanh(x[[i]]);
    out
}

#[operator]
fn add(a: Tensor<f32>, b: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(a.shape())[0];
    let out = output_like(&a);
    out[[i]] = a[[i]] + b[[i]];
    out
}

/// Running sum along each row (a staged loop: a producer the merger must not fuse into a
/// consumer that reads other columns).
#[operator]
fn cumsum_rows(x: Tensor<f32>) -> Tensor<f32> {
    let [rows, cols] = x.dims::<2>();
    let row = position_in([rows])[0];
    let out = output_like(&x);
    let mut acc = variable(0.0f32);
    for j in 0..cols {
        acc += x[[row, j]];
        out[[row, j]] = acc;
    }
    out
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

#[operator]
fn shift_i64(x: Tensor<i64>) -> Tensor<i64> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = x[[i]] * 1024 - 1;
    out
}

/// Wrapping `u8` arithmetic.
#[operator]
fn wrap_u8(x: Tensor<u8>) -> Tensor<u8> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = x[[i]] + 200;
    out
}

/// Whether each element is positive: a bool output from an f32 input.
#[operator]
fn positive(x: Tensor<f32>) -> Tensor<bool> {
    let i = position_in(x.shape())[0];
    let out = output(x.shape());
    out[[i]] = x[[i]] > 0.0;
    out
}

/// `x + 1`: the trivial operator of the per-call overhead measurement.
#[operator]
fn add_one(x: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = x[[i]] + 1.0;
    out
}

fn write(dir: &Path, file: &str, export: ovl::TfExport) -> Result<(), ovl::Error> {
    let bundle = export.write(dir.join(file))?;
    println!("{file}: {} kernel(s)", bundle.kernel_count());
    Ok(())
}

/// Writes the LSTM cell of [`lstm_cell`] at `batch` x `hidden` as `file`.
fn write_lstm_cell(
    dir: &Path,
    file: &str,
    batch: usize,
    hidden: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    let bundle = lstm_cell(batch, hidden)?.write(dir.join(file))?;
    println!(
        "{file}: {} forward kernel(s), {} gradient kernel(s)",
        bundle.kernel_count(),
        bundle.gradient_kernel_count()
    );
    Ok(())
}

/// `BxH` as (B, H).
fn parse_size(text: &str) -> Option<(usize, usize)> {
    let (b, h) = text.split_once('x')?;
    Some((b.parse().ok()?, h.parse().ok()?))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let usage = "usage: make_bundles <output directory> [--lstm BxH ..]";
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = PathBuf::from(args.first().ok_or(usage)?);
    std::fs::create_dir_all(&dir)?;
    if args.len() > 1 {
        for pair in args[1..].chunks(2) {
            let size = match pair {
                [flag, size] if flag == "--lstm" => parse_size(size).ok_or(usage)?,
                _ => return Err(usage.into()),
            };
            let file = format!("lstm_cell_{}x{}.json", size.0, size.1);
            write_lstm_cell(&dir, &file, size.0, size.1)?;
        }
        return Ok(());
    }

    // A constant baked into the program.
    let x = ovl::placeholder::<f32>("x", &[4, 5]);
    let b = ndarray::Array2::from_shape_fn((4, 5), |(r, c)| r as f32 - 0.5 * c as f32);
    write(
        &dir,
        "scale_add.json",
        ovl::as_tensorflow(&x, scale_add(&x, &b)),
    )?;

    // Gradients.
    let x = ovl::placeholder::<f32>("x", &[6]);
    let dy = ovl::placeholder::<f32>("dy", &[6]);
    write(
        &dir,
        "square.json",
        ovl::as_tensorflow(&x, square(&x)).gradient(&dy, square_grad(&x, &dy)),
    )?;
    let (x, y) = (
        ovl::placeholder::<f32>("x", &[5]),
        ovl::placeholder::<f32>("y", &[5]),
    );
    let dz = ovl::placeholder::<f32>("dz", &[5]);
    write(
        &dir,
        "mul.json",
        ovl::as_tensorflow((&x, &y), mul(&x, &y)).gradient(&dz, (&mul(&y, &dz), &mul(&x, &dz))),
    )?;
    // No gradient: differentiating through it is an error.
    let x = ovl::placeholder::<f32>("x", &[6]);
    write(
        &dir,
        "square_no_grad.json",
        ovl::as_tensorflow(&x, square(&x)),
    )?;

    // Derived gradients (operators written without one).
    let x = ovl::placeholder::<f32>("x", &[6, 33]);
    let dy = ovl::placeholder::<f32>("dy", &[6, 33]);
    let y = reductions::layernorm_rows(&x, 1e-5);
    let dx = ovl::backward(&[(&y, &dy)], &[&x])?
        .of(&x)
        .ok_or("layernorm_rows: x has no gradient")?;
    write(
        &dir,
        "layernorm_derived.json",
        ovl::as_tensorflow(&x, &y).gradient(&dy, &dx),
    )?;
    let (x, w) = (
        ovl::placeholder::<f32>("x", &[17]),
        ovl::placeholder::<f32>("w", &[3]),
    );
    let dy = ovl::placeholder::<f32>("dy", &[17]);
    let y = stencil3(&x, &w);
    let grads = ovl::backward(&[(&y, &dy)], &[&x, &w])?;
    let (dx, dw) = (
        grads.of(&x).ok_or("stencil3: x has no gradient")?,
        grads.of(&w).ok_or("stencil3: w has no gradient")?,
    );
    write(
        &dir,
        "stencil_derived.json",
        ovl::as_tensorflow((&x, &w), &y).gradient(&dy, (&dx, &dw)),
    )?;

    // Several outputs.
    let (a, b) = (
        ovl::placeholder::<f32>("a", &[7]),
        ovl::placeholder::<f32>("b", &[7]),
    );
    let (lo, hi) = min_max(&a, &b);
    let (dlo, dhi) = (
        ovl::placeholder::<f32>("dlo", &[7]),
        ovl::placeholder::<f32>("dhi", &[7]),
    );
    let (da, db) = min_max_grad(&a, &b, &dlo, &dhi);
    write(
        &dir,
        "min_max.json",
        ovl::as_tensorflow((&a, &b), (&lo, &hi)).gradient((&dlo, &dhi), (&da, &db)),
    )?;

    // A graph of several operators, fused: tanh(x) * sigmoid(z) + x.
    let (x, z) = (
        ovl::placeholder::<f32>("x", &[64]),
        ovl::placeholder::<f32>("z", &[64]),
    );
    let y = add(mul(tanh_op(&x), sigmoid_op(&z)), &x);
    write(&dir, "fused_chain.json", ovl::as_tensorflow((&x, &z), &y))?;
    // Two cumsums in a row cannot fuse: two kernels and an intermediate. Also outputs the
    // intermediate twice (written in place once, copied once).
    let x = ovl::placeholder::<f32>("x", &[3, 8]);
    let c1 = cumsum_rows(&x);
    let c2 = cumsum_rows(&c1);
    write(
        &dir,
        "cumsum_twice.json",
        ovl::as_tensorflow(&x, (&c2, &c1, &c1)),
    )?;

    // Several dtypes.
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
    let x = ovl::placeholder::<i64>("x", &[9]);
    write(
        &dir,
        "shift_i64.json",
        ovl::as_tensorflow(&x, shift_i64(&x)),
    )?;
    let x = ovl::placeholder::<u8>("x", &[9]);
    write(&dir, "wrap_u8.json", ovl::as_tensorflow(&x, wrap_u8(&x)))?;
    let x = ovl::placeholder::<f32>("x", &[9]);
    write(&dir, "positive.json", ovl::as_tensorflow(&x, positive(&x)))?;

    // The per-call overhead measurement.
    let x = ovl::placeholder::<f32>("x", &[4]);
    write(&dir, "add_one.json", ovl::as_tensorflow(&x, add_one(&x)))?;
    let x = ovl::placeholder::<f32>("x", &[16]);
    write(&dir, "add_one_16.json", ovl::as_tensorflow(&x, add_one(&x)))?;
    // Large enough to be split over several threads.
    let x = ovl::placeholder::<f32>("x", &[1 << 20]);
    write(
        &dir,
        "add_one_big.json",
        ovl::as_tensorflow(&x, add_one(&x)),
    )?;
    // A dense layer from ovl-stdlib, `tanh(x @ w + b)`, for `ovl_tf.Layer` (w and b become its
    // weights); its gradient program built by `ovl::backward`.
    let dense = dense_tanh(8)?;
    write(&dir, "dense_tanh.json", dense.clone())?;
    // The same and the LSTM cell for any batch size (the batch is `None` in TensorFlow).
    for (file, export) in [
        ("dense_tanh_any_batch.json", dense_tanh as fn(usize) -> _),
        ("lstm_cell_any_batch.json", |batch| lstm_cell(batch, 8)),
    ] {
        let bundle = ovl::as_tensorflow_polymorphic(export).write(dir.join(file))?;
        println!(
            "{file}: {} forward kernel(s), {} gradient kernel(s)",
            bundle.kernel_count(),
            bundle.gradient_kernel_count()
        );
    }
    // The same carrying the compiled libraries of this machine (serving without a compiler),
    // and as if exported on another machine: the libraries' target key is not this one's.
    let embedded = dense
        .embed_libraries(true)
        .write(dir.join("dense_tanh_embedded.json"))?;
    println!(
        "dense_tanh_embedded.json: {} + {} librar(ies)",
        embedded.program.libraries.len(),
        embedded.gradient.as_ref().map_or(0, |g| g.libraries.len())
    );
    let mut other = embedded;
    for program in std::iter::once(&mut other.program).chain(other.gradient.as_mut()) {
        for library in &mut program.libraries {
            library.target_key = "0123456789abcdef0123456789abcdef".into();
            library.target = "another machine (a test of make_bundles)".into();
        }
    }
    other.write(dir.join("dense_tanh_other_machine.json"))?;
    write_lstm_cell(&dir, "lstm_cell.json", 4, 8)?;
    Ok(())
}

/// `tanh(x @ w + b)` for a batch of `batch` rows of 3 features, 4 units, with its gradient.
fn dense_tanh(batch: usize) -> Result<ovl::TfExport, Box<dyn std::error::Error>> {
    let (features, units) = (3, 4);
    let x = ovl::placeholder::<f32>("x", &[batch, features]);
    let w = ovl::placeholder::<f32>("w", &[features, units]);
    let b = ovl::placeholder::<f32>("b", &[units]);
    let y = ovl_stdlib::tanh(ovl_stdlib::add(ovl_stdlib::matmul(&x, &w), &b));
    let dy = ovl::placeholder::<f32>("dy", &[batch, units]);
    let grads = ovl::backward(&[(&y, &dy)], &[&x, &w, &b])?;
    let of = |t: &ovl::Lazy<f32>| grads.of(t).ok_or("an input of dense_tanh has no gradient");
    let (dx, dw, db) = (of(&x)?, of(&w)?, of(&b)?);
    Ok(ovl::as_tensorflow((&x, &w, &b), &y)
        .name("dense_tanh")
        .gradient(&dy, (&dx, &dw, &db)))
}

/// The LSTM cell from ovl-stdlib for `batch` rows of hidden size `hidden` (`z`: the
/// pre-activations of the four gates, `c`: the cell state; outputs `new_c`, `new_h`), its
/// gradient program built by `ovl::backward`.
fn lstm_cell(batch: usize, hidden: usize) -> Result<ovl::TfExport, Box<dyn std::error::Error>> {
    let z = ovl::placeholder::<f32>("z", &[batch, 4 * hidden]);
    let c = ovl::placeholder::<f32>("c", &[batch, hidden]);
    let gates = ovl_stdlib::split(&z, 1, 4);
    let forget_bias = ndarray::arr0(1.0f32);
    let new_c = ovl_stdlib::add(
        ovl_stdlib::mul(
            &c,
            ovl_stdlib::sigmoid(ovl_stdlib::add(&gates[2], forget_bias)),
        ),
        ovl_stdlib::mul(ovl_stdlib::sigmoid(&gates[0]), ovl_stdlib::tanh(&gates[1])),
    );
    let new_h = ovl_stdlib::mul(ovl_stdlib::tanh(&new_c), ovl_stdlib::sigmoid(&gates[3]));
    let d_new_c = ovl::placeholder::<f32>("d_new_c", &[batch, hidden]);
    let d_new_h = ovl::placeholder::<f32>("d_new_h", &[batch, hidden]);
    let grads = ovl::backward(&[(&new_c, &d_new_c), (&new_h, &d_new_h)], &[&z, &c])?;
    let (dz, dc) = (
        grads.of(&z).ok_or("z has no gradient")?,
        grads.of(&c).ok_or("c has no gradient")?,
    );
    Ok(ovl::as_tensorflow((&z, &c), (&new_c, &new_h))
        .name("lstm_cell")
        .gradient((&d_new_c, &d_new_h), (&dz, &dc)))
}

//! The main demo: defines operators in Rust, compiles them to C++ through the operator cache,
//! runs them on the CPU, checks them against the reference interpreter and prints timings.
//!
//! Run with `cargo run --release --example demo`.

use ndarray::{Array1, Array2};
use ovl::prelude::*;
use std::time::Instant;

/// Running sum along each row, one worker per row (the README's first example).
#[operator]
fn cumsum_rows(x: Tensor<f32>) -> Tensor<f32> {
    let [rows, cols] = x.dims::<2>(); // shapes are static: plain usize at trace time
    let row = position_in([rows])[0]; // the workgroup: one worker per row
    let out = output_like(&x);
    let mut acc = variable(0.0f32); // worker-local mutable scalar
    for j in 0..cols {
        // staged loop (bounds may be static or staged)
        acc += x[[row, j]];
        out[[row, j]] = acc; // a write to an output
    }
    out
}

/// `expm1` for small `|x|`, `log1p`-based otherwise: if / else if / else on staged conditions.
#[operator]
fn soft_step(x: Tensor<f64>) -> Tensor<f64> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    let v = x[[i]];
    if v < -1.0 {
        out[[i]] = -log1p(-v);
    } else if v < 1.0 {
        out[[i]] = expm1(v);
    } else {
        out[[i]] = v * 2.0;
    }
    out
}

/// The triad `a + k * b`, elementwise.
#[operator]
fn triad(a: Tensor<f32>, b: Tensor<f32>, k: f32) -> Tensor<f32> {
    let i = position_in(a.shape())[0];
    let out = output_like(&a);
    out[[i]] = a[[i]] + k * b[[i]];
    out
}

fn main() -> Result<(), ovl::Error> {
    let cpu = Options::cpu();
    let interp = Options::interpreter();

    // 1. cumsum_rows, the README's first example.
    let x = Array2::from_shape_fn((4, 6), |(r, c)| (r * 6 + c) as f32 * 0.5);
    let start = Instant::now();
    let y = evaluate_with(&cumsum_rows(&x), &cpu)?;
    let first = start.elapsed();
    let start = Instant::now();
    let y2 = evaluate_with(&cumsum_rows(&x), &cpu)?;
    let second = start.elapsed();
    assert_eq!(y, y2);
    let reference = evaluate_with(&cumsum_rows(&x), &interp)?;
    println!("cumsum_rows of\n{x}\n=\n{y}");
    println!(
        "  C++ == interpreter: {}; first evaluate (trace + compile or cache load) {first:.2?}, second (warm) {second:.2?}\n",
        y == reference
    );

    // 2. if / else if / else.
    let v = Array1::from(vec![-3.0f64, -0.5, 0.0, 1e-9, 0.75, 4.0]);
    let s = evaluate(&soft_step(&v))?;
    println!("soft_step({v}) = {s:.6}\n");

    // 3. Bandwidth of an elementwise operator, against the same loop written in Rust.
    let n = 1 << 24;
    let a = Lazy::from(Array1::from_shape_fn(n, |i| i as f32));
    let b = Lazy::from(Array1::from_shape_fn(n, |i| (n - i) as f32));
    let (out, profile) = profile(&triad(&a, &b, 1.5), &cpu, 10)?;
    let best = profile.operators[0].min();
    let gbs = (3 * 4 * n) as f64 / best.as_secs_f64() / 1e9;
    println!("triad over {n} f32: best kernel time {best:.2?} = {gbs:.1} GB/s");
    println!("{profile}");
    assert_eq!(out[[10]], 10.0 + 1.5 * (n - 10) as f32);

    println!(
        "IR of cumsum_rows:\n{}",
        ovl::ir_tools::to_text(cumsum_rows(&x).operator_ir().expect("an operator"))
    );
    println!("operator cache: {}", ovl_codegen_cache_dir());
    Ok(())
}

fn ovl_codegen_cache_dir() -> String {
    ovl::cache_dir().display().to_string()
}

//! Reductions down columns (kernels whose workers each read down a column, which the C++
//! backend runs 64 neighbouring workers at a time) and `matmul` (a library call: the `gemm`
//! crate), against plain Rust loops over the same data on the same number of threads, in one
//! process, compiled once (`ovl::compile`, `run_into`): `sum(x, 0)` next to `sum(x, 1)` (the
//! same bytes read along rows), and `matmul` next to an `i, k, j` loop that the Rust compiler
//! vectorizes.
//!
//! Run with `cargo bench --bench columns` (`-- --quick` for a short run).

#[path = "common/mod.rs"]
mod common;

use common::time_calls;
use ndarray::{Array2, ArrayD, IxDyn};
use ovl::prelude::*;
use std::convert::Infallible;
use std::time::Duration;

/// Column sums in plain Rust: each thread adds its rows into its own vector of sums, then the
/// vectors are added.
fn column_sums(x: &[f32], cols: usize, threads: usize) -> Vec<f32> {
    let rows = x.len() / cols;
    let chunk = rows.div_ceil(threads);
    let parts: Vec<Vec<f32>> = std::thread::scope(|s| {
        let handles: Vec<_> = x
            .chunks(chunk * cols)
            .map(|part| {
                s.spawn(move || {
                    let mut acc = vec![0.0f32; cols];
                    for row in part.chunks(cols) {
                        for (a, v) in acc.iter_mut().zip(row) {
                            *a += v;
                        }
                    }
                    acc
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut total = vec![0.0f32; cols];
    for p in parts {
        for (t, v) in total.iter_mut().zip(p) {
            *t += v;
        }
    }
    total
}

/// `a [m, k] x b [k, n]` in plain Rust, rows of the result split over threads, `i, k, j` order.
fn matmul_loop(a: &[f32], b: &[f32], c: &mut [f32], (k, n): (usize, usize), threads: usize) {
    let m = c.len() / n;
    let chunk = m.div_ceil(threads);
    std::thread::scope(|s| {
        for (t, rows) in c.chunks_mut(chunk * n).enumerate() {
            s.spawn(move || {
                for (r, out) in rows.chunks_mut(n).enumerate() {
                    let i = t * chunk + r;
                    out.fill(0.0);
                    for q in 0..k {
                        let av = a[i * k + q];
                        for (o, bv) in out.iter_mut().zip(&b[q * n..(q + 1) * n]) {
                            *o += av * bv;
                        }
                    }
                }
            });
        }
    });
}

/// The best time of `out` compiled once (`ovl::compile`) and run into a reused array.
fn time_compiled(
    feeds: &[Lazy<f32>],
    out: &Lazy<f32>,
    data: &[Lazy<f32>],
    reps: usize,
) -> Result<Duration, ovl::Error> {
    let step = ovl::compile(&feeds.to_vec(), &vec![out.clone()], &Options::cpu())?;
    let mut dest = vec![ArrayD::<f32>::zeros(IxDyn(out.shape()))];
    Ok(time_calls(1, reps, || step.run_into(data, &mut dest))?.best)
}

/// The best time of a plain Rust loop.
fn time_loop(reps: usize, mut f: impl FnMut()) -> Duration {
    let timing = time_calls::<Infallible>(1, reps, || {
        f();
        Ok(())
    });
    match timing {
        Ok(t) => t.best,
        Err(never) => match never {},
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let quick = std::env::args().any(|a| a == "--quick");
    let reps = if quick { 5 } else { 30 };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let ms = |d: Duration| d.as_secs_f64() * 1e3;

    let (rows, cols) = (1024usize, 4096usize);
    let x = Array2::from_shape_fn((rows, cols), |(i, j)| ((i * 7 + j) % 13) as f32 * 0.1);
    let xs = x.as_slice().expect("standard layout").to_vec();
    let px = ovl::placeholder::<f32>("x", &[rows, cols]);
    let data = [Lazy::from(x.into_dyn())];
    let down = time_compiled(
        std::slice::from_ref(&px),
        &ovl_stdlib::sum(&px, 0),
        &data,
        reps,
    )?;
    let along = time_compiled(
        std::slice::from_ref(&px),
        &ovl_stdlib::sum(&px, 1),
        &data,
        reps,
    )?;
    let rust = time_loop(reps, || {
        std::hint::black_box(column_sums(&xs, cols, threads));
    });
    println!("f32 [{rows}, {cols}], {threads} threads, best of {reps}:");
    println!("  sum(x, 0), down the columns:  {:8.3} ms", ms(down));
    println!("  sum(x, 1), along the rows:    {:8.3} ms", ms(along));
    println!("  plain Rust column sums:       {:8.3} ms", ms(rust));
    println!(
        "  sum(x, 0) / plain Rust: {:.2}x, sum(x, 0) / sum(x, 1): {:.2}x",
        ms(down) / ms(rust),
        ms(down) / ms(along)
    );

    let (m, k, n) = (256usize, 512usize, 512usize);
    let a = Array2::from_shape_fn((m, k), |(i, j)| ((i * 7 + j) % 13) as f32 * 0.1);
    let b = Array2::from_shape_fn((k, n), |(i, j)| ((i * 3 + j) % 11) as f32 * 0.1);
    let (av, bv) = (
        a.as_slice().unwrap().to_vec(),
        b.as_slice().unwrap().to_vec(),
    );
    let (pa, pb) = (
        ovl::placeholder::<f32>("a", &[m, k]),
        ovl::placeholder::<f32>("b", &[k, n]),
    );
    let data = [Lazy::from(a.into_dyn()), Lazy::from(b.into_dyn())];
    let mm = time_compiled(
        &[pa.clone(), pb.clone()],
        &ovl_stdlib::matmul(&pa, &pb),
        &data,
        reps,
    )?;
    let mut c = vec![0.0f32; m * n];
    let rust = time_loop(reps, || matmul_loop(&av, &bv, &mut c, (k, n), threads));
    let gflops = |d: Duration| 2.0 * (m * k * n) as f64 / d.as_secs_f64() / 1e9;
    println!("matmul [{m}, {k}] x [{k}, {n}] f32:");
    println!(
        "  ovl_stdlib::matmul:  {:8.3} ms ({:.1} GFLOP/s)",
        ms(mm),
        gflops(mm)
    );
    println!(
        "  plain Rust i-k-j:    {:8.3} ms ({:.1} GFLOP/s)",
        ms(rust),
        gflops(rust)
    );
    println!("  matmul / plain Rust: {:.2}x", ms(mm) / ms(rust));
    Ok(())
}

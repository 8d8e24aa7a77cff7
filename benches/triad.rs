//! Bandwidth of an `#[operator]` elementwise `a + 1.5 * b` through `evaluate` on the C++ backend
//! (warm cache) against a plain Rust triad loop on the same threads, in one process, plus the
//! per-call overhead of `evaluate` on a tiny tensor.
//!
//! `evaluate` returns a fresh output array each call, and the first touch of fresh memory costs
//! page faults (the kernel zeroes every page) that the loop, writing into a warm buffer, does not
//! pay. `evaluate_into` writes into a reused array, like the loop: compare that line with the loop
//! for the kernel's own bandwidth.
//!
//! Run with `cargo bench --bench triad` (`-- --quick` for a short run).

use ndarray::Array1;
use ovl::prelude::*;
use std::time::{Duration, Instant};

#[operator]
fn triad(a: Tensor<f32>, b: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(a.shape())[0];
    let out = output_like(&a);
    out[[i]] = a[[i]] + 1.5 * b[[i]];
    out
}

/// The baseline: the same loop in Rust, split over `threads` scoped threads.
fn triad_loop(a: &[f32], b: &[f32], c: &mut [f32], threads: usize) {
    let chunk = a.len().div_ceil(threads);
    std::thread::scope(|s| {
        for ((a, b), c) in a
            .chunks(chunk)
            .zip(b.chunks(chunk))
            .zip(c.chunks_mut(chunk))
        {
            s.spawn(move || {
                for ((x, y), z) in a.iter().zip(b).zip(c.iter_mut()) {
                    *z = x + 1.5 * y;
                }
            });
        }
    });
}

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

fn median_of(reps: usize, mut f: impl FnMut()) -> Duration {
    let mut v: Vec<Duration> = (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    v.sort();
    v[v.len() / 2]
}

fn main() -> Result<(), ovl::Error> {
    let quick = std::env::args().any(|a| a == "--quick");
    let n: usize = 16 << 20;
    let reps = if quick { 5 } else { 20 };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let bytes = (3 * n * std::mem::size_of::<f32>()) as f64;

    let a_host: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
    let b_host: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
    let mut c_host = vec![0.0f32; n];
    let a = Lazy::from(Array1::from(a_host.clone()));
    let b = Lazy::from(Array1::from(b_host.clone()));

    // Warm up: compile into the cache, fault in the pages.
    let options = Options::cpu();
    let warm = evaluate_with(&triad(&a, &b), &options)?;
    for i in [0, 1, n / 2, n - 1] {
        assert_eq!(warm[[i]], a_host[i] + 1.5 * b_host[i]);
    }
    triad_loop(&a_host, &b_host, &mut c_host, threads);

    // Interleave the two measurements so that machine noise hits both alike.
    let mut loop_best = Duration::MAX;
    let mut op_best = Duration::MAX;
    let mut into_best = Duration::MAX;
    let mut kernel_best = Duration::MAX;
    let mut reused = ndarray::ArrayD::<f32>::zeros(ndarray::IxDyn(&[n]));
    for _ in 0..3 {
        loop_best = loop_best.min(best_of(reps, || {
            triad_loop(&a_host, &b_host, &mut c_host, threads)
        }));
        op_best = op_best.min(best_of(reps, || {
            let out = evaluate_with(&triad(&a, &b), &options).expect("evaluate");
            std::hint::black_box(out);
        }));
        into_best = into_best.min(best_of(reps, || {
            evaluate_into(&triad(&a, &b), &mut reused, &options).expect("evaluate_into");
        }));
        let (_, p) = profile(&triad(&a, &b), &options, reps)?;
        kernel_best = kernel_best.min(p.operators[0].min());
    }
    let gb = |t: Duration| bytes / t.as_secs_f64() / 1e9;
    println!("triad over {n} f32 elements, {threads} threads, best of {reps} x 3");
    println!(
        "  plain Rust loop                   {:>9.3?}  {:6.1} GB/s",
        loop_best,
        gb(loop_best)
    );
    println!(
        "  #[operator] through evaluate      {:>9.3?}  {:6.1} GB/s  ({:.0}% of the loop)",
        op_best,
        gb(op_best),
        100.0 * gb(op_best) / gb(loop_best)
    );
    println!(
        "  #[operator] through evaluate_into {:>9.3?}  {:6.1} GB/s  ({:.0}% of the loop)",
        into_best,
        gb(into_best),
        100.0 * gb(into_best) / gb(loop_best)
    );
    println!(
        "  #[operator] kernel, fresh output  {:>9.3?}  {:6.1} GB/s  ({:.0}% of the loop)",
        kernel_best,
        gb(kernel_best),
        100.0 * gb(kernel_best) / gb(loop_best)
    );

    // Per-call overhead: a tiny tensor, warm cache, traced and evaluated each call.
    let tiny_a = Lazy::from(Array1::from(vec![1.0f32; 16]));
    let tiny_b = Lazy::from(Array1::from(vec![2.0f32; 16]));
    evaluate_with(&triad(&tiny_a, &tiny_b), &options)?;
    let calls = if quick { 2_000 } else { 20_000 };
    let per_call = median_of(5, || {
        for _ in 0..calls {
            std::hint::black_box(
                evaluate_with(&triad(&tiny_a, &tiny_b), &options).expect("evaluate"),
            );
        }
    }) / calls as u32;
    for i in [0, 1, n / 2, n - 1] {
        assert_eq!(reused[[i]], a_host[i] + 1.5 * b_host[i]);
    }
    println!("per-call overhead of evaluate (16 elements, warm cache): {per_call:.2?}");
    Ok(())
}

//! The CPU GEMM kernels alone (`ovl_runtime::gemm::matmul`, what a library call runs): f32 and
//! f64 products at the three square sizes of `benches/matmul.rs` and the products of an LSTM
//! layer's step (B = 20, H = 650 and B = 64, H = 1024), in GFLOP/s, best of the repetitions,
//! on every core of ovl's pool and on one thread; and, for scale, the `gemm` crate called
//! directly on one thread (what ovl runs where its own kernels do not apply, cut into one block
//! of C per thread).
//!
//! `cargo bench -p ovl-runtime --bench gemm [-- --quick]`

use std::time::Instant;

const SHAPES: [(usize, usize, usize); 5] = [
    (512, 512, 512),
    (1024, 1024, 1024),
    (2048, 2048, 2048),
    (20, 650, 2600),
    (64, 1024, 4096),
];

fn values<T: From<f32>>(n: usize, seed: usize) -> Vec<T> {
    (0..n)
        .map(|i| T::from(((i * 7 + seed) % 17) as f32 * 0.1 - 0.8))
        .collect()
}

/// Best seconds of `reps` calls (after one warm-up call).
fn best(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    (0..reps)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn row<T>(name: &str, (m, k, n): (usize, usize, usize), reps: usize)
where
    T: ovl_runtime::gemm::Element + From<f32>,
{
    let (a, b) = (values::<T>(m * k, 1), values::<T>(k * n, 2));
    let mut c = vec![T::from(0.0); m * n];
    let flops = 2.0 * (m * k * n) as f64;
    let mut ovl = |threads| {
        flops
            / best(reps, || {
                ovl_runtime::gemm::matmul(&a, &b, &mut c, (m, k, n), threads).expect("sizes")
            })
            / 1e9
    };
    let (all, one) = (ovl(0), ovl(1));
    let mut c = vec![T::from(0.0); m * n];
    let crate_one = flops
        / best(reps, || {
            // SAFETY: the three buffers hold the row-major matrices of these sizes.
            unsafe {
                gemm::gemm(
                    m,
                    n,
                    k,
                    c.as_mut_ptr(),
                    1,
                    n as isize,
                    false,
                    a.as_ptr(),
                    1,
                    k as isize,
                    b.as_ptr(),
                    1,
                    n as isize,
                    T::from(0.0),
                    T::from(1.0),
                    false,
                    false,
                    false,
                    gemm::Parallelism::None,
                )
            }
        })
        / 1e9;
    println!("| {name} | {m} x {k} x {n} | {all:.1} | {one:.1} | {crate_one:.1} |");
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let reps = if quick { 3 } else { 10 };
    let avx512 = std::arch::is_x86_feature_detected!("avx512f");
    println!(
        "GEMM kernels alone, GFLOP/s (best of {reps}); {} threads; AVX-512F: {avx512}",
        ovl_runtime::cpu_count()
    );
    println!("| dtype | m x k x n | ovl, all threads | ovl, 1 thread | gemm crate, 1 thread |");
    println!("|---|---|---|---|---|");
    for shape in SHAPES {
        row::<f32>("f32", shape, reps);
    }
    for shape in SHAPES {
        row::<f64>("f64", shape, reps);
    }
}

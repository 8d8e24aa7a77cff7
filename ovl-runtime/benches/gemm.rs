//! The CPU GEMM kernels alone (`ovl_runtime::gemm::matmul`, what a library call runs): f32 and
//! f64 products at the three square sizes of `benches/matmul.rs` and the LSTM layer's products
//! (B = 20, H = 650: a step's `h U` and the stacked `x W` of 35 steps; B = 64, H = 1024), in
//! GFLOP/s, best of the repetitions, on every core of ovl's pool: ovl with every kernel the CPU
//! has, ovl held to AVX2 (`ovl_runtime::gemm::matmul_for`, as under `OVL_CPU_ISA=avx2`), and
//! the `gemm` crate alone (what ovl runs where its own kernels do not apply, cut into one block
//! of C per thread).
//!
//! `cargo bench -p ovl-runtime --bench gemm [-- --quick] [--threads N]`

use std::time::Instant;

const SHAPES: [(usize, usize, usize); 7] = [
    (512, 512, 512),
    (1024, 1024, 1024),
    (2048, 2048, 2048),
    (20, 650, 2600),
    (700, 650, 2600),
    (64, 1024, 4096),
    (1280, 1024, 4096),
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

fn row<T>(name: &str, (m, k, n): (usize, usize, usize), reps: usize, threads: usize)
where
    T: ovl_runtime::gemm::Element + From<f32>,
{
    use ovl_runtime::gemm::{matmul_crate, matmul_for};
    use ovl_runtime::isa::CpuIsa;
    let (a, b) = (values::<T>(m * k, 1), values::<T>(k * n, 2));
    let mut c = vec![T::from(0.0); m * n];
    let flops = 2.0 * (m * k * n) as f64;
    let mut gflops = |f: &mut dyn FnMut(&mut [T]) -> Result<(), String>| {
        flops / best(reps, || f(&mut c).expect("sizes")) / 1e9
    };
    // Alternated per repetition round, so that other load weighs on the three alike.
    let (mut native, mut avx2, mut krate) = (0f64, 0f64, 0f64);
    for _ in 0..3 {
        native = native.max(gflops(&mut |c| {
            matmul_for(CpuIsa::Native, &a, &b, c, (m, k, n), 0)
        }));
        avx2 = avx2.max(gflops(&mut |c| {
            matmul_for(CpuIsa::Avx2, &a, &b, c, (m, k, n), 0)
        }));
        krate = krate.max(gflops(&mut |c| matmul_crate(&a, &b, c, (m, k, n), threads)));
    }
    println!("| {name} | {m} x {k} x {n} | {native:.1} | {avx2:.1} | {krate:.1} |");
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let reps = if quick { 3 } else { 10 };
    // `--threads N`: N threads of ovl's pool (default: one per core).
    let args: Vec<String> = std::env::args().collect();
    let threads = args
        .iter()
        .position(|a| a == "--threads")
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(0);
    let avx512 = std::arch::is_x86_feature_detected!("avx512f");
    println!(
        "GEMM kernels alone, GFLOP/s (best of 3 rounds of {reps}); {} threads; AVX-512F: {avx512}",
        if threads == 0 {
            ovl_runtime::cpu_count()
        } else {
            threads
        }
    );
    println!(
        "| dtype | m x k x n | ovl, every kernel the CPU has | ovl held to AVX2 | the `gemm` crate alone |"
    );
    println!("|---|---|---|---|---|");
    for shape in SHAPES {
        row::<f32>("f32", shape, reps, threads);
    }
    for shape in SHAPES {
        row::<f64>("f64", shape, reps, threads);
    }
}

//! Matrix products (issue 32, item 6; issue 51): `ovl_stdlib::matmul` on f32 square matrices of
//! 512, 1024 and 2048 and the LSTM layer's products ([`SHAPES`]), recorded once on placeholders
//! (`ovl::compile`) and run with new data, in GFLOP/s (2 m k n flops per product, best of the
//! repetitions). `scripts/bench-matmul.sh` runs it and
//! NumPy on the same data sizes in the same minutes and writes the table.
//!
//! `cargo bench --bench matmul -- [--quick] [--out DIR]` writes `DIR/ovl.json`.
//! `cargo bench --bench matmul -- --shape M,K,N[,nt|tn]` times one f32 product `[M, K] x [K, N]`
//! instead (`nt`: B stored `[N, K]`; `tn`: A stored `[K, M]`), the kernels alone, and writes
//! nothing.

mod common;

use common::{machine, time_calls, Args};
use ndarray::{ArrayD, IxDyn};
use ovl::{Lazy, Options};
use serde_json::json;

fn main() {
    let args = Args::parse("target/matmul-bench");
    std::fs::create_dir_all(&args.out_dir).expect("output directory");
    let reps = if args.quick { 5 } else { 20 };
    if let Some(shape) = args.value("--shape") {
        return time_shape(&shape, reps);
    }
    println!("matmul f32, ovl compiled once (CPU), {}", machine());
    let mut rows = Vec::new();
    for &(m, k, n, form) in SHAPES {
        let (gflops, median) = gflops(
            (m, k, n, form),
            reps.max(2048 / m.min(n).max(1) * 3).min(60),
        );
        println!("{m}x{k}x{n} {form}: {gflops:.1} GFLOP/s (median {median:.1})");
        rows.push(json!({
            "m": m, "k": k, "n": n, "form": form,
            "gflops": gflops, "median_gflops": median,
        }));
    }
    let report = json!({ "machine": machine(), "sizes": rows });
    let path = args.out_dir.join("ovl.json");
    std::fs::write(&path, serde_json::to_string_pretty(&report).expect("json")).expect("write");
    println!("wrote {}", path.display());
}

/// The products timed (m, k, n, form; `nt`: B stored `[n, k]`, `tn`: A stored `[k, m]`): the
/// three squares, then the LSTM layer's at T = 35, B = 20, H = 650 (a step's `h U`, the stacked
/// `x W` of all steps, the backward's `dz Uᵀ`, the weight gradient `xᵀ dz`) and at T = 20,
/// B = 64, H = 1024 (`h U`, stacked `x W`). `benches/matmul_numpy.py` times the same list.
const SHAPES: &[(usize, usize, usize, &str)] = &[
    (512, 512, 512, "nn"),
    (1024, 1024, 1024, "nn"),
    (2048, 2048, 2048, "nn"),
    (20, 650, 2600, "nn"),
    (700, 650, 2600, "nn"),
    (20, 2600, 650, "nt"),
    (650, 700, 2600, "tn"),
    (64, 1024, 4096, "nn"),
    (1280, 1024, 4096, "nn"),
];

/// GFLOP/s of one product (best and median of `reps` calls after 2), compiled once on
/// placeholders and run with new data.
fn gflops((m, k, n, form): (usize, usize, usize, &str), reps: usize) -> (f64, f64) {
    let (ta, tb) = (form == "tn", form == "nt");
    let a_shape = if ta { [k, m] } else { [m, k] };
    let b_shape = if tb { [n, k] } else { [k, n] };
    let a = ovl::placeholder::<f32>("a", &a_shape);
    let b = ovl::placeholder::<f32>("b", &b_shape);
    let c = ovl_stdlib::matmul_t(&a, &b, ta, tb);
    let compiled = ovl::compile((&a, &b), &c, &Options::cpu()).expect("compile");
    let fill = |shape: [usize; 2], seed: f32| {
        Lazy::from(ArrayD::from_shape_fn(IxDyn(&shape), |i| {
            ((i[0] * 7 + i[1] * 3) % 17) as f32 * 0.1 - seed
        }))
    };
    let (av, bv) = (fill(a_shape, 0.8), fill(b_shape, 0.7));
    let mut dests = vec![ArrayD::<f32>::zeros(IxDyn(&[m, n]))];
    let t = time_calls(2, reps, || compiled.run_into((&av, &bv), &mut dests)).expect("run");
    let flops = 2.0 * (m * n * k) as f64;
    (
        flops / t.best.as_secs_f64() / 1e9,
        flops / t.median.as_secs_f64() / 1e9,
    )
}

/// Times one product of the `--shape` argument `M,K,N[,nt|tn]` (best of `reps` calls at least
/// 20, in GFLOP/s).
fn time_shape(shape: &str, reps: usize) {
    let parts: Vec<&str> = shape.split(',').collect();
    let dims: Vec<usize> = parts
        .iter()
        .take(3)
        .map(|p| p.parse().expect("--shape M,K,N[,nt|tn]"))
        .collect();
    let (m, k, n) = (dims[0], dims[1], dims[2]);
    let form = parts.get(3).copied().unwrap_or("nn");
    let (ta, tb) = (form == "tn", form == "nt");
    let a_shape = if ta { [k, m] } else { [m, k] };
    let b_shape = if tb { [n, k] } else { [k, n] };
    let a = ovl::placeholder::<f32>("a", &a_shape);
    let b = ovl::placeholder::<f32>("b", &b_shape);
    let c = ovl_stdlib::matmul_t(&a, &b, ta, tb);
    let compiled = ovl::compile((&a, &b), &c, &Options::cpu()).expect("compile");
    let fill = |shape: [usize; 2], seed: f32| {
        Lazy::from(ArrayD::from_shape_fn(IxDyn(&shape), |i| {
            ((i[0] * 7 + i[1] * 3) % 17) as f32 * 0.1 - seed
        }))
    };
    let (av, bv) = (fill(a_shape, 0.8), fill(b_shape, 0.7));
    let mut dests = vec![ArrayD::<f32>::zeros(IxDyn(&[m, n]))];
    let t = time_calls(3, reps.max(20), || {
        compiled.run_into((&av, &bv), &mut dests)
    })
    .expect("run");
    let flops = 2.0 * (m * n * k) as f64;
    println!(
        "{m}x{k}x{n} {form}: {:.1} GFLOP/s best, {:.1} median ({:.3} ms best)",
        flops / t.best.as_secs_f64() / 1e9,
        flops / t.median.as_secs_f64() / 1e9,
        t.best.as_secs_f64() * 1e3
    );
}

//! Matrix products on half inputs (`proto/ovl.proto`, "GEMM"): products and sums in f32, one
//! rounding into the half type at the end, on the interpreter and the CPU, against a reference
//! computed here in f64 from the exact half values.

use ndarray::{Array2, ArrayD};
use ovl::half::{bf16, f16};
use ovl::{Lazy, Options, Scalar};

/// `a · b` of f32 values given as half values, in f64 (every product of two half values is
/// exact, and so is the sum for these sizes up to f64 rounding).
fn reference(a: &Array2<f32>, b: &Array2<f32>) -> Array2<f64> {
    a.mapv(f64::from).dot(&b.mapv(f64::from))
}

fn check<T: Scalar>(from: fn(f32) -> T, to: fn(T) -> f32, ulp_at: fn(f32) -> f32) {
    let (m, k, n) = (7, 300, 5);
    let a = Array2::from_shape_fn((m, k), |(i, t)| {
        to(from(((i * 31 + t * 17) % 23) as f32 / 9.0 - 1.2))
    });
    let b = Array2::from_shape_fn((k, n), |(t, j)| {
        to(from(((t * 7 + j * 13) % 19) as f32 / 5.0 - 1.7))
    });
    let want = reference(&a, &b);
    let y = ovl::gemm(
        &Lazy::from(a.mapv(from)),
        &Lazy::from(b.mapv(from)),
        false,
        false,
    );
    for options in [Options::interpreter(), Options::cpu()] {
        let got: ArrayD<T> = ovl::evaluate_with(&y, &options).unwrap();
        for ((i, j), &w) in want.indexed_iter() {
            let g = to(got[[i, j]]);
            // f32 accumulation is off by far less than half an ulp of the half type; rounding
            // once then gives the nearest value or its neighbour.
            assert!(
                (g as f64 - w).abs() <= ulp_at(w as f32) as f64,
                "{:?} [{i}, {j}]: {g} vs {w}",
                options.target
            );
        }
    }
    // 4096 ones: exact in f32; a half accumulator would stop at 2048 (f16) or 256 (bf16).
    let ones = |r, c| Lazy::from(Array2::from_elem((r, c), from(1.0)));
    let y = ovl::gemm(&ones(1, 4096), &ones(4096, 1), false, false);
    for options in [Options::interpreter(), Options::cpu()] {
        let got: ArrayD<T> = ovl::evaluate_with(&y, &options).unwrap();
        assert_eq!(to(got[[0, 0]]), 4096.0, "{:?}", options.target);
    }
}

#[test]
fn half_products_accumulate_in_f32_and_round_once() {
    // An ulp of the half type at |x|: 2^(exponent - fraction bits), at least the subnormal step.
    check(f16::from_f32, f16::to_f32, |x| {
        2f32.powi((x.abs().max(6.2e-5).log2().floor() as i32) - 10)
    });
    check(bf16::from_f32, bf16::to_f32, |x| {
        2f32.powi((x.abs().max(1e-30).log2().floor() as i32) - 7)
    });
}

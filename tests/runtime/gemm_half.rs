//! Matrix products on half inputs (`proto/ovl.proto`, "GEMM"): products and sums in f32, one
//! rounding into the half type at the end, on the interpreter and the CPU (the runtime's f32
//! kernels on operands widened to f32), against a reference computed here in f64 from the exact
//! half values; transposed operands, sizes that take the packed kernels, and a bias and an
//! activation after the product (an epilogue pair) in every epilogue mode.

use ndarray::{Array1, Array2, ArrayD};
use ovl::half::{bf16, f16};
use ovl::{EpilogueMode, Lazy, Options, Scalar};
use ovl_stdlib as ops;

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

/// `tanh(op(x) · op(w) + b)` on half tensors of sizes that take the packed f32 kernels, with
/// transposed operands, against f64 from the exact half values: the product C rounds once, the
/// bias add z and the tanh once each, so the result is off by at most tanh's slope times C's and
/// z's rounding plus the tanh's own (with an ulp of margin each).
fn check_library<T: ovl::prelude::Float>(from: fn(f32) -> T, to: fn(T) -> f32, fraction_bits: i32) {
    let ulp = |x: f64| 2f64.powi((x.abs().max(1e-4).log2().floor() as i32) - fraction_bits);
    for (m, k, n, ta, tb) in [
        (70, 65, 33, false, false),
        (130, 257, 96, true, false),
        (9, 300, 140, false, true),
        (64, 128, 64, true, true),
    ] {
        let val = |i: usize, seed: usize| to(from(((i * 37 + seed * 11) % 29) as f32 / 14.0 - 1.0));
        let x = Array2::from_shape_fn(if ta { (k, m) } else { (m, k) }, |(i, j)| {
            val(i * 331 + j, 1)
        });
        let w = Array2::from_shape_fn(if tb { (n, k) } else { (k, n) }, |(i, j)| {
            val(i * 97 + j, 2)
        });
        let b = Array1::from_shape_fn(n, |j| val(j, 3));
        let (xo, wo) = (
            if ta { x.t().to_owned() } else { x.clone() },
            if tb { w.t().to_owned() } else { w.clone() },
        );
        let c = reference(&xo, &wo);
        let want = (&c + &b.mapv(f64::from)).mapv(f64::tanh);
        let (lx, lw, lb) = (
            Lazy::from(x.mapv(from)),
            Lazy::from(w.mapv(from)),
            Lazy::from(b.mapv(from)),
        );
        let y = ops::tanh(ops::add(ovl::gemm(&lx, &lw, ta, tb), &lb));
        for mode in [EpilogueMode::Off, EpilogueMode::Always] {
            let options = Options::cpu().with_gemm_epilogue(mode);
            let got: ArrayD<T> = ovl::evaluate_with(&y, &options).unwrap();
            for ((i, j), &w) in want.indexed_iter() {
                let g = f64::from(to(got[[i, j]]));
                let (c, z) = (c[[i, j]], c[[i, j]] + f64::from(b[j]));
                let tolerance = (1.0 - w * w) * (ulp(c) + ulp(z)) + 2.0 * ulp(w);
                assert!(
                    (g - w).abs() <= tolerance,
                    "{m}x{k}x{n} {ta} {tb} {mode:?} [{i}, {j}]: {g} vs {w}"
                );
            }
        }
    }
}

#[test]
fn half_products_on_the_library_kernels_with_transposes_and_an_epilogue() {
    check_library(f16::from_f32, f16::to_f32, 10);
    check_library(bf16::from_f32, bf16::to_f32, 7);
}

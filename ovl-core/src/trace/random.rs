//! Random numbers inside kernels: the counter-based generator Philox-4x32-10 (Salmon, Moraes,
//! Dror and Shaw, "Parallel random numbers: as easy as 1, 2, 3", SC'11; the generator of cuRAND's
//! `curand_Philox4x32_10`, PyTorch's CUDA generator and Triton's `tl.rand`), and uniform and
//! normal variates made from its words.
//!
//! Philox is a pure function of a key (two `u32` words: the seed, a kernel input) and a counter
//! (four `u32` words: what tells draws apart, e.g. the worker's position and a step): equal
//! arguments give equal words, in any order, on any worker and on every backend. It is written
//! here with the IR's integer operations only (a 32 x 32 -> 64-bit product, shifts, `^`), so
//! the interpreter, the C++ and the CUDA backends compute the same words bit for bit by the
//! IR's semantics, with nothing backend-specific to keep in step.
//!
//! ```ignore
//! // (In a crate that uses ovl; the conformance suite's `random` tests run such operators.)
//! use ovl::prelude::*;
//!
//! /// One standard normal per element: the seed is an input, the counter the position.
//! #[operator]
//! fn noise(seed: Tensor<u32>, like: Tensor<f32>) -> Tensor<f32> {
//!     let i = position_in(like.shape())[0];
//!     let out = output_like(&like);
//!     let w = philox4x32([seed[[0]], seed[[1]]], [i.cast::<u32>(), 0u32.into_expr(), 0u32.into_expr(), 0u32.into_expr()]);
//!     out[[i]] = normal_f32(w[0], w[1]).0;
//!     out
//! }
//! ```

use super::expr::{Expr, IntoExpr};
use super::math::{cos, log, sin, sqrt};

/// Philox's multipliers (the SC'11 paper's constants for 4 x 32 bits).
const MULTIPLIERS: [u32; 2] = [0xD251_1F53, 0xCD9E_8D57];
/// The key's increments between rounds (the golden ratio's and sqrt(3) - 1's bits).
const WEYL: [u32; 2] = [0x9E37_79B9, 0xBB67_AE85];
/// Philox-4x32-10: ten rounds.
const ROUNDS: usize = 10;

/// The high and low words of the 64-bit product of `m` and `x`.
#[track_caller]
fn mul_hi_lo(m: u32, x: Expr<u32>) -> (Expr<u32>, Expr<u32>) {
    let p = x.cast::<u64>() * u64::from(m);
    ((p >> 32u64).cast::<u32>(), p.cast::<u32>())
}

/// Philox-4x32-10 of `counter` under `key`: four pseudo-random `u32` words. Each argument is a
/// staged value or a plain number (`[seed0, seed1]`, `[i, step, 0, 0]`). Different counters
/// under one key give independent words (the generator's period is 2^128 per key); draw a
/// data-dependent number of words by counting up a counter word, e.g. the step of a loop.
///
/// The words equal the reference implementation's (Random123's `philox4x32_R(10, ..)`, cuRAND's
/// Philox4_32_10 for the same key and counter).
#[track_caller]
pub fn philox4x32<K: IntoExpr<u32>, C: IntoExpr<u32>>(
    key: [K; 2],
    counter: [C; 4],
) -> [Expr<u32>; 4] {
    let [k0, k1] = key;
    let mut k = [k0.into_expr(), k1.into_expr()];
    let [c0, c1, c2, c3] = counter;
    let mut c = [
        c0.into_expr(),
        c1.into_expr(),
        c2.into_expr(),
        c3.into_expr(),
    ];
    for round in 0..ROUNDS {
        if round > 0 {
            k = [k[0] + WEYL[0], k[1] + WEYL[1]];
        }
        let (hi0, lo0) = mul_hi_lo(MULTIPLIERS[0], c[0]);
        let (hi1, lo1) = mul_hi_lo(MULTIPLIERS[1], c[2]);
        c = [hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0];
    }
    c
}

/// A uniform `f32` in [0, 1) from one word: its top 24 bits times 2^-24 (every value a multiple
/// of 2^-24, each equally likely; exact, so equal on every backend).
#[track_caller]
pub fn uniform_f32(word: impl IntoExpr<u32>) -> Expr<f32> {
    (word.into_expr() >> 8u32).cast::<f32>() * (1.0f32 / 16_777_216.0)
}

/// A uniform `f64` in [0, 1) from two words: 53 bits (the top 32 of `hi`, the top 21 of `lo`)
/// times 2^-53 (exact, so equal on every backend).
#[track_caller]
pub fn uniform_f64(hi: impl IntoExpr<u32>, lo: impl IntoExpr<u32>) -> Expr<f64> {
    let bits = (hi.into_expr().cast::<u64>() << 21u64) | (lo.into_expr() >> 11u32).cast::<u64>();
    bits.cast::<f64>() * (1.0f64 / 9_007_199_254_740_992.0)
}

/// Two independent standard normal `f32`s from two words, by the Box-Muller transform:
/// `u1 = 1 - uniform_f32(a)` (in (0, 1], so the logarithm is finite), `u2 = uniform_f32(b)`,
/// `r = sqrt(-2 ln u1)`, and `(r cos(2 pi u2), r sin(2 pi u2))`. The uniforms are exact; the
/// normals carry the backends' accuracy of `log`, `sqrt`, `cos` and `sin` (a few ulp, see the
/// README), and are bounded by `sqrt(-2 ln 2^-24)` = 5.77 in magnitude.
#[track_caller]
pub fn normal_f32(a: impl IntoExpr<u32>, b: impl IntoExpr<u32>) -> (Expr<f32>, Expr<f32>) {
    let u1 = 1.0f32 - uniform_f32(a);
    let theta = uniform_f32(b) * std::f32::consts::TAU;
    let r = sqrt(-2.0f32 * log(u1));
    (r * cos(theta), r * sin(theta))
}

/// Two independent standard normal `f64`s from four words (two 53-bit uniforms), by the
/// Box-Muller transform as [`normal_f32`] (`u1 = 1 - uniform_f64(w0, w1)`,
/// `u2 = uniform_f64(w2, w3)`); bounded by `sqrt(-2 ln 2^-53)` = 8.57 in magnitude.
#[track_caller]
pub fn normal_f64(words: [Expr<u32>; 4]) -> (Expr<f64>, Expr<f64>) {
    let [w0, w1, w2, w3] = words;
    let u1 = 1.0f64 - uniform_f64(w0, w1);
    let theta = uniform_f64(w2, w3) * std::f64::consts::TAU;
    let r = sqrt(-2.0f64 * log(u1));
    (r * cos(theta), r * sin(theta))
}

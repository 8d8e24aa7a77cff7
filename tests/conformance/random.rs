//! The bitwise operators of integers over all pairs of edge values (shift counts negative, past
//! the width, zero), and random numbers in kernels: Philox-4x32-10's published known-answer
//! vectors, whole streams against an independent Rust implementation, and the distributions of
//! the uniforms and normals made from its words.

use super::support::{assert_all_same, pairs, Reference};
use ndarray::Array1;
use ovl::prelude::*;

/// `a & b`, `a | b`, `a ^ b`, `a << b`, `a >> b`: one kernel, five outputs.
#[operator]
#[allow(clippy::type_complexity)]
pub fn bit_ops<T: Int>(
    a: Tensor<T>,
    b: Tensor<T>,
) -> (Tensor<T>, Tensor<T>, Tensor<T>, Tensor<T>, Tensor<T>) {
    let i = position_in(a.shape())[0];
    let outs = (
        output_like(&a),
        output_like(&a),
        output_like(&a),
        output_like(&a),
        output_like(&a),
    );
    let (x, y) = (a[[i]], b[[i]]);
    outs.0[[i]] = x & y;
    outs.1[[i]] = x | y;
    outs.2[[i]] = x ^ y;
    outs.3[[i]] = x << y;
    outs.4[[i]] = x >> y;
    outs
}

/// Rust's own bitwise operations, shifts by the count modulo the width.
pub trait Bits: Reference + Int {
    fn and(a: Self, b: Self) -> Self;
    fn or(a: Self, b: Self) -> Self;
    fn xor(a: Self, b: Self) -> Self;
    fn shl(a: Self, b: Self) -> Self;
    fn shr(a: Self, b: Self) -> Self;
    /// A shift count as this type.
    fn count(n: u8) -> Self;
}

macro_rules! bits {
    ($($t:ty),*) => {$(
        impl Bits for $t {
            fn and(a: Self, b: Self) -> Self { a & b }
            fn or(a: Self, b: Self) -> Self { a | b }
            fn xor(a: Self, b: Self) -> Self { a ^ b }
            #[allow(clippy::cast_sign_loss)]
            fn shl(a: Self, b: Self) -> Self { a.wrapping_shl(b as u32) }
            #[allow(clippy::cast_sign_loss)]
            fn shr(a: Self, b: Self) -> Self { a.wrapping_shr(b as u32) }
            fn count(n: u8) -> Self { n as $t }
        }
    )*};
}
bits!(i8, i16, i32, i64, u8, u16, u32, u64);

pub fn bitwise<T: Bits>(options: &Options) {
    let (mut a, mut b) = pairs::<T>();
    // Shift counts around the width of every type (the edges have 0..3, 7 and 100).
    for count in [4u8, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65] {
        for &x in &T::edges() {
            a.push(x);
            b.push(T::count(count));
        }
    }
    let show = |i: usize| format!("a = {:?}, b = {:?}", a[i], b[i]);
    let outs = bit_ops(Array1::from(a.clone()), Array1::from(b.clone()));
    let (and, or, xor, shl, shr) =
        ovl::evaluate_with((&outs.0, &outs.1, &outs.2, &outs.3, &outs.4), options)
            .unwrap_or_else(|e| panic!("{e}"));
    let expect = |f: fn(T, T) -> T| a.iter().zip(&b).map(|(&x, &y)| f(x, y)).collect::<Vec<T>>();
    assert_all_same("a & b", &and, &expect(T::and), &show);
    assert_all_same("a | b", &or, &expect(T::or), &show);
    assert_all_same("a ^ b", &xor, &expect(T::xor), &show);
    assert_all_same("a << b", &shl, &expect(T::shl), &show);
    assert_all_same("a >> b", &shr, &expect(T::shr), &show);
}

/// Philox-4x32-10 of each row of `counters` under the key `key[0], key[1]`.
#[operator]
pub fn philox_rows(key: Tensor<u32>, counters: Tensor<u32>) -> Tensor<u32> {
    let r = position_in([counters.dims::<2>()[0]])[0];
    let out = output_like(&counters);
    let w = philox4x32(
        [key[[0]], key[[1]]],
        [
            counters[[r, 0]],
            counters[[r, 1]],
            counters[[r, 2]],
            counters[[r, 3]],
        ],
    );
    for (k, word) in w.into_iter().enumerate() {
        out[[r, k]] = word;
    }
    out
}

/// Random123's known-answer vectors for philox4x32 with 10 rounds: (counter, key, result).
const KNOWN_ANSWERS: [([u32; 4], [u32; 2], [u32; 4]); 3] = [
    (
        [0, 0, 0, 0],
        [0, 0],
        [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8],
    ),
    (
        [0xffff_ffff; 4],
        [0xffff_ffff; 2],
        [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd],
    ),
    (
        [0x243f_6a88, 0x85a3_08d3, 0x1319_8a2e, 0x0370_7344],
        [0xa409_3822, 0x299f_31d0],
        [0xd16c_fe09, 0x94fd_cceb, 0x5001_e420, 0x2412_6ea1],
    ),
];

/// Philox-4x32-10 in plain Rust, written from the SC'11 paper's definition (independent of the
/// DSL's version, which builds IR).
pub fn philox_reference(key: [u32; 2], counter: [u32; 4]) -> [u32; 4] {
    let (mut k, mut c) = (key, counter);
    for round in 0..10 {
        if round > 0 {
            k = [
                k[0].wrapping_add(0x9E37_79B9),
                k[1].wrapping_add(0xBB67_AE85),
            ];
        }
        let p0 = u64::from(0xD251_1F53u32) * u64::from(c[0]);
        let p1 = u64::from(0xCD9E_8D57u32) * u64::from(c[2]);
        c = [
            (p1 >> 32) as u32 ^ c[1] ^ k[0],
            p1 as u32,
            (p0 >> 32) as u32 ^ c[3] ^ k[1],
            p0 as u32,
        ];
    }
    c
}

pub fn philox_known_answers(options: &Options) {
    for (counter, key, want) in KNOWN_ANSWERS {
        assert_eq!(philox_reference(key, counter), want, "the Rust reference");
        let counters = Array1::from(counter.to_vec())
            .into_shape_with_order((1, 4))
            .unwrap();
        let got = ovl::evaluate_with(&philox_rows(Array1::from(key.to_vec()), counters), options)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            got.iter().copied().collect::<Vec<u32>>(),
            want.to_vec(),
            "philox4x32 of counter {counter:x?} under key {key:x?}"
        );
    }
}

/// Per worker `i` and step `s` of a staged loop of `steps[i]` steps (a data-dependent count):
/// the words of counter `[i, s, 7, 0]`, their uniforms and normals.
#[operator]
#[allow(clippy::type_complexity)]
pub fn draws(
    key: Tensor<u32>,
    steps: Tensor<i64>,
    shape: Tensor<u32>,
) -> (
    Tensor<u32>,
    Tensor<f32>,
    Tensor<f64>,
    Tensor<f32>,
    Tensor<f64>,
) {
    let [workers, most] = shape.dims::<2>();
    let i = position_in([workers])[0];
    let words = output([workers, most * 4]);
    let u32s = output([workers, most * 4]);
    let u64s = output([workers, most * 2]);
    let n32 = output([workers, most * 2]);
    let n64 = output([workers, most * 2]);
    for s in 0..steps[[i]] {
        let w = philox4x32(
            [key[[0]], key[[1]]],
            [
                i.cast::<u32>(),
                s.cast::<u32>(),
                7u32.into_expr(),
                0u32.into_expr(),
            ],
        );
        // A trace-time loop (over an array, not a range).
        for (k, word) in w.into_iter().enumerate() {
            words[[i, s * 4 + k as i64]] = word;
            u32s[[i, s * 4 + k as i64]] = uniform_f32(word);
        }
        u64s[[i, s * 2]] = uniform_f64(w[0], w[1]);
        u64s[[i, s * 2 + 1]] = uniform_f64(w[2], w[3]);
        let (z0, z1) = normal_f32(w[0], w[1]);
        n32[[i, s * 2]] = z0;
        n32[[i, s * 2 + 1]] = z1;
        let (g0, g1) = normal_f64(w);
        n64[[i, s * 2]] = g0;
        n64[[i, s * 2 + 1]] = g1;
    }
    (words, u32s, u64s, n32, n64)
}

fn uniform_f32_reference(w: u32) -> f32 {
    (w >> 8) as f32 / 16_777_216.0
}

fn uniform_f64_reference(hi: u32, lo: u32) -> f64 {
    ((u64::from(hi) << 21) | u64::from(lo >> 11)) as f64 / 9_007_199_254_740_992.0
}

/// Mean and variance of a sample.
fn moments(xs: impl Iterator<Item = f64> + Clone) -> (f64, f64, usize) {
    let n = xs.clone().count();
    let mean = xs.clone().sum::<f64>() / n as f64;
    let var = xs.map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1) as f64;
    (mean, var, n)
}

pub fn streams(options: &Options) {
    const WORKERS: usize = 512;
    const MOST: usize = 16;
    let key = [0x1234_5678u32, 0x9abc_def0];
    // Worker i draws (i * 7) % 17 steps: 0 to 16.
    let steps: Vec<i64> = (0..WORKERS)
        .map(|i| ((i * 7) % (MOST + 1)) as i64)
        .collect();
    let outs = draws(
        Array1::from(key.to_vec()),
        Array1::from(steps.clone()),
        ndarray::Array2::<u32>::zeros((WORKERS, MOST)),
    );
    let (words, u32s, u64s, n32, n64) =
        ovl::evaluate_with((&outs.0, &outs.1, &outs.2, &outs.3, &outs.4), options)
            .unwrap_or_else(|e| panic!("{e}"));
    let (mut normals32, mut normals64, mut uniforms) = (Vec::new(), Vec::new(), Vec::new());
    for (i, &n) in steps.iter().enumerate() {
        for s in 0..MOST {
            let w = philox_reference(key, [i as u32, s as u32, 7, 0]);
            if s as i64 >= n {
                break;
            }
            for k in 0..4 {
                assert_eq!(
                    words[[i, s * 4 + k]],
                    w[k],
                    "word {k} of worker {i}, step {s}"
                );
                let u = uniform_f32_reference(w[k]);
                assert_eq!(u32s[[i, s * 4 + k]].to_bits(), u.to_bits(), "uniform_f32");
                assert!((0.0..1.0).contains(&u));
                uniforms.push(f64::from(u));
            }
            let u0 = uniform_f64_reference(w[0], w[1]);
            let u1 = uniform_f64_reference(w[2], w[3]);
            assert_eq!(u64s[[i, s * 2]].to_bits(), u0.to_bits(), "uniform_f64");
            assert_eq!(u64s[[i, s * 2 + 1]].to_bits(), u1.to_bits(), "uniform_f64");
            // The Box-Muller pairs, computed here in f64 from the same uniforms.
            let (a, b) = (
                1.0 - f64::from(uniform_f32_reference(w[0])),
                f64::from(uniform_f32_reference(w[1])),
            );
            let r = (-2.0 * a.ln()).sqrt();
            let theta = std::f64::consts::TAU * b;
            for (k, want) in [r * theta.cos(), r * theta.sin()].into_iter().enumerate() {
                let got = f64::from(n32[[i, s * 2 + k]]);
                assert!(
                    (got - want).abs() <= 2e-5 * (1.0 + want.abs()),
                    "normal_f32 {k} of worker {i}, step {s}: {got} vs {want}"
                );
                normals32.push(got);
            }
            let r = (-2.0 * (1.0 - u0).ln()).sqrt();
            let theta = std::f64::consts::TAU * u1;
            for (k, want) in [r * theta.cos(), r * theta.sin()].into_iter().enumerate() {
                let got = n64[[i, s * 2 + k]];
                assert!(
                    (got - want).abs() <= 1e-12 * (1.0 + want.abs()),
                    "normal_f64 {k} of worker {i}, step {s}: {got} vs {want}"
                );
                normals64.push(got);
            }
        }
    }
    // Distributions: within 5 standard errors of the truth (about 16,000 uniforms and 8,000
    // normals of each kind).
    let (mean, var, n) = moments(uniforms.iter().copied());
    let se = (1.0 / 12.0 / n as f64).sqrt();
    assert!(
        (mean - 0.5).abs() < 5.0 * se,
        "uniform mean {mean} (n = {n})"
    );
    assert!((var - 1.0 / 12.0).abs() < 0.01, "uniform variance {var}");
    for (name, xs) in [("normal_f32", &normals32), ("normal_f64", &normals64)] {
        let (mean, var, n) = moments(xs.iter().copied());
        let se = (1.0 / n as f64).sqrt();
        assert!(mean.abs() < 5.0 * se, "{name} mean {mean} (n = {n})");
        // The variance's standard error is sqrt(2 / n).
        assert!(
            (var - 1.0).abs() < 5.0 * (2.0 / n as f64).sqrt(),
            "{name} variance {var}"
        );
        let within = xs.iter().filter(|x| x.abs() < 1.0).count() as f64 / n as f64;
        // P(|z| < 1) = 0.6827; its standard error sqrt(p (1 - p) / n).
        assert!(
            (within - 0.6827).abs() < 5.0 * (0.6827 * 0.3173 / n as f64).sqrt(),
            "{name}: {within} within 1"
        );
    }
}

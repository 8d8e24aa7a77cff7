//! The LSTM layer both layer benchmarks run (`benches/lstm_layer.rs` on the CPU,
//! `benches/lstm_layer_gpu.rs` on the GPU): its sizes, its inputs (the formula
//! `benches/lstm_layer_peers.py` shares) and the layer written the natural way with `ovl_stdlib`.
#![allow(dead_code)]

use ndarray::{ArrayD, IxDyn};
use ovl::Lazy;
use ovl_stdlib as ops;

/// The benchmark's sizes: (T, B, H = I).
pub const SIZES: [(usize, usize, usize); 3] = [(35, 20, 650), (35, 20, 1500), (20, 64, 1024)];

/// Element `k` of an input: `scale * sin(0.7071 k + seed)`, computed in f64 and rounded to
/// f32 (`benches/lstm_layer_peers.py` computes the same).
// 0.7071 is the multiplier the Python side uses, written out (not 1/sqrt(2)).
#[allow(clippy::approx_constant)]
pub fn input(shape: &[usize], seed: f64, scale: f64) -> ArrayD<f32> {
    let mut k = 0u64;
    ArrayD::from_shape_simple_fn(IxDyn(shape), || {
        let v = (scale * (k as f64 * 0.7071 + seed).sin()) as f32;
        k += 1;
        v
    })
}

/// The layer's inputs: x, W, U, b and the seed g of `sum(h * g)`.
pub fn inputs(t: usize, b: usize, h: usize) -> [ArrayD<f32>; 5] {
    let scale = 1.0 / (h as f64).sqrt();
    [
        input(&[t, b, h], 0.1, 1.0),
        input(&[h, 4 * h], 0.2, scale),
        input(&[h, 4 * h], 0.3, scale),
        input(&[4 * h], 0.4, 0.1),
        input(&[t, b, h], 0.5, 1.0),
    ]
}

/// The cell on the gate pre-activations `z [B, 4H]` (Keras's order i, f, g, o).
pub fn cell(z: &Lazy<f32>, c: &Lazy<f32>) -> (Lazy<f32>, Lazy<f32>) {
    let g = ops::split(z, 1, 4);
    let new_c = ops::add(
        ops::mul(ops::sigmoid(&g[1]), c),
        ops::mul(ops::sigmoid(&g[0]), ops::tanh(&g[2])),
    );
    let new_h = ops::mul(ops::sigmoid(&g[3]), ops::tanh(&new_c));
    (new_c, new_h)
}

/// Every step's `h`, from the placeholders: each step multiplies its own `x_t` (the natural
/// way; fusion stacks these products into one).
pub fn layer(x: &Lazy<f32>, w: &Lazy<f32>, u: &Lazy<f32>, bias: &Lazy<f32>) -> Vec<Lazy<f32>> {
    let (t, b) = (x.shape()[0], x.shape()[1]);
    let (i, h) = (x.shape()[2], u.shape()[0]);
    let zeros = || Lazy::from(ArrayD::<f32>::zeros(IxDyn(&[b, h])));
    let (mut hs, mut h_t, mut c_t) = (Vec::with_capacity(t), zeros(), zeros());
    let projected: Vec<Lazy<f32>> = ops::split(x, 0, t)
        .iter()
        .map(|x_t| ops::matmul(ops::reshape(x_t, &[b, i]), w))
        .collect();
    for xw in projected {
        let z = ops::add(ops::add(xw, ops::matmul(&h_t, u)), bias);
        let (c, h) = cell(&z, &c_t);
        hs.push(h.clone());
        (h_t, c_t) = (h, c);
    }
    hs
}

/// Writes `arrays`' elements one after the other as little-endian f32 to `path` (the outputs
/// `benches/lstm_layer_peers.py` and `lstm_layer_gpu_peers.py` check).
pub fn write_f32<'a>(path: &std::path::Path, arrays: impl IntoIterator<Item = &'a ArrayD<f32>>) {
    let mut bytes = Vec::new();
    for a in arrays {
        for v in a.iter() {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
    }
    std::fs::write(path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// The layer on placeholders `x, W, U, b` (and the seed `g` with `backward`): its inputs in
/// that order and its outputs (see [`outputs`]).
pub fn graph(t: usize, b: usize, h: usize, backward: bool) -> (Vec<Lazy<f32>>, Vec<Lazy<f32>>) {
    let x = ovl::placeholder::<f32>("x", &[t, b, h]);
    let w = ovl::placeholder::<f32>("w", &[h, 4 * h]);
    let u = ovl::placeholder::<f32>("u", &[h, 4 * h]);
    let bias = ovl::placeholder::<f32>("b", &[4 * h]);
    let g = ovl::placeholder::<f32>("g", &[t, b, h]);
    let outs = outputs([&x, &w, &u, &bias], backward.then_some(&g));
    let mut ins = vec![x, w, u, bias];
    if backward {
        ins.push(g);
    }
    (ins, outs)
}

/// The layer's outputs on `x, W, U, b`: every step's `h`, or, given the seed `g`, the gradients
/// of `sum(h * g)` for `x, W, U, b`.
pub fn outputs([x, w, u, bias]: [&Lazy<f32>; 4], g: Option<&Lazy<f32>>) -> Vec<Lazy<f32>> {
    let hs = layer(x, w, u, bias);
    let Some(g) = g else {
        return hs;
    };
    let (t, b, h) = (x.shape()[0], x.shape()[1], u.shape()[0]);
    let seeds: Vec<Lazy<f32>> = ops::split(g, 0, t)
        .iter()
        .map(|g| ops::reshape(g, &[b, h]))
        .collect();
    let pairs: Vec<(&Lazy<f32>, &Lazy<f32>)> = hs.iter().zip(&seeds).collect();
    let grads = ovl::backward(&pairs, &[x, w, u, bias]).expect("backward");
    [x, w, u, bias]
        .iter()
        .map(|v| grads.of_or_zeros(v))
        .collect()
}

//! The LSTM cell's nonlinearity written from small operators (a gate split, sigmoid, tanh) and
//! arithmetic on handles, and deterministic values to feed it: shared by the test binaries
//! `tests/fuse/`, `tests/runtime/` and `tests/cuda/`, `examples/fusion.rs`,
//! `benches/lstm_fusion.rs` and `benches/lstm.rs`, which include this file with `#[path]`.

#![allow(dead_code)]

use ovl::prelude::*;

/// Splits the gate pre-activations `[B, 4H]` into four `[B, H]` tensors (i, j, f, o).
#[operator]
pub fn split_gates(z: Tensor<f32>) -> (Tensor<f32>, Tensor<f32>, Tensor<f32>, Tensor<f32>) {
    let [b, h4] = z.dims::<2>();
    let h = h4 / 4;
    let p = position_in([b, h]);
    let outs = (
        output([b, h]),
        output([b, h]),
        output([b, h]),
        output([b, h]),
    );
    outs.0[[p[0], p[1]]] = z[[p[0], p[1]]];
    outs.1[[p[0], p[1]]] = z[[p[0], p[1] + h]];
    outs.2[[p[0], p[1]]] = z[[p[0], p[1] + 2 * h]];
    outs.3[[p[0], p[1]]] = z[[p[0], p[1] + 3 * h]];
    outs
}

/// Elementwise logistic function.
#[operator]
pub fn sigmoid_op(x: Tensor<f32>) -> Tensor<f32> {
    let p = position_in(x.shape());
    let out = output_like(&x);
    out[[p[0], p[1]]] = sigmoid(x[[p[0], p[1]]]);
    out
}

/// Elementwise hyperbolic tangent.
#[operator]
pub fn tanh_op(x: Tensor<f32>) -> Tensor<f32> {
    let p = position_in(x.shape());
    let out = output_like(&x);
    out[[p[0], p[1]]] = tanh(x[[p[0], p[1]]]);
    out
}

/// The LSTM cell's nonlinearity: new cell state and new hidden state.
pub fn lstm_cell(z: &Lazy<f32>, c: &Lazy<f32>, forget_bias: f32) -> (Lazy<f32>, Lazy<f32>) {
    let (i, j, f, o) = split_gates(z);
    let new_c = c * &sigmoid_op(&f + forget_bias) + sigmoid_op(&i) * tanh_op(&j);
    let new_h = tanh_op(&new_c) * sigmoid_op(&o);
    (new_c, new_h)
}

/// Deterministic pseudo-random values in [-2, 2) (xorshift), the same on every run and machine.
pub fn pseudo_random(shape: (usize, usize), seed: u64) -> ndarray::Array2<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    ndarray::Array::from_shape_simple_fn(shape, || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        ((s >> 11) as f64 / (1u64 << 53) as f64 * 4.0 - 2.0) as f32
    })
}

//! The LSTM cell's nonlinearity written by hand as two operators, the forward pass and its
//! gradient (recomputing the gates), without a gradient attached: what `benches/lstm.rs` calls
//! "hand-fused" and `benches/derived_gradients.rs` differentiates automatically.

use ovl::prelude::*;

/// The forward pass written by hand as one operator.
#[operator]
pub fn lstm_forward(
    z: Tensor<f32>,
    c: Tensor<f32>,
    forget_bias: f32,
) -> (Tensor<f32>, Tensor<f32>) {
    let [b, h] = c.dims::<2>();
    let p = position_in([b, h]);
    let (r, k) = (p[0], p[1]);
    let new_c = output_like(&c);
    let new_h = output_like(&c);
    let i = sigmoid(z[[r, k]]);
    let j = tanh(z[[r, k + h as i64]]);
    let f = sigmoid(z[[r, k + 2 * h as i64]] + forget_bias);
    let o = sigmoid(z[[r, k + 3 * h as i64]]);
    let nc = c[[r, k]] * f + i * j;
    new_c[[r, k]] = nc;
    new_h[[r, k]] = tanh(nc) * o;
    (new_c, new_h)
}

/// The backward pass written by hand as one operator (recomputing the gates).
#[operator]
pub fn lstm_backward(
    z: Tensor<f32>,
    c: Tensor<f32>,
    dc: Tensor<f32>,
    dh: Tensor<f32>,
    forget_bias: f32,
) -> (Tensor<f32>, Tensor<f32>) {
    let [b, h] = c.dims::<2>();
    let p = position_in([b, h]);
    let (r, k) = (p[0], p[1]);
    let dz = output_like(&z);
    let dc_prev = output_like(&c);
    let hh = h as i64;
    let i = sigmoid(z[[r, k]]);
    let j = tanh(z[[r, k + hh]]);
    let f = sigmoid(z[[r, k + 2 * hh]] + forget_bias);
    let o = sigmoid(z[[r, k + 3 * hh]]);
    let cv = c[[r, k]];
    let tc = tanh(cv * f + i * j);
    let d_nc = dc[[r, k]] + dh[[r, k]] * o * (1.0 - tc * tc);
    dc_prev[[r, k]] = d_nc * f;
    dz[[r, k]] = d_nc * j * i * (1.0 - i);
    dz[[r, k + hh]] = d_nc * i * (1.0 - j * j);
    dz[[r, k + 2 * hh]] = d_nc * cv * f * (1.0 - f);
    dz[[r, k + 3 * hh]] = dh[[r, k]] * tc * o * (1.0 - o);
    (dz, dc_prev)
}

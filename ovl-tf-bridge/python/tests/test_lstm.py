"""The LSTM cell built from ovl-stdlib operators, exported with the gradient program that
`ovl::backward` derived (make_bundles.rs), against the same cell in TensorFlow ops: values and
gradients through tf.GradientTape."""

import numpy as np
import tensorflow as tf

RNG = np.random.default_rng(11)
BATCH, HIDDEN = 4, 8


def tf_cell(z, c):
    i, j, f, o = tf.split(z, 4, axis=1)
    new_c = c * tf.sigmoid(f + 1.0) + tf.sigmoid(i) * tf.tanh(j)
    new_h = tf.tanh(new_c) * tf.sigmoid(o)
    return new_c, new_h


def test_lstm_cell_values_and_gradients_match_tensorflow(bundle):
    cell = bundle("lstm_cell")
    assert cell.has_gradient
    z = tf.constant(RNG.uniform(-2, 2, (BATCH, 4 * HIDDEN)), dtype=tf.float32)
    c = tf.constant(RNG.uniform(-2, 2, (BATCH, HIDDEN)), dtype=tf.float32)
    w_c = tf.constant(RNG.uniform(-1, 1, (BATCH, HIDDEN)), dtype=tf.float32)
    w_h = tf.constant(RNG.uniform(-1, 1, (BATCH, HIDDEN)), dtype=tf.float32)

    @tf.function
    def run(fn, z, c):
        with tf.GradientTape() as tape:
            tape.watch([z, c])
            new_c, new_h = fn(z, c)
            loss = tf.reduce_sum(new_c * w_c) + tf.reduce_sum(new_h * w_h)
        dz, dc = tape.gradient(loss, [z, c])
        return new_c, new_h, dz, dc

    got = run(cell, z, c)
    want = run(tf_cell, z, c)
    for name, g, w in zip(["new_c", "new_h", "dz", "dc"], got, want):
        assert g.shape == w.shape, name
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=2e-5, atol=2e-6, err_msg=name)

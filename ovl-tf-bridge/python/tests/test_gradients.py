"""tf.GradientTape through DynamicLib, with gradient programs written in Rust
(`square_grad` and `mul` in make_bundles.rs) or derived from an operator's IR
(`layernorm_rows`, `stencil3`), compared with TensorFlow's own gradients."""

import numpy as np
import pytest
import tensorflow as tf

RNG = np.random.default_rng(7)


def test_gradient_tape_eager(bundle):
    f = bundle("square")
    assert f.has_gradient
    x = tf.Variable(RNG.standard_normal(6).astype(np.float32))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(f(x) * tf.range(6, dtype=tf.float32))
    with tf.GradientTape() as ref_tape:
        ref = tf.reduce_sum(x * x * tf.range(6, dtype=tf.float32))
    np.testing.assert_allclose(
        tape.gradient(loss, x).numpy(), ref_tape.gradient(ref, x).numpy(), rtol=1e-6
    )


def test_gradient_inside_tf_function_two_inputs(bundle):
    f = bundle("mul")
    x = tf.constant(RNG.standard_normal(5), dtype=tf.float32)
    y = tf.constant(RNG.standard_normal(5), dtype=tf.float32)

    @tf.function
    def grads(x, y, fn):
        with tf.GradientTape() as tape:
            tape.watch([x, y])
            z = fn(x, y)
            loss = tf.reduce_sum(tf.sin(z))
        dx, dy = tape.gradient(loss, [x, y])
        assert dx.shape == (5,) and dy.shape == (5,)
        return dx, dy

    got = grads(x, y, f)
    want = grads(x, y, lambda a, b: a * b)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-6)


def test_multi_output_gradient_with_an_unused_output(bundle):
    # Only `lo` feeds the loss: the gradient flowing into `hi` is None and becomes zeros.
    f = bundle("min_max")
    a = tf.Variable(RNG.standard_normal(7).astype(np.float32))
    b = tf.Variable(RNG.standard_normal(7).astype(np.float32))
    weights = tf.range(1, 8, dtype=tf.float32)
    with tf.GradientTape(persistent=True) as tape:
        lo, hi = f(a, b)
        only_lo = tf.reduce_sum(lo * weights)
        both = tf.reduce_sum(lo * weights - 3.0 * hi)
        ref_only_lo = tf.reduce_sum(tf.minimum(a, b) * weights)
        ref_both = tf.reduce_sum(tf.minimum(a, b) * weights - 3.0 * tf.maximum(a, b))
    for loss, ref in [(only_lo, ref_only_lo), (both, ref_both)]:
        got = tape.gradient(loss, [a, b])
        want = tape.gradient(ref, [a, b])
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-6)


def test_program_without_gradient_is_an_error(bundle):
    f = bundle("square_no_grad")
    assert not f.has_gradient
    x = tf.Variable(np.ones(6, np.float32))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(f(x))
    with pytest.raises(LookupError, match="has no gradient"):
        tape.gradient(loss, x)


def _layernorm(x):
    mean = tf.reduce_mean(x, axis=1, keepdims=True)
    var = tf.reduce_mean(tf.square(x - mean), axis=1, keepdims=True)
    return (x - mean) * tf.math.rsqrt(var + 1e-5)


def test_derived_gradient_of_a_row_kernel(bundle):
    # layernorm_rows has no written gradient: the bundle's gradient program was derived from
    # its IR by ovl::backward (two loops over the row, sums, a row buffer).
    f = bundle("layernorm_derived")
    assert f.has_gradient
    x = tf.Variable(RNG.standard_normal((6, 33)).astype(np.float32))
    seed = tf.constant(RNG.standard_normal((6, 33)).astype(np.float32))

    @tf.function
    def grad(fn):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(fn(x) * seed)
        return tape.gradient(loss, x)

    np.testing.assert_allclose(
        f(x).numpy(), _layernorm(x).numpy(), rtol=1e-5, atol=1e-5
    )
    for got in [grad(f), _eager_grad(f, x, seed)]:
        np.testing.assert_allclose(got.numpy(), grad(_layernorm).numpy(), rtol=1e-4, atol=1e-5)


def _eager_grad(fn, x, seed):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(fn(x) * seed)
    return tape.gradient(loss, x)


def test_derived_gradient_of_a_stencil_for_both_inputs(bundle):
    f = bundle("stencil_derived")
    x = tf.Variable(RNG.standard_normal(17).astype(np.float32))
    w = tf.Variable(RNG.standard_normal(3).astype(np.float32))
    seed = tf.constant(RNG.standard_normal(17).astype(np.float32))

    def reference(x, w):
        padded = tf.pad(x, [[1, 1]])
        return w[0] * padded[:-2] + w[1] * padded[1:-1] + w[2] * padded[2:]

    with tf.GradientTape(persistent=True) as tape:
        loss = tf.reduce_sum(f(x, w) * seed)
        ref = tf.reduce_sum(reference(x, w) * seed)
    for got, want in zip(tape.gradient(loss, [x, w]), tape.gradient(ref, [x, w])):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)

"""DynamicLib called eagerly and inside tf.function, compared with the same computation in
TensorFlow ops: constants, several dtypes, several outputs, fused and unfused graphs."""

import numpy as np
import pytest
import tensorflow as tf

RNG = np.random.default_rng(5)


def scale_add_reference(x):
    b = np.fromfunction(lambda r, c: r - 0.5 * c, (4, 5)).astype(np.float32)
    return 2.0 * x + tf.constant(b)


def test_eager_call_matches_tensorflow(bundle):
    f = bundle("scale_add")
    x = tf.constant(RNG.standard_normal((4, 5)), dtype=tf.float32)
    y = f(x)
    assert y.dtype == tf.float32 and y.shape == (4, 5)
    np.testing.assert_allclose(y.numpy(), scale_add_reference(x).numpy(), rtol=1e-6)
    # Python values and numpy arrays are converted to the exported dtype.
    np.testing.assert_allclose(f(x.numpy().tolist()).numpy(), y.numpy(), rtol=1e-6)


def test_tf_function_sets_static_shapes_and_matches(bundle):
    f = bundle("scale_add")

    @tf.function(input_signature=[tf.TensorSpec([None, 5], tf.float32)])
    def g(x):
        y = f(x)
        # The static shape is known at trace time even though the input's is not.
        assert y.shape.as_list() == [4, 5], y.shape
        return tf.reduce_sum(y, axis=1)

    x = tf.constant(RNG.standard_normal((4, 5)), dtype=tf.float32)
    np.testing.assert_allclose(
        g(x).numpy(), tf.reduce_sum(scale_add_reference(x), axis=1).numpy(), rtol=1e-5
    )
    out = g.get_concrete_function().structured_outputs
    assert out.shape.as_list() == [4]


def test_repeated_calls_reuse_the_kernel(bundle):
    f = bundle("scale_add")
    g = tf.function(f.__call__)
    for _ in range(3):
        x = tf.constant(RNG.standard_normal((4, 5)), dtype=tf.float32)
        np.testing.assert_allclose(g(x).numpy(), scale_add_reference(x).numpy(), rtol=1e-6)


def test_large_tensor_on_several_threads(bundle):
    f = bundle("add_one_big")
    x = tf.constant(RNG.standard_normal(1 << 20), dtype=tf.float32)
    np.testing.assert_array_equal(f(x).numpy(), (x + 1.0).numpy())


DTYPE_CASES = [
    (
        "affine_f64",
        lambda: [tf.constant(RNG.standard_normal(9), dtype=tf.float64)],
        lambda x: x * 0.5 - 3.0,
    ),
    (
        "mul_add_i32",
        lambda: [
            tf.constant(RNG.integers(-1000, 1000, 9), dtype=tf.int32),
            tf.constant(RNG.integers(-1000, 1000, 9), dtype=tf.int32),
        ],
        lambda a, b: a * b + 7,
    ),
    (
        "shift_i64",
        lambda: [tf.constant(RNG.integers(-(1 << 40), 1 << 40, 9), dtype=tf.int64)],
        lambda x: x * 1024 - 1,
    ),
    (
        "wrap_u8",
        lambda: [tf.constant(RNG.integers(0, 256, 9), dtype=tf.uint8)],
        # uint8 arithmetic wraps, in ovl as in TensorFlow.
        lambda x: x + tf.constant(200, tf.uint8),
    ),
    (
        "positive",
        lambda: [tf.constant([-2.0, -0.0, 0.0, 1e-30, 3.0, -1e-30, 7.0, 0.5, -9.0])],
        lambda x: x > 0.0,
    ),
]


@pytest.mark.parametrize("name, make, reference", DTYPE_CASES, ids=[c[0] for c in DTYPE_CASES])
def test_dtypes(bundle, name, make, reference):
    f = bundle(name)
    args = make()
    want = reference(*args)
    got = f(*args)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    got = tf.function(f.__call__)(*args)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_multi_output_operator(bundle):
    f = bundle("min_max")
    a = tf.constant(RNG.standard_normal(7), dtype=tf.float32)
    b = tf.constant(RNG.standard_normal(7), dtype=tf.float32)
    lo, hi = f(a, b)
    np.testing.assert_array_equal(lo.numpy(), tf.minimum(a, b).numpy())
    np.testing.assert_array_equal(hi.numpy(), tf.maximum(a, b).numpy())

    @tf.function
    def spread(a, b):
        lo, hi = f(a, b)
        assert lo.shape == (7,) and hi.shape == (7,)
        return hi - lo

    np.testing.assert_allclose(spread(a, b).numpy(), tf.abs(a - b).numpy(), rtol=1e-6)


def test_fused_graph_of_several_operators(bundle):
    f = bundle("fused_chain")
    # tanh, sigmoid, mul and add: merged into one kernel by the exporter.
    assert f.kernels == 1
    x = tf.constant(RNG.standard_normal(64), dtype=tf.float32)
    z = tf.constant(RNG.standard_normal(64), dtype=tf.float32)
    want = tf.tanh(x) * tf.sigmoid(z) + x
    np.testing.assert_allclose(f(x, z).numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        tf.function(f.__call__)(x, z).numpy(), want.numpy(), rtol=1e-5, atol=1e-6
    )


def test_unfusable_graph_runs_kernel_by_kernel(bundle):
    f = bundle("cumsum_twice")
    # A cumsum cannot be fused into another cumsum: two kernels and an intermediate, which
    # is also requested twice (written in place once, copied once).
    assert f.kernels == 2
    x = tf.constant(RNG.standard_normal((3, 8)), dtype=tf.float32)
    c2, c1, c1_again = f(x)
    want1 = tf.cumsum(x, axis=1)
    np.testing.assert_allclose(c1.numpy(), want1.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(c1_again.numpy(), c1.numpy())
    np.testing.assert_allclose(
        c2.numpy(), tf.cumsum(want1, axis=1).numpy(), rtol=1e-5, atol=1e-4
    )

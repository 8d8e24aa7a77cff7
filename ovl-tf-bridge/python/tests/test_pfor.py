"""pfor over DynamicLib: tf.vectorized_map(fallback_to_while_loop=False), GradientTape.jacobian
and batch_jacobian vectorize an ovl program (one op running the batched program) instead of a
while loop, with loop lengths known when the graph is built or only at run time (a None batch in
an input signature), over programs of fixed sizes and programs exported for any batch size.
Values against NumPy, TensorFlow's own ops and the per-example loop."""

import numpy as np
import pytest
import tensorflow as tf

RNG = np.random.default_rng(23)
BATCH, HIDDEN = 4, 8  # the lstm_cell bundle's sizes


def tf_cell(z, c):
    i, j, f, o = tf.split(z, 4, axis=-1)
    new_c = c * tf.sigmoid(f + 1.0) + tf.sigmoid(i) * tf.tanh(j)
    new_h = tf.tanh(new_c) * tf.sigmoid(o)
    return new_c, new_h


def uniform(*shape):
    return tf.constant(RNG.uniform(-2, 2, shape), dtype=tf.float32)


def op_types(fn, *args):
    graph = fn.get_concrete_function(*args).graph
    return [op.type for op in graph.get_operations()]


def assert_vectorized(fn, *args):
    """The traced graph runs no while loop (pfor vectorized every op) and has a DynamicLib."""
    types = op_types(fn, *args)
    assert "DynamicLib" in types
    assert not {"While", "StatelessWhile"} & set(types), types


@pytest.mark.parametrize("in_function", [False, True])
def test_vectorized_map_equals_the_per_example_values(bundle, in_function):
    square = bundle("square")
    xs = uniform(5, 6)

    def run(xs):
        return tf.vectorized_map(square, xs, fallback_to_while_loop=False)

    run = tf.function(run) if in_function else run
    got = run(xs)
    assert got.shape == (5, 6)
    np.testing.assert_array_equal(got.numpy(), xs.numpy() * xs.numpy())
    if in_function:
        assert_vectorized(run, xs)


@pytest.mark.parametrize("in_function", [False, True])
def test_batched_and_loop_invariant_inputs(bundle, in_function):
    mul, min_max = bundle("mul"), bundle("min_max")
    xs, y = uniform(3, 5), uniform(5)
    a_s, b = uniform(4, 7), uniform(7)

    def run(xs, a_s):
        prod = tf.vectorized_map(lambda x: mul(x, y), xs, fallback_to_while_loop=False)
        lo, hi = tf.vectorized_map(lambda a: min_max(a, b), a_s, fallback_to_while_loop=False)
        return prod, lo, hi

    run = tf.function(run) if in_function else run
    prod, lo, hi = run(xs, a_s)
    np.testing.assert_array_equal(prod.numpy(), xs.numpy() * y.numpy())
    np.testing.assert_array_equal(lo.numpy(), np.minimum(a_s.numpy(), b.numpy()))
    np.testing.assert_array_equal(hi.numpy(), np.maximum(a_s.numpy(), b.numpy()))
    if in_function:
        assert_vectorized(run, xs, a_s)


def test_the_lstm_cell_under_vectorized_map_equals_the_loop_and_tensorflow(bundle):
    cell = bundle("lstm_cell")
    zs, c = uniform(6, BATCH, 4 * HIDDEN), uniform(BATCH, HIDDEN)

    @tf.function
    def vectorized(zs):
        return tf.vectorized_map(lambda z: cell(z, c), zs, fallback_to_while_loop=False)

    @tf.function
    def loop(zs):
        return tf.map_fn(lambda z: cell(z, c), zs, fn_output_signature=[tf.float32] * 2)

    got, per_example = vectorized(zs), loop(zs)
    assert_vectorized(vectorized, zs)
    want = tf_cell(zs, c)
    for g, p, w in zip(got, per_example, want):
        assert g.shape == (6, BATCH, HIDDEN)
        # The batched program computes each example exactly as the program does.
        np.testing.assert_array_equal(g.numpy(), p.numpy())
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=2e-5, atol=2e-6)


def test_jacobians_of_the_lstm_cell_are_vectorized(bundle):
    cell = bundle("lstm_cell")
    z, c = uniform(BATCH, 4 * HIDDEN), uniform(BATCH, HIDDEN)

    def jacobians(fn, use_pfor):
        @tf.function
        def run(z):
            with tf.GradientTape(persistent=True) as tape:
                tape.watch(z)
                new_h = fn(z, c)[1]
            full = tape.jacobian(new_h, z, experimental_use_pfor=use_pfor)
            per_row = tape.batch_jacobian(new_h, z, experimental_use_pfor=use_pfor)
            return full, per_row

        return run

    vectorized = jacobians(cell, True)
    full, per_row = vectorized(z)
    assert full.shape == (BATCH, HIDDEN, BATCH, 4 * HIDDEN)
    assert per_row.shape == (BATCH, HIDDEN, 4 * HIDDEN)
    assert_vectorized(vectorized, z)
    # The while-loop version runs the gradient program once per row of new_h: the same values.
    looped = jacobians(cell, False)
    loop_full, loop_per_row = looped(z)
    # (The check of assert_vectorized sees a while loop when there is one.)
    assert {"While", "StatelessWhile"} & set(op_types(looped, z))
    np.testing.assert_array_equal(full.numpy(), loop_full.numpy())
    np.testing.assert_array_equal(per_row.numpy(), loop_per_row.numpy())
    # TensorFlow's own ops.
    tf_full, tf_per_row = jacobians(tf_cell, True)(z)
    np.testing.assert_allclose(full.numpy(), tf_full.numpy(), rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(per_row.numpy(), tf_per_row.numpy(), rtol=2e-5, atol=2e-6)
    # The diagonal blocks of the full jacobian are the batch jacobian.
    diag = np.stack([full.numpy()[b, :, b, :] for b in range(BATCH)])
    np.testing.assert_array_equal(diag, per_row.numpy())


@pytest.mark.parametrize("in_function", [False, True])
def test_gradient_through_vectorized_map(bundle, in_function):
    cell = bundle("lstm_cell")
    zs, c = uniform(5, BATCH, 4 * HIDDEN), uniform(BATCH, HIDDEN)
    w_c, w_h = uniform(5, BATCH, HIDDEN), uniform(5, BATCH, HIDDEN)

    def run(fn, zs, c):
        with tf.GradientTape() as tape:
            tape.watch([zs, c])
            new_c, new_h = tf.vectorized_map(
                lambda z: fn(z, c), zs, fallback_to_while_loop=False
            )
            loss = tf.reduce_sum(new_c * w_c) + tf.reduce_sum(new_h * w_h)
        return tape.gradient(loss, [zs, c])

    ovl_run = tf.function(run) if in_function else run
    dzs, dc = ovl_run(cell, zs, c)
    want_dzs, want_dc = run(tf_cell, zs, c)
    assert dzs.shape == zs.shape and dc.shape == c.shape
    np.testing.assert_allclose(dzs.numpy(), want_dzs.numpy(), rtol=2e-5, atol=2e-6)
    # c is shared by the examples: its gradient is the sum over them.
    np.testing.assert_allclose(dc.numpy(), want_dc.numpy(), rtol=2e-5, atol=1e-5)


def test_a_program_without_gradient_vectorizes(bundle):
    square = bundle("square_no_grad")
    xs = uniform(3, 6)
    got = tf.function(lambda xs: tf.vectorized_map(square, xs, fallback_to_while_loop=False))(xs)
    np.testing.assert_array_equal(got.numpy(), xs.numpy() ** 2)


def test_a_loop_length_known_only_at_run_time_is_vectorized(bundle):
    """A None leading dimension in the input signature: the op runs a program batched over a
    length known at run time (one op, no while loop), at every length."""
    square = bundle("square")

    @tf.function(input_signature=[tf.TensorSpec([None, 6], tf.float32)])
    def strict(xs):
        return tf.vectorized_map(square, xs, fallback_to_while_loop=False)

    assert_vectorized(strict)
    assert strict.get_concrete_function().structured_outputs.shape.as_list() == [None, 6]
    for n in [3, 1, 8, 0]:
        xs = uniform(n, 6)
        got = strict(xs)
        assert got.shape == (n, 6)
        np.testing.assert_array_equal(got.numpy(), xs.numpy() * xs.numpy())


def test_batched_programs_are_cached(bundle):
    from ovl_tf import _pfor

    square = bundle("square")
    xs = uniform(7, 6)
    fn = tf.function(lambda xs: tf.vectorized_map(square, xs, fallback_to_while_loop=False))
    fn(xs)
    cached = len(_pfor._cache)
    tf.function(lambda xs: tf.vectorized_map(square, xs, fallback_to_while_loop=False))(xs)
    assert len(_pfor._cache) == cached


def test_a_corrupt_program_is_refused_with_the_library_message(bundle):
    import ovl_tf
    from ovl_tf import _pfor

    square = bundle("square")
    broken = square.program[:-1] + bytes([square.program[-1] ^ 1])
    with pytest.raises(ValueError, match="modified or corrupted"):
        _pfor.batch_program(broken, b"", [True], 3, ovl_tf._library_file())


def test_nested_vectorized_maps_and_their_gradient(bundle):
    """The outer pfor batches the program the inner one batched; both gradients follow."""
    mul = bundle("mul")
    xs, y = uniform(3, 4, 5), uniform(4, 5)

    @tf.function
    def nested(xs, y):
        def inner(x):
            return tf.vectorized_map(
                lambda xy: mul(xy[0], xy[1]), (x, y), fallback_to_while_loop=False
            )

        return tf.vectorized_map(inner, xs, fallback_to_while_loop=False)

    with tf.GradientTape() as tape:
        tape.watch([xs, y])
        out = nested(xs, y)
        loss = tf.reduce_sum(out * out)
    dxs, dy = tape.gradient(loss, [xs, y])
    assert_vectorized(nested, xs, y)
    x_np, y_np = xs.numpy(), y.numpy()
    np.testing.assert_array_equal(out.numpy(), x_np * y_np)
    np.testing.assert_allclose(dxs.numpy(), 2 * x_np * y_np**2, rtol=1e-5)
    np.testing.assert_allclose(dy.numpy(), (2 * x_np**2 * y_np).sum(0), rtol=1e-5, atol=1e-6)


ANY = "lstm_cell_any_batch"  # the LSTM cell exported for any batch size (hidden 8)


@pytest.mark.parametrize("batch", [5, 1])
def test_vectorized_map_over_the_any_batch_cell_eagerly(bundle, batch):
    """Static shapes: the any-batch program batched over a known loop length."""
    cell = bundle(ANY)
    zs, c = uniform(3, batch, 4 * HIDDEN), uniform(batch, HIDDEN)
    got = tf.vectorized_map(lambda z: cell(z, c), zs, fallback_to_while_loop=False)
    for k, (g, w) in enumerate(zip(got, tf_cell(zs, c))):
        assert g.shape == (3, batch, HIDDEN)
        for i in range(3):
            # Each example is exactly what the program computes on it.
            np.testing.assert_array_equal(g.numpy()[i], cell(zs[i], c)[k].numpy())
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=2e-5, atol=2e-6)


def test_vectorized_map_over_the_any_batch_cell_with_none_sizes(bundle):
    """A tf.function whose signature leaves the loop length and the cell's batch None: one
    vectorized graph serves every size."""
    cell = bundle(ANY)
    spec = [tf.TensorSpec([None, None, 4 * HIDDEN]), tf.TensorSpec([None, HIDDEN])]

    @tf.function(input_signature=spec)
    def run(zs, c):
        return tf.vectorized_map(lambda z: cell(z, c), zs, fallback_to_while_loop=False)

    assert_vectorized(run)
    for n, batch in [(4, 3), (2, 7)]:
        zs, c = uniform(n, batch, 4 * HIDDEN), uniform(batch, HIDDEN)
        got = run(zs, c)
        for k, (g, w) in enumerate(zip(got, tf_cell(zs, c))):
            assert g.shape == (n, batch, HIDDEN)
            for i in range(n):
                np.testing.assert_array_equal(g.numpy()[i], cell(zs[i], c)[k].numpy())
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=2e-5, atol=2e-6)


def test_batch_jacobian_of_the_any_batch_cell_with_a_none_batch_is_vectorized(bundle):
    cell = bundle(ANY)

    def batch_jacobian(fn):
        @tf.function(
            input_signature=[tf.TensorSpec([None, 4 * HIDDEN]), tf.TensorSpec([None, HIDDEN])]
        )
        def run(z, c):
            with tf.GradientTape() as tape:
                tape.watch(z)
                new_h = fn(z, c)[1]
            return tape.batch_jacobian(new_h, z, experimental_use_pfor=True)

        return run

    ovl_run, tf_run = batch_jacobian(cell), batch_jacobian(tf_cell)
    assert_vectorized(ovl_run)
    for batch in [6, 2]:
        z, c = uniform(batch, 4 * HIDDEN), uniform(batch, HIDDEN)
        got = ovl_run(z, c)
        assert got.shape == (batch, HIDDEN, 4 * HIDDEN)
        np.testing.assert_allclose(got.numpy(), tf_run(z, c).numpy(), rtol=2e-5, atol=2e-6)


def test_per_example_gradients_with_a_none_batch(bundle):
    """vectorized_map of a GradientTape gradient: the gradient program batched over a loop
    length known at run time."""
    cell = bundle(ANY)
    w_h = uniform(HIDDEN)

    def per_example(fn):
        @tf.function(
            input_signature=[tf.TensorSpec([None, 4 * HIDDEN]), tf.TensorSpec([None, HIDDEN])]
        )
        def run(zs, cs):
            def grad(zc):
                z, c = zc[0][None], zc[1][None]
                with tf.GradientTape() as tape:
                    tape.watch([z, c])
                    new_c, new_h = fn(z, c)
                    loss = tf.reduce_sum(new_h * w_h) + tf.reduce_sum(new_c * new_c)
                dz, dc = tape.gradient(loss, [z, c])
                return dz[0], dc[0]

            return tf.vectorized_map(grad, (zs, cs), fallback_to_while_loop=False)

        return run

    ovl_run, tf_run = per_example(cell), per_example(tf_cell)
    assert_vectorized(ovl_run)
    for n in [5, 2]:
        zs, cs = uniform(n, 4 * HIDDEN), uniform(n, HIDDEN)
        got, want = ovl_run(zs, cs), tf_run(zs, cs)
        for g, w in zip(got, want):
            assert g.shape == w.shape
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=2e-5, atol=2e-6)

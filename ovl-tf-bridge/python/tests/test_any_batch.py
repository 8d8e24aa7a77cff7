"""Bundles exported with `ovl::as_tensorflow_polymorphic` (make_bundles.rs: the dense layer and
the LSTM cell for any batch size): the batch is `None` in TensorFlow, one compiled program runs
every batch size (eager, tf.function, Keras fit with a partial last batch, tf.data without
drop_remainder, MirroredStrategy with an uneven split, a SavedModel served in a fresh process),
and inputs that disagree about the batch are a clear error. Every value is checked against the
same computation in TensorFlow ops."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

RNG = np.random.default_rng(5)
HIDDEN, FEATURES, UNITS = 8, 3, 4


def tf_cell(z, c):
    i, j, f, o = tf.split(z, 4, axis=1)
    new_c = c * tf.sigmoid(f + 1.0) + tf.sigmoid(i) * tf.tanh(j)
    new_h = tf.tanh(new_c) * tf.sigmoid(o)
    return new_c, new_h


def lstm_inputs(batch):
    z = tf.constant(RNG.uniform(-2, 2, (batch, 4 * HIDDEN)), dtype=tf.float32)
    c = tf.constant(RNG.uniform(-2, 2, (batch, HIDDEN)), dtype=tf.float32)
    return z, c


def close(got, want, what):
    np.testing.assert_allclose(
        np.asarray(got), np.asarray(want), rtol=2e-5, atol=2e-6, err_msg=what
    )


def test_the_batch_is_none_in_the_bundle(bundle):
    cell = bundle("lstm_cell_any_batch")
    assert cell.symbols == ["batch"]
    assert [s.as_list() for _, _, s in cell.inputs] == [[None, 4 * HIDDEN], [None, HIDDEN]]
    assert [s.as_list() for _, s in cell.outputs] == [[None, HIDDEN], [None, HIDDEN]]


@pytest.mark.parametrize("batch", [0, 1, 7, 64])
def test_eager_calls_at_any_batch_size_match_tensorflow(bundle, batch):
    cell = bundle("lstm_cell_any_batch")
    z, c = lstm_inputs(batch)
    got = cell(z, c)
    want = tf_cell(z, c)
    for name, g, w in zip(["new_c", "new_h"], got, want):
        assert g.shape == (batch, HIDDEN), name
        close(g, w, f"{name} at batch {batch}")


def test_one_tf_function_with_a_none_batch_serves_every_size_with_gradients(bundle):
    cell = bundle("lstm_cell_any_batch")
    spec = [tf.TensorSpec([None, 4 * HIDDEN]), tf.TensorSpec([None, HIDDEN])]

    def step(fn):
        @tf.function(input_signature=spec)
        def run(z, c):
            with tf.GradientTape() as tape:
                tape.watch([z, c])
                new_c, new_h = fn(z, c)
                loss = tf.reduce_sum(new_c * 0.5) + tf.reduce_sum(new_h * new_h)
            return (new_c, new_h, *tape.gradient(loss, [z, c]))

        return run

    ovl_run, tf_run = step(cell), step(tf_cell)
    for batch in [1, 7, 64, 7]:
        z, c = lstm_inputs(batch)
        for name, g, w in zip(["new_c", "new_h", "dz", "dc"], ovl_run(z, c), tf_run(z, c)):
            assert g.shape[0] == batch, name
            close(g, w, f"{name} at batch {batch}")
    # One trace served every batch size.
    assert len(ovl_run._list_all_concrete_functions_for_serialization()) == 1
    # In the graph, the static batch is unknown and the rest is known.
    graph = ovl_run.get_concrete_function().graph
    outs = [op for op in graph.get_operations() if op.type == "DynamicLib"][0].outputs
    assert [o.shape.as_list() for o in outs] == [[None, HIDDEN], [None, HIDDEN]]


def test_a_known_batch_gives_a_static_output_shape(bundle):
    cell = bundle("lstm_cell_any_batch")

    @tf.function
    def run(z, c):
        new_c, _ = cell(z, c)
        assert new_c.shape.as_list() == [5, HIDDEN]
        return new_c

    run(*lstm_inputs(5))


def test_inputs_that_disagree_about_the_batch_are_a_clear_error(bundle):
    cell = bundle("lstm_cell_any_batch")
    z, _ = lstm_inputs(5)
    _, c = lstm_inputs(6)
    with pytest.raises(tf.errors.InvalidArgumentError) as e:
        cell(z, c)
    message = str(e.value)
    assert "batch = 6" in message and "batch = 5" in message, message
    assert "must have the same size" in message, message
    # A wrong fixed dimension is refused in Python already, naming the input.
    with pytest.raises(ValueError, match=r"input 1 \(`c`\)"):
        cell(z, tf.zeros([5, HIDDEN + 1]))


def dense_weights():
    w = RNG.uniform(-0.5, 0.5, (FEATURES, UNITS)).astype(np.float32)
    b = RNG.uniform(-0.1, 0.1, (UNITS,)).astype(np.float32)
    return w, b


def test_keras_fit_with_a_partial_last_batch_matches_a_keras_dense_layer(bundle_dir):
    import keras
    import ovl_tf

    x = RNG.standard_normal((250, FEATURES)).astype(np.float32)
    y = RNG.uniform(-0.9, 0.9, (250, UNITS)).astype(np.float32)
    w, b = dense_weights()

    def model(layer):
        inputs = keras.Input((FEATURES,))  # the batch is None
        m = keras.Model(inputs, layer(inputs))
        m.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
        return m

    ovl_layer = ovl_tf.Layer(
        bundle_dir / "dense_tanh_any_batch.json",
        trainable_inputs={"w": "zeros", "b": "zeros"},
    )
    ovl_model = model(ovl_layer)
    ovl_layer.set_weights([w, b])
    keras_layer = keras.layers.Dense(UNITS, activation="tanh")
    keras_model = model(keras_layer)
    keras_layer.set_weights([w, b])

    # 250 = 7 * 32 + 26: the last batch has 26 rows.
    h1 = ovl_model.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=0)
    h2 = keras_model.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=0)
    np.testing.assert_allclose(h1.history["loss"], h2.history["loss"], rtol=1e-4)
    for got, want in zip(ovl_layer.get_weights(), keras_layer.get_weights()):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    # predict's last batch is partial too.
    close(ovl_model.predict(x, batch_size=32, verbose=0),
          keras_model.predict(x, batch_size=32, verbose=0), "predict")


def test_tf_data_without_drop_remainder(bundle):
    cell = bundle("lstm_cell_any_batch")
    z = RNG.uniform(-2, 2, (100, 4 * HIDDEN)).astype(np.float32)
    c = RNG.uniform(-2, 2, (100, HIDDEN)).astype(np.float32)
    data = tf.data.Dataset.from_tensor_slices((z, c)).batch(32)  # 32, 32, 32, 4
    got = data.map(lambda z, c: cell(z, c)[1])
    sizes = []
    for (zb, cb), h in zip(data, got):
        sizes.append(h.shape[0])
        close(h, tf_cell(zb, cb)[1], "new_h")
    assert sizes == [32, 32, 32, 4]


# Fresh processes: logical devices must be configured before TensorFlow starts, and the
# SavedModel is served with only the bridge library and an empty operator cache.
MIRRORED = textwrap.dedent(
    """
    import sys
    import numpy as np
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import ovl_tf
    cell = ovl_tf.load(sys.argv[1])
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    z = np.load(sys.argv[2]); c = np.load(sys.argv[3])
    data = tf.data.Dataset.from_tensor_slices((z, c)).batch(len(z))
    dist = strategy.experimental_distribute_dataset(data)

    @tf.function
    def step(z, c):
        return cell(z, c)[1]

    for zb, cb in dist:
        per_replica = strategy.run(step, args=(zb, cb))
        parts = strategy.experimental_local_results(per_replica)
        print("ROWS", [int(p.shape[0]) for p in parts])
        np.save(sys.argv[4], np.concatenate([p.numpy() for p in parts]))
    """
)

SERVE = textwrap.dedent(
    """
    import os, sys
    import numpy as np
    import tensorflow as tf
    tf.load_op_library(os.environ["OVL_TF_LIBRARY"])
    model = tf.saved_model.load(sys.argv[1])
    for batch in (1, 7, 64):
        z = tf.constant(np.load(sys.argv[2])[:batch]); c = tf.constant(np.load(sys.argv[3])[:batch])
        np.save(sys.argv[4] + f".{batch}.npy", model.f(z, c).numpy())
    """
)


def run_script(tmp_path, script, args, **env):
    path = tmp_path / "script.py"
    path.write_text(script)
    proc = subprocess.run(
        [sys.executable, str(path), *map(str, args)],
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_mirrored_strategy_with_an_uneven_split(bundle_dir, tmp_path):
    z = RNG.uniform(-2, 2, (33, 4 * HIDDEN)).astype(np.float32)
    c = RNG.uniform(-2, 2, (33, HIDDEN)).astype(np.float32)
    np.save(tmp_path / "z.npy", z)
    np.save(tmp_path / "c.npy", c)
    out = tmp_path / "h.npy"
    stdout = run_script(
        tmp_path,
        MIRRORED,
        [bundle_dir / "lstm_cell_any_batch.json", tmp_path / "z.npy", tmp_path / "c.npy", out],
    )
    # 33 rows over two replicas: 17 and 16.
    assert "ROWS [17, 16]" in stdout, stdout
    close(np.load(out), tf_cell(z, c)[1], "new_h")


def test_savedmodel_with_a_none_batch_served_at_three_sizes_in_a_fresh_process(bundle, tmp_path):
    cell = bundle("lstm_cell_any_batch")
    module = tf.Module()
    module.f = tf.function(
        lambda z, c: cell(z, c)[1] * 2.0,
        input_signature=[tf.TensorSpec([None, 4 * HIDDEN]), tf.TensorSpec([None, HIDDEN])],
    )
    tf.saved_model.save(module, str(tmp_path / "model"))
    z = RNG.uniform(-2, 2, (64, 4 * HIDDEN)).astype(np.float32)
    c = RNG.uniform(-2, 2, (64, HIDDEN)).astype(np.float32)
    np.save(tmp_path / "z.npy", z)
    np.save(tmp_path / "c.npy", c)
    cache = tmp_path / "empty-cache"
    run_script(
        tmp_path,
        SERVE,
        [tmp_path / "model", tmp_path / "z.npy", tmp_path / "c.npy", tmp_path / "out"],
        OVL_CACHE_DIR=str(cache),
    )
    for batch in (1, 7, 64):
        got = np.load(tmp_path / f"out.{batch}.npy")
        close(got, tf_cell(z[:batch], c[:batch])[1] * 2.0, f"batch {batch}")
    # One compiled library served the three sizes.
    assert len(sorted(cache.glob("v*/cpu/*/op.so"))) == 1

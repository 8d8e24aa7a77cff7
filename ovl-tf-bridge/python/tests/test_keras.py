"""ovl_tf.Layer: a Keras 3 layer around a bundle (the dense layer `tanh(x @ w + b)` exported by
make_bundles with ovl-stdlib, w and b its weights). Its gradient matches TensorFlow's own for
the same formula; a model with it trains, is saved to .keras with the program embedded, and
reloads in a fresh process that imports only ovl_tf (and keras to load the file), after the
bundle file is gone."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile

import keras
import numpy as np
import pytest
import tensorflow as tf

import ovl_tf

RNG = np.random.default_rng(17)
BATCH, FEATURES, UNITS = 8, 3, 4

RELOAD = textwrap.dedent(
    """
    import sys
    import numpy as np
    import keras
    import ovl_tf  # registers ovl_tf>Layer and the op's gradient
    model = keras.saving.load_model(sys.argv[1])
    np.save(sys.argv[3], model.predict(np.load(sys.argv[2]), batch_size=8, verbose=0))
    """
)


def reference(x, w, b):
    return tf.tanh(tf.matmul(x, w) + b)


def test_the_layer_gradient_matches_tensorflow(bundle_dir):
    w0 = RNG.standard_normal((FEATURES, UNITS)).astype(np.float32)
    b0 = RNG.standard_normal(UNITS).astype(np.float32)
    layer = ovl_tf.Layer(
        bundle_dir / "dense_tanh.json",
        trainable_inputs={
            "w": keras.initializers.Constant(w0),
            "b": keras.initializers.Constant(b0),
        },
    )
    assert [v.name for v in layer.trainable_variables] == ["w", "b"]
    x = tf.constant(RNG.standard_normal((BATCH, FEATURES)).astype(np.float32))
    upstream = tf.constant(RNG.standard_normal((BATCH, UNITS)).astype(np.float32))
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x)
        loss = tf.reduce_sum(y * upstream)
    dx, dw, db = tape.gradient(loss, [x] + layer.trainable_variables)

    tw, tb = tf.Variable(w0), tf.Variable(b0)
    with tf.GradientTape() as tape:
        tape.watch(x)
        want_y = reference(x, tw, tb)
        loss = tf.reduce_sum(want_y * upstream)
    want = tape.gradient(loss, [x, tw, tb])
    np.testing.assert_allclose(y.numpy(), want_y.numpy(), rtol=1e-5, atol=1e-6)
    for got, exp in zip([dx, dw, db], want):
        np.testing.assert_allclose(got.numpy(), exp.numpy(), rtol=1e-5, atol=1e-5)


def test_a_model_trains_saves_to_keras_and_reloads_in_a_fresh_process(bundle_dir, tmp_path):
    # A copy of the bundle, deleted before the reload: the .keras file must not need it.
    path = tmp_path / "dense_tanh.json"
    shutil.copy(bundle_dir / "dense_tanh.json", path)
    keras.utils.set_random_seed(3)
    inputs = keras.Input(shape=(FEATURES,), batch_size=BATCH)
    hidden = ovl_tf.Layer(path, trainable_inputs={"w": "glorot_uniform", "b": "zeros"})(inputs)
    model = keras.Model(inputs, keras.layers.Dense(1)(hidden))
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    layer = model.layers[1]
    assert isinstance(layer, ovl_tf.Layer)
    w_before = layer.trainable_variables[0].numpy().copy()
    x = RNG.standard_normal((4 * BATCH, FEATURES)).astype(np.float32)
    target = np.sin(x.sum(axis=1, keepdims=True)).astype(np.float32)
    history = model.fit(x, target, batch_size=BATCH, epochs=3, shuffle=False, verbose=0)
    losses = history.history["loss"]
    assert losses[-1] < losses[0], losses
    # The gradient reached the ovl layer's weights.
    assert not np.allclose(layer.trainable_variables[0].numpy(), w_before)
    want = model.predict(x, batch_size=BATCH, verbose=0)

    saved = tmp_path / "model.keras"
    model.save(saved)
    path.unlink()
    with zipfile.ZipFile(saved) as z:
        config = z.read("config.json").decode()
    assert str(path) not in config and "dense_tanh.json" not in config
    layers = json.loads(config)["config"]["layers"]
    (entry,) = [l for l in layers if l.get("registered_name") == "ovl_tf>Layer"]
    assert entry["config"]["bundle"]["program"] == ovl_tf.load(
        bundle_dir / "dense_tanh.json"
    ).bundle["program"]

    script = tmp_path / "reload.py"
    script.write_text(RELOAD)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out.npy"
    proc = subprocess.run(
        [sys.executable, str(script), str(saved), str(tmp_path / "x.npy"), str(out)],
        cwd=tmp_path,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    np.testing.assert_array_equal(np.load(out), want)


def test_layer_errors_name_the_program_and_its_inputs(bundle_dir):
    with pytest.raises(ValueError, match=r"no input named 'v'.*inputs: x, w, b"):
        ovl_tf.Layer(bundle_dir / "dense_tanh.json", trainable_inputs={"v": "zeros"})
    layer = ovl_tf.Layer(bundle_dir / "dense_tanh.json", trainable_inputs={"w": "zeros"})
    with pytest.raises(TypeError, match=r"takes 2 input\(s\) \(x, b\), 1 given"):
        layer(tf.zeros([BATCH, FEATURES]))
    with pytest.raises(ValueError, match="only floating-point"):
        ovl_tf.Layer(bundle_dir / "mul_add_i32.json", trainable_inputs={"a": "zeros"})


RAW_GRADIENT = textwrap.dedent(
    """
    import json, sys
    import tensorflow as tf
    import ovl_tf  # registers the gradient of DynamicLib; the library is loaded below
    module = tf.load_op_library(str(ovl_tf.library_path()))
    p = ovl_tf.Program(json.load(open(sys.argv[1])))
    x = tf.constant([1.0, -2.0, 3.0, 0.5, 0.0, 4.0])
    with tf.GradientTape() as tape:
        tape.watch(x)
        (y,) = module.dynamic_lib(inputs=[x], out_types=[tf.float32], out_shapes=[[6]],
                                  program=p.program, gradient=p.gradient)
    print(tape.gradient(y, x).numpy().tolist())
    """
)


def test_the_gradient_is_registered_by_importing_ovl_tf(bundle_dir, tmp_path):
    """Serving code that imports ovl_tf but loads the library with tf.load_op_library itself
    still differentiates through the op."""
    script = tmp_path / "raw.py"
    script.write_text(RAW_GRADIENT)
    proc = subprocess.run(
        [sys.executable, str(script), str(bundle_dir / "square.json")],
        cwd=tmp_path,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [2.0, -4.0, 6.0, 1.0, 0.0, 8.0]

"""TensorFlow tensors into `program(..)` eagerly through DLPack (issue 49, item 7): an
`EagerTensor` itself (its `__dlpack__`) and the capsule of `tf.experimental.dlpack.to_dlpack`;
TensorFlow in, TensorFlow out; values against TensorFlow's own ops. On the CPU (TensorFlow's
GPU tensors are refused, naming the input: docs/python.md says why and what a GPU handoff
costs). In a fresh process: TensorFlow stays out of the other tests' process."""

import importlib.util
import os
import subprocess
import sys
import textwrap

CHECK = textwrap.dedent(
    """
    import sys
    import numpy as np
    import tensorflow as tf
    import ovl

    bundles = sys.argv[1]
    f = ovl.load(f"{bundles}/scale_add.json")
    rng = np.random.default_rng(5)
    x = tf.constant(rng.standard_normal((4, 5)).astype(np.float32))
    b = tf.constant(rng.standard_normal((4, 5)).astype(np.float32))
    want = (2.0 * x + b).numpy()

    # The tensors themselves: TensorFlow in, TensorFlow out.
    y = f(x, b)
    assert isinstance(y, tf.Tensor), type(y)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-6)

    # Through tf.experimental.dlpack.to_dlpack: capsules in (NumPy out: a capsule names no
    # framework); a capsule is taken once.
    cx = tf.experimental.dlpack.to_dlpack(x)
    y = f(cx, tf.experimental.dlpack.to_dlpack(b))
    assert isinstance(y, np.ndarray), type(y)
    np.testing.assert_allclose(y, want, rtol=1e-6)
    try:
        f(cx, b)
    except ValueError as e:
        assert "input 0 (`x`)" in str(e) and "already consumed" in str(e), e
    else:
        raise AssertionError("a consumed capsule was taken twice")

    # Two outputs, a polymorphic batch, int32 through TensorFlow.
    lstm = ovl.load(f"{bundles}/lstm_cell.json")
    z = tf.constant(rng.standard_normal((4, 32)).astype(np.float32))
    c = tf.constant(rng.standard_normal((4, 8)).astype(np.float32))
    new_c, new_h = lstm(z, c)
    i, j, g, o = tf.split(z, 4, axis=1)
    want_c = c * tf.sigmoid(g + 1.0) + tf.sigmoid(i) * tf.tanh(j)
    np.testing.assert_allclose(new_c.numpy(), want_c.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        new_h.numpy(), (tf.tanh(want_c) * tf.sigmoid(o)).numpy(), rtol=1e-5, atol=1e-6
    )
    rows = ovl.load(f"{bundles}/scale_rows_any_batch.json")
    for batch in (1, 9):
        xs = tf.constant(rng.standard_normal((batch, 5)).astype(np.float32))
        s = tf.constant(rng.standard_normal(batch).astype(np.float32))
        y, sums = rows(xs, s)
        np.testing.assert_allclose(y.numpy(), (xs * s[:, None]).numpy(), rtol=1e-6)

    # Errors name the input; the next call works.
    try:
        f(x, tf.constant(np.zeros((4, 5), np.float64)))
    except TypeError as e:
        assert "input 1 (`b`)" in str(e), e
    else:
        raise AssertionError("a float64 tensor was taken")
    np.testing.assert_allclose(f(x, b).numpy(), want, rtol=1e-6)
    print("tensorflow: ran")
    """
)


def test_tensorflow_tensors_through_dlpack(bundle_dir, tmp_path):
    if importlib.util.find_spec("tensorflow") is None:
        print("test_tensorflow_tensors_through_dlpack: did not run: TensorFlow is not installed")
        return
    script = tmp_path / "tf_check.py"
    script.write_text(CHECK)
    done = subprocess.run(
        [sys.executable, str(script), str(bundle_dir)],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    assert "tensorflow: ran" in done.stdout

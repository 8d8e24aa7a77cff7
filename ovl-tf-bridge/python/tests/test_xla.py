"""`DynamicLib` inside `tf.function(jit_compile=True)` on the CPU (`ovl_tf.enable_xla`, which
compiles the XLA kernel of `ovl_tf/xla/dynamic_lib_xla.cc` against TensorFlow's headers): the
cluster holds an XLA custom call running the program, forward and backward, with the values of
the same computation in TensorFlow ops; without `enable_xla` it is a clear error; attributes that
do not fit the program are a clear error at compilation."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import ovl_tf

HIDDEN = 8


def tf_cell(z, c):
    i, j, f, o = tf.split(z, 4, axis=1)
    new_c = c * tf.sigmoid(f + 1.0) + tf.sigmoid(i) * tf.tanh(j)
    new_h = tf.tanh(new_c) * tf.sigmoid(o)
    return new_c, new_h


def close(got, want, what):
    np.testing.assert_allclose(
        np.asarray(got), np.asarray(want), rtol=2e-5, atol=2e-6, err_msg=what
    )


def test_without_enable_xla_a_jit_compiled_call_is_a_clear_error(bundle_dir):
    # A fresh process: enable_xla is once per process.
    script = textwrap.dedent(
        f"""
        import tensorflow as tf, ovl_tf
        f = ovl_tf.load({str(bundle_dir / "add_one.json")!r})
        try:
            tf.function(lambda x: f(x), jit_compile=True)(tf.zeros(4))
        except NotImplementedError as e:
            print("ERROR", e)
        """
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    assert "ERROR ovl program `add_one` inside tf.function(jit_compile=True)" in done.stdout
    assert "ovl_tf.enable_xla()" in done.stdout


@pytest.fixture(scope="module")
def xla():
    path = ovl_tf.enable_xla()
    assert ovl_tf.xla_enabled() and path.is_file()
    assert ovl_tf.enable_xla() == path, "a second call does nothing"
    return path


def test_a_chain_runs_as_custom_calls_in_one_cluster(bundle, xla):
    f = bundle("add_one")
    run = tf.function(lambda x: f(f(x)) * 2.0, jit_compile=True)
    x = tf.constant([1.0, -2.0, 3.5, 0.0])
    np.testing.assert_array_equal(run(x).numpy(), ((x + 2.0) * 2.0).numpy())
    hlo = run.experimental_get_compiler_ir(x)(stage="hlo")
    assert hlo.count('custom_call_target="ovl_dynamic_lib"') == 2, hlo


@pytest.mark.parametrize("name,batch", [("lstm_cell", 4), ("lstm_cell_any_batch", 4),
                                        ("lstm_cell_any_batch", 13)])
def test_the_lstm_cell_forward_and_backward_in_xla(bundle, xla, name, batch):
    cell = bundle(name)
    rng = np.random.default_rng(batch)
    z = tf.constant(rng.uniform(-2, 2, (batch, 4 * HIDDEN)), dtype=tf.float32)
    c = tf.constant(rng.uniform(-2, 2, (batch, HIDDEN)), dtype=tf.float32)

    def step(fn):
        def run(z, c):
            with tf.GradientTape() as tape:
                tape.watch([z, c])
                new_c, new_h = fn(z, c)
                loss = tf.reduce_sum(new_c * 0.5) + tf.reduce_sum(new_h * new_h)
            return (new_c, new_h, *tape.gradient(loss, [z, c]))

        return run

    got = tf.function(step(cell), jit_compile=True)(z, c)
    want = step(tf_cell)(z, c)
    for what, g, w in zip(["new_c", "new_h", "dz", "dc"], got, want):
        close(g, w, f"{name} {what} at batch {batch}")


def test_attributes_that_do_not_fit_the_program_fail_the_compilation(bundle, xla):
    f = bundle("add_one")
    run = tf.function(
        lambda x: ovl_tf.dynamic_lib([x], f.program, [tf.float32], [[4]], name="wrong")[0],
        jit_compile=True,
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"float32\[5\], but the program"):
        run(tf.zeros(5))
    # The right shape compiles and runs.
    np.testing.assert_array_equal(run(tf.zeros(4)).numpy(), np.ones(4, np.float32))

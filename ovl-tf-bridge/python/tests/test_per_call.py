"""What one call of `DynamicLib` does besides running the program (ovl-tf-bridge/src/compute.rs):
a kernel instance keeps the binding of the shapes it ran last and rebinds on other shapes (also
from several threads at once), a small program runs on TensorFlow's calling thread (no ovl
thread is started) while a large one may use ovl's thread pool, both giving the same values,
and a wrong shape after good calls is still a clear error that leaves the node usable. Every
value is checked against the same computation in TensorFlow ops."""

import os
import subprocess
import sys
import textwrap
import threading

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


def lstm_inputs(batch, seed):
    rng = np.random.default_rng(seed)
    z = tf.constant(rng.uniform(-2, 2, (batch, 4 * HIDDEN)), dtype=tf.float32)
    c = tf.constant(rng.uniform(-2, 2, (batch, HIDDEN)), dtype=tf.float32)
    return z, c


def close(got, want, what):
    np.testing.assert_allclose(
        np.asarray(got), np.asarray(want), rtol=2e-5, atol=2e-6, err_msg=what
    )


def cell_with_gradients(cell):
    spec = [tf.TensorSpec([None, 4 * HIDDEN]), tf.TensorSpec([None, HIDDEN])]

    @tf.function(input_signature=spec)
    def run(z, c):
        with tf.GradientTape() as tape:
            tape.watch([z, c])
            new_c, new_h = cell(z, c)
            loss = tf.reduce_sum(new_c * 0.5) + tf.reduce_sum(new_h * new_h)
        return (new_c, new_h, *tape.gradient(loss, [z, c]))

    return run


def test_one_node_rebinds_when_the_batch_changes_and_back(bundle):
    cell = bundle("lstm_cell_any_batch")
    ovl_run, tf_run = cell_with_gradients(cell), cell_with_gradients(tf_cell)
    # The same node (forward and gradient op) sees the sizes change at every call, and repeat.
    for k, batch in enumerate([3, 3, 5, 3, 1, 5, 5, 64, 3]):
        z, c = lstm_inputs(batch, k)
        for name, g, w in zip(["new_c", "new_h", "dz", "dc"], ovl_run(z, c), tf_run(z, c)):
            assert g.shape[0] == batch, name
            close(g, w, f"{name} at batch {batch} (call {k})")


def test_calls_from_several_threads_with_different_batches(bundle):
    cell = bundle("lstm_cell_any_batch")
    ovl_run = cell_with_gradients(cell)
    ovl_run(*lstm_inputs(2, 0))  # trace once
    errors = []

    def worker(batch):
        try:
            for k in range(20):
                z, c = lstm_inputs(batch, 100 * batch + k)
                got = ovl_run(z, c)
                want = tf_cell(z, c)
                close(got[0], want[0], f"new_c at batch {batch}")
                close(got[1], want[1], f"new_h at batch {batch}")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(b,)) for b in (1, 4, 9, 16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_a_wrong_shape_after_good_calls_is_a_clear_error_and_the_node_works_on(bundle):
    f = bundle("scale_add")
    g = tf.function(f.__call__, input_signature=[tf.TensorSpec([None, 5], tf.float32)])
    x = tf.constant(np.arange(20, dtype=np.float32).reshape(4, 5))
    first = g(x).numpy()
    np.testing.assert_array_equal(g(x).numpy(), first)
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=r"input 0 \(`x`\) is float32\[3, 5\], but the program was exported for "
        r"float32\[4, 5\]",
    ):
        g(tf.zeros((3, 5)))
    np.testing.assert_array_equal(g(x).numpy(), first)


# Runs in a fresh process (the threshold is read once per process): the LSTM cell at a batch
# whose kernel is large enough for ovl's runtime to split it, forward and backward, and a
# small call; prints whether an ovl thread was started, and saves the values.
_CHILD = textwrap.dedent(
    """
    import os, sys
    import numpy as np
    import tensorflow as tf
    import ovl_tf

    cell = ovl_tf.load(sys.argv[1])
    rng = np.random.default_rng(7)
    batch = 8192
    z = tf.constant(rng.uniform(-2, 2, (batch, 32)), dtype=tf.float32)
    c = tf.constant(rng.uniform(-2, 2, (batch, 8)), dtype=tf.float32)

    @tf.function
    def run(z, c):
        with tf.GradientTape() as tape:
            tape.watch([z, c])
            new_c, new_h = cell(z, c)
            loss = tf.reduce_sum(new_c * 0.5) + tf.reduce_sum(new_h * new_h)
        return (new_c, new_h, *tape.gradient(loss, [z, c]))

    small = cell(z[:2], c[:2])
    out = [t.numpy() for t in run(z, c)] + [t.numpy() for t in small]
    np.savez(sys.argv[2], *out)
    names = [open(f"/proc/self/task/{t}/comm").read().strip()
             for t in os.listdir("/proc/self/task")]
    print("ovl threads:", sum(n.startswith("ovl-cpu") for n in names))
    """
)


def _run_child(bundle_dir, tmp_path, min_work):
    out = tmp_path / f"out-{min_work}.npz"
    env = dict(os.environ, OVL_TF_PARALLEL_MIN_WORK=str(min_work))
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(bundle_dir / "lstm_cell_any_batch.json"), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    threads = int(done.stdout.split("ovl threads:")[1].split()[0])
    with np.load(out) as data:
        return [data[f"arr_{k}"] for k in range(len(data.files))], threads


def test_inline_and_threaded_runs_give_the_same_values(bundle_dir, tmp_path):
    if (os.cpu_count() or 1) < 2:
        print("THE THREADED RUN DID NOT RUN: this machine has one CPU")
    # 0: as outside TensorFlow, the runtime splits what is large; a huge threshold: every run
    # stays on TensorFlow's thread.
    threaded, threaded_count = _run_child(bundle_dir, tmp_path, 0)
    inline, inline_count = _run_child(bundle_dir, tmp_path, 1 << 62)
    assert inline_count == 0, "a run on TensorFlow's thread starts no ovl thread"
    if (os.cpu_count() or 1) >= 2:
        assert threaded_count > 0, "the large kernel was split over ovl's threads"
    for k, (a, b) in enumerate(zip(inline, threaded)):
        np.testing.assert_array_equal(a, b, err_msg=f"output {k}")
    rng = np.random.default_rng(7)
    z = tf.constant(rng.uniform(-2, 2, (8192, 32)), dtype=tf.float32)
    c = tf.constant(rng.uniform(-2, 2, (8192, 8)), dtype=tf.float32)
    with tf.GradientTape() as tape:
        tape.watch([z, c])
        new_c, new_h = tf_cell(z, c)
        loss = tf.reduce_sum(new_c * 0.5) + tf.reduce_sum(new_h * new_h)
    want = [new_c, new_h, *tape.gradient(loss, [z, c]), *tf_cell(z[:2], c[:2])]
    for k, (got, w) in enumerate(zip(inline, want)):
        close(got, w, f"output {k}")


def test_the_call_takes_name_as_its_only_keyword(bundle):
    f = bundle("add_one")
    x = tf.constant([1.0, 2.0, 3.0, 4.0])
    np.testing.assert_array_equal(f(x, name="first").numpy(), (x + 1.0).numpy())
    g = tf.function(lambda x: f(x, name="in_graph"))
    graph = g.get_concrete_function(x).graph
    assert [op.name for op in graph.get_operations() if op.type == "DynamicLib"] == ["in_graph"]
    with pytest.raises(TypeError, match=r"takes the keyword argument `name` only, not 'nmae'"):
        f(x, nmae="typo")


def test_nodes_of_one_program_share_its_loading_and_binding_with_their_gradient_nodes(bundle):
    """Three chained calls of the fixed-shape cell and their three gradient nodes in one
    tf.function: the kernels of the forward program share one loaded program and its binding,
    and so do the gradient program's (at most one load and one fixed binding per program; the
    other kernels reuse them), with the values and gradients of TensorFlow's own cell."""
    from ovl_tf._kernel import program_stats

    cell = bundle("lstm_cell")
    z0, c0 = lstm_inputs(4, 31)
    z1, _ = lstm_inputs(4, 32)
    z2, _ = lstm_inputs(4, 33)
    w = tf.constant(np.random.default_rng(34).uniform(-1, 1, (4, HIDDEN)), dtype=tf.float32)

    def chain(fn, z0, z1, z2, c0):
        with tf.GradientTape() as tape:
            tape.watch([z0, z1, z2, c0])
            c, hs = c0, []
            for z in [z0, z1, z2]:
                c, h = fn(z, c)
                hs.append(h)
            loss = tf.reduce_sum(c * w) + tf.add_n([tf.reduce_sum(h) for h in hs])
        return [c, hs[-1]] + tape.gradient(loss, [z0, z1, z2, c0])

    run_ovl = tf.function(lambda *args: chain(cell, *args))
    run_tf = tf.function(lambda *args: chain(tf_cell, *args))

    before = program_stats()
    got = run_ovl(z0, z1, z2, c0)
    after = program_stats()
    want = run_tf(z0, z1, z2, c0)
    for name, g, w_ in zip(["c", "h", "dz0", "dz1", "dz2", "dc0"], got, want):
        close(g, w_, name)
    loads = after["loads"] - before["loads"]
    reuses = after["reuses"] - before["reuses"]
    bindings = after["fixed_bindings"] - before["fixed_bindings"]
    # Six kernels (three forward, three gradient nodes; TensorFlow may construct more, e.g.
    # while optimizing the graph): each program loaded and bound at most once.
    assert loads <= 2, (before, after)
    assert bindings == loads, (before, after)
    assert loads + reuses >= 6, (before, after)
    assert reuses >= 4, (before, after)

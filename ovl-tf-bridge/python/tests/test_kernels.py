"""The two CPU kernels of DynamicLib: the C++ kernel that ovl_tf compiles against TensorFlow's
headers (the default, which every other test in this directory runs) and the bridge's C-API
kernel, the fallback without a compiler (`$OVL_TF_KERNEL=c-api`). Each runs in a fresh process
(TensorFlow picks a node's kernel once per process): the same values, gradients, batch sizes
and error messages, checked against the same computation in TensorFlow ops. A bad
`$OVL_TF_KERNEL` and a compiler that fails are clear: an error when the C++ kernel is required,
a warning and the C-API kernel otherwise."""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import ovl_tf

HIDDEN = 8
BATCHES = [0, 1, 7]

# Runs in the fresh process: prints one JSON line with the kernel's kind, the LSTM cell's outputs
# and gradients at each batch size (eager and inside one tf.function), the fixed-shape cell's,
# and the kernels' error messages.
RUN = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    import numpy as np
    import tensorflow as tf
    import ovl_tf
    bundles = Path(sys.argv[1])
    rng = np.random.default_rng(11)
    H = 8
    out = {"kind": ovl_tf.kernel_kind(), "cells": [], "errors": []}
    any_batch = ovl_tf.load(bundles / "lstm_cell_any_batch.json")
    fixed = ovl_tf.load(bundles / "lstm_cell.json")

    def run(cell, z, c):
        with tf.GradientTape() as tape:
            tape.watch([z, c])
            new_c, new_h = cell(z, c)
            loss = tf.reduce_sum(new_c * 0.5) + tf.reduce_sum(new_h * new_h)
        dz, dc = tape.gradient(loss, [z, c])
        return [t.numpy().tolist() for t in (new_c, new_h, dz, dc)]

    spec = [tf.TensorSpec([None, 4 * H]), tf.TensorSpec([None, H])]
    graph = tf.function(lambda z, c: run_graph(z, c), input_signature=spec)

    def run_graph(z, c):
        with tf.GradientTape() as tape:
            tape.watch([z, c])
            new_c, new_h = any_batch(z, c)
            loss = tf.reduce_sum(new_c * 0.5) + tf.reduce_sum(new_h * new_h)
        dz, dc = tape.gradient(loss, [z, c])
        return new_c, new_h, dz, dc

    for name, cell, batches in [("any", any_batch, [0, 1, 7]),
                                ("fixed", fixed, [fixed.inputs[0][2][0]])]:
        for b in batches:
            z = rng.uniform(-2, 2, (b, 4 * H)).astype(np.float32)
            c = rng.uniform(-2, 2, (b, H)).astype(np.float32)
            eager = run(cell, tf.constant(z), tf.constant(c))
            row = {"cell": name, "z": z.tolist(), "c": c.tolist(), "eager": eager}
            if name == "any":
                row["graph"] = [t.numpy().tolist() for t in graph(z, c)]
            out["cells"].append(row)

    scale_add = ovl_tf.load(bundles / "scale_add.json")
    for args in ([tf.zeros((4, 6))], [tf.zeros((4, 5), tf.int32)]):
        try:
            ovl_tf.dynamic_lib(args, scale_add.program, [tf.float32], [[4, 5]])
            out["errors"].append(None)
        except tf.errors.OpError as e:
            out["errors"].append([type(e).__name__, e.message])
    print("RESULT " + json.dumps(out))
    """
)


def tf_cell(z, c):
    i, j, f, o = tf.split(z, 4, axis=1)
    new_c = c * tf.sigmoid(f + 1.0) + tf.sigmoid(i) * tf.tanh(j)
    new_h = tf.tanh(new_c) * tf.sigmoid(o)
    return new_c, new_h


def reference(z, c):
    z, c = tf.constant(z, tf.float32, shape=(len(z), 4 * HIDDEN)), tf.constant(
        c, tf.float32, shape=(len(c), HIDDEN)
    )
    with tf.GradientTape() as tape:
        tape.watch([z, c])
        new_c, new_h = tf_cell(z, c)
        loss = tf.reduce_sum(new_c * 0.5) + tf.reduce_sum(new_h * new_h)
    dz, dc = tape.gradient(loss, [z, c])
    return [t.numpy() for t in (new_c, new_h, dz, dc)]


def run_with(bundle_dir, tmp_path, **env):
    script = tmp_path / "run.py"
    script.write_text(RUN)
    done = subprocess.run(
        [sys.executable, str(script), str(bundle_dir)],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=600,
    )
    lines = [l for l in done.stdout.splitlines() if l.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT "):]), done.stderr


def has_compiler():
    return any(shutil.which(c) for c in [os.environ.get("CXX") or "", "c++", "g++", "clang++"] if c)


def test_this_process_runs_the_cc_kernel():
    """Every other test of this directory runs the C++ kernel: where a compiler exists, the
    default (`auto`) must not have fallen back."""
    choice = os.environ.get("OVL_TF_KERNEL", "auto")
    if choice == "c-api":
        assert ovl_tf.kernel_kind() == "c-api"
    elif not has_compiler():
        pytest.skip("no C++ compiler: the C++ kernel cannot be built (the C-API kernel runs)")
    else:
        assert ovl_tf.kernel_kind() == "c++"


@pytest.mark.parametrize("kind", ["c++", "c-api"])
def test_both_kernels_compute_the_same_values_gradients_and_errors(bundle_dir, tmp_path, kind):
    if kind == "c++" and not has_compiler():
        pytest.skip("no C++ compiler: the C++ kernel cannot be built")
    got, _ = run_with(bundle_dir, tmp_path, OVL_TF_KERNEL=kind)
    assert got["kind"] == kind
    seen = set()
    for row in got["cells"]:
        want = reference(row["z"], row["c"])
        b = len(row["z"])
        seen.add((row["cell"], b))
        for variant in ["eager", "graph"] if "graph" in row else ["eager"]:
            for name, g, w in zip(["new_c", "new_h", "dz", "dc"], row[variant], want):
                g = np.asarray(g, np.float32).reshape(w.shape)
                np.testing.assert_allclose(
                    g, w, rtol=2e-5, atol=2e-5, err_msg=f"{kind} {row['cell']} {variant} {name} b={b}"
                )
    assert {("any", b) for b in BATCHES} <= seen
    assert any(cell == "fixed" for cell, _ in seen)
    shape_error, dtype_error = got["errors"]
    assert shape_error[0] == "InvalidArgumentError"
    assert "is float32[4, 6], but the program was exported for float32[4, 5]" in shape_error[1]
    assert dtype_error[0] == "InvalidArgumentError"
    assert "has dtype int32, but program `scale_add` was exported for float32" in dtype_error[1]


def test_a_bad_choice_is_a_clear_error(bundle_dir, tmp_path):
    script = tmp_path / "bad.py"
    script.write_text("import ovl_tf\novl_tf.load_library()\n")
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        env={**os.environ, "OVL_TF_KERNEL": "fast"},
        timeout=600,
    )
    assert done.returncode != 0
    assert "OVL_TF_KERNEL='fast': expected one of auto, c++, c-api" in done.stderr


def test_a_failing_compiler_falls_back_with_a_warning_or_is_an_error(bundle_dir, tmp_path):
    broken = tmp_path / "broken-cxx"
    broken.write_text("#!/bin/sh\necho 'broken compiler' >&2\nexit 1\n")
    broken.chmod(0o755)
    # A fresh operator cache, so that the kernel is compiled (by the broken compiler), not
    # found; only the choice of kernel runs (no program: ovl would need the compiler too).
    env = {"CXX": str(broken), "OVL_CACHE_DIR": str(tmp_path / "cache")}
    script = tmp_path / "choose.py"
    script.write_text(
        "import warnings, ovl_tf\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    kind = ovl_tf.kernel_kind()\n"
        "print('KIND', kind)\n"
        "print('WARNINGS', [str(x.message) for x in w])\n"
    )
    auto = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True,
        env={**os.environ, **env, "OVL_TF_KERNEL": "auto"}, timeout=600,
    )
    assert auto.returncode == 0, auto.stderr[-3000:]
    assert "KIND c-api" in auto.stdout
    assert "runs through its C-API kernel" in auto.stdout and "broken compiler" in auto.stdout
    required = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True,
        env={**os.environ, **env, "OVL_TF_KERNEL": "c++"}, timeout=600,
    )
    assert required.returncode != 0
    assert "OVL_TF_KERNEL=c++: compiling the C++ kernel of DynamicLib" in required.stderr
    assert "broken compiler" in required.stderr

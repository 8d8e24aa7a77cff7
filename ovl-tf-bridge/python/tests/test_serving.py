"""Serving without a C++ compiler: a bundle exported with `embed_libraries(true)` carries the
compiled libraries of its operators (forward and gradient) for the exporting machine, and runs
in a fresh process whose PATH has no C++ compiler (CXX unset) and whose operator cache is empty,
through ovl_tf and as a SavedModel loaded with tf.load_op_library. A bundle whose libraries
were compiled for another machine (another target key) is compiled instead when there is a
compiler, and is a clear error when there is none. An edited library is refused (the program's
digest covers it)."""

import base64
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import ovl_tf

RNG = np.random.default_rng(23)
BATCH, FEATURES, UNITS = 8, 3, 4

# Runs in the fresh process. Prints one JSON line: the forward output and the gradients, or
# the error's class and message.
SERVE = textwrap.dedent(
    """
    import json, os, shutil, sys
    import numpy as np
    import tensorflow as tf
    import ovl_tf
    found = {c: shutil.which(c) for c in ("c++", "g++", "clang++", "cc", "gcc")}
    x, w, b, upstream = (tf.constant(v) for v in np.load(sys.argv[2]).values())
    try:
        f = ovl_tf.load(sys.argv[1])
        with tf.GradientTape() as tape:
            tape.watch([x, w, b])
            y = f(x, w, b)
            loss = tf.reduce_sum(y * upstream)
        grads = tape.gradient(loss, [x, w, b])
        result = {"y": y.numpy().tolist(), "grads": [g.numpy().tolist() for g in grads]}
        if len(sys.argv) > 3:
            model = tf.saved_model.load(sys.argv[3])
            result["saved"] = model.f(x, w, b).numpy().tolist()
    except tf.errors.OpError as e:
        result = {"error": type(e).__name__, "message": e.message}
    print(json.dumps({"compilers": found, **result}))
    """
)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    path = tmp_path_factory.mktemp("serving") / "inputs.npz"
    values = {
        "x": RNG.standard_normal((BATCH, FEATURES)).astype(np.float32),
        "w": RNG.standard_normal((FEATURES, UNITS)).astype(np.float32),
        "b": RNG.standard_normal(UNITS).astype(np.float32),
        "upstream": RNG.standard_normal((BATCH, UNITS)).astype(np.float32),
    }
    np.savez(path, **values)
    return path, values


def expected(values):
    x, w, b = (tf.constant(values[k]) for k in "xwb")
    with tf.GradientTape() as tape:
        tape.watch([x, w, b])
        y = tf.tanh(tf.matmul(x, w) + b)
        loss = tf.reduce_sum(y * values["upstream"])
    return y.numpy(), [g.numpy() for g in tape.gradient(loss, [x, w, b])]


def serve(tmp_path, bundle, inputs, compiler: bool, saved=None):
    """Runs SERVE in a fresh process with an empty operator cache; without `compiler`, its
    PATH is an empty directory and CXX is unset."""
    script = tmp_path / "serve.py"
    script.write_text(SERVE)
    cache = tmp_path / "cache"
    env = {**os.environ, "OVL_CACHE_DIR": str(cache), "TF_CPP_MIN_LOG_LEVEL": "2"}
    if not compiler:
        empty = tmp_path / "no-compiler-bin"
        empty.mkdir(exist_ok=True)
        env["PATH"] = str(empty)
        env.pop("CXX", None)
    args = [sys.executable, str(script), str(bundle), str(inputs)]
    if saved is not None:
        args.append(str(saved))
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if not compiler:
        assert not any(result["compilers"].values()), result["compilers"]
    return result, cache


def check(result, values):
    want_y, want_grads = expected(values)
    assert "error" not in result, result
    np.testing.assert_allclose(np.array(result["y"]), want_y, rtol=1e-5, atol=1e-6)
    for got, want in zip(result["grads"], want_grads):
        np.testing.assert_allclose(np.array(got), want, rtol=1e-5, atol=1e-5)


def metas(cache: Path):
    return [p.read_text() for p in sorted(cache.glob("v*/cpu/*/meta"))]


def test_a_bundle_with_its_libraries_runs_without_a_compiler(bundle_dir, inputs, tmp_path):
    path, values = inputs
    bundle = bundle_dir / "dense_tanh_embedded.json"
    # A SavedModel of the same program: the op's attribute carries the libraries too.
    f = ovl_tf.load(bundle)
    module = tf.Module()
    module.f = tf.function(
        lambda x, w, b: f(x, w, b),
        input_signature=[
            tf.TensorSpec([BATCH, FEATURES], tf.float32),
            tf.TensorSpec([FEATURES, UNITS], tf.float32),
            tf.TensorSpec([UNITS], tf.float32),
        ],
    )
    saved = tmp_path / "model"
    tf.saved_model.save(module, str(saved))

    result, cache = serve(tmp_path, bundle, path, compiler=False, saved=saved)
    check(result, values)
    np.testing.assert_array_equal(np.array(result["saved"]), np.array(result["y"]))
    # Every operator, forward and gradient, came from the bundle: the forward program's kernels
    # and the gradient program's (how many depends on what fusion merged).
    found = metas(cache)
    forward_kernels = json.loads(bundle.read_text())["kernels"]
    assert len(found) > forward_kernels, found
    assert all("embedded in an exported program" in m for m in found), found


def test_a_bundle_from_another_machine_is_compiled_or_a_clear_error(bundle_dir, inputs, tmp_path):
    path, values = inputs
    bundle = bundle_dir / "dense_tanh_other_machine.json"
    (tmp_path / "with").mkdir()
    result, cache = serve(tmp_path / "with", bundle, path, compiler=True)
    check(result, values)
    found = metas(cache)
    assert found and all("compiler version: " in m for m in found), found

    (tmp_path / "without").mkdir()
    result, cache = serve(tmp_path / "without", bundle, path, compiler=False)
    assert result.get("error") == "FailedPreconditionError", result
    message = result["message"]
    assert "the program carries a compiled library for it that cannot be used here" in message
    assert "another machine (a test of make_bundles)" in message
    assert "compiling it here failed" in message
    assert not metas(cache)


def test_an_edited_embedded_library_is_refused(bundle_dir, tmp_path):
    bundle = json.loads((bundle_dir / "dense_tanh_embedded.json").read_text())
    sealed = bytearray(base64.b64decode(bundle["program"]))
    at = bytes(sealed).find(b"\x7fELF")
    assert at > 0
    sealed[at + 300] ^= 0x20
    bundle["program"] = base64.b64encode(bytes(sealed)).decode()
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(bundle))
    with pytest.raises(ovl_tf.BundleError, match="modified or corrupted.*SHA-256"):
        ovl_tf.load(edited)

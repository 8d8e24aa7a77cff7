"""SavedModel round trip and the operator cache, in fresh Python processes: the op carries its
IR, so a process with only the bridge library and an empty cache compiles it on first use; a
corrupt cached library or one missing its entry point is rebuilt, and so is one truncated,
emptied, extended or bit-flipped (never loaded: a truncated library would crash with SIGBUS);
a cache miss without a working compiler is a clear error."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import tensorflow as tf

RNG = np.random.default_rng(11)

# Runs in the fresh process: loads only the bridge library, then the SavedModel.
SERVE = textwrap.dedent(
    """
    import os, sys
    import numpy as np
    import tensorflow as tf
    tf.load_op_library(os.environ["OVL_TF_LIBRARY"])
    model = tf.saved_model.load(sys.argv[1])
    x = tf.constant(np.load(sys.argv[2]))
    z = tf.constant(np.load(sys.argv[3]))
    try:
        np.save(sys.argv[4], model.f(x, z).numpy())
    except tf.errors.OpError as e:
        print("OPERROR", type(e).__name__, e.message)
        sys.exit(3)
    """
)


def serve(tmp_path, model, x, z, cache, **env):
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "z.npy", z)
    out = tmp_path / "out.npy"
    if out.exists():
        out.unlink()
    script = tmp_path / "serve.py"
    script.write_text(SERVE)
    proc = subprocess.run(
        [sys.executable, str(script), str(model), str(tmp_path / "x.npy"),
         str(tmp_path / "z.npy"), str(out)],
        env={**os.environ, "OVL_CACHE_DIR": str(cache), "TF_CPP_MIN_LOG_LEVEL": "2", **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    return proc, (np.load(out) if out.exists() else None)


def save_model(bundle, path):
    f = bundle("fused_chain")
    module = tf.Module()
    module.f = tf.function(
        lambda x, z: f(x, z) * 2.0,
        input_signature=[tf.TensorSpec([64], tf.float32)] * 2,
    )
    tf.saved_model.save(module, str(path))


def libraries(cache: Path):
    return sorted(cache.glob("v*/cpu/*/op.so"))


def test_savedmodel_round_trip_in_a_fresh_process_with_an_empty_cache(bundle, tmp_path):
    model = tmp_path / "model"
    save_model(bundle, model)
    x = RNG.standard_normal(64).astype(np.float32)
    z = RNG.standard_normal(64).astype(np.float32)
    want = ((tf.tanh(x) * tf.sigmoid(z) + x) * 2.0).numpy()
    cache = tmp_path / "empty-cache"
    proc, got = serve(tmp_path, model, x, z, cache)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # The fresh process compiled the program into its own cache.
    assert len(libraries(cache)) == 1

    # A second fresh process finds it there.
    stamp = libraries(cache)[0].stat().st_mtime_ns
    proc, got = serve(tmp_path, model, x, z, cache)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert libraries(cache)[0].stat().st_mtime_ns == stamp


def test_corrupt_or_incomplete_library_in_the_cache_is_rebuilt(bundle, tmp_path):
    model = tmp_path / "model"
    save_model(bundle, model)
    x = RNG.standard_normal(64).astype(np.float32)
    z = RNG.standard_normal(64).astype(np.float32)
    want = ((tf.tanh(x) * tf.sigmoid(z) + x) * 2.0).numpy()
    cache = tmp_path / "cache"
    proc, _ = serve(tmp_path, model, x, z, cache)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [library] = libraries(cache)

    # Corrupt: not a shared library at all.
    library.write_bytes(b"\x7fELF but not really" * 100)
    proc, got = serve(tmp_path, model, x, z, cache)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

    # A valid shared library without the operator's entry points.
    stub = tmp_path / "stub.c"
    stub.write_text("int unrelated(void) { return 1; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(stub)], check=True)
    proc, got = serve(tmp_path, model, x, z, cache)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert b"ovl_run" in library.read_bytes()  # rebuilt


def _truncate(path: Path):
    with open(path, "r+b") as f:
        f.truncate(4000)


def _empty(path: Path):
    path.write_bytes(b"")


def _extend(path: Path):
    with open(path, "ab") as f:
        f.write(b"\0" * 100)


def _flip_a_bit(path: Path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def test_truncated_or_altered_library_in_the_cache_is_rebuilt_not_loaded(bundle, tmp_path):
    # Loading a library cut short kills the process with SIGBUS; the cache checks each library
    # against the length and digest its `meta` records before loading it, and rebuilds it.
    model = tmp_path / "model"
    save_model(bundle, model)
    x = RNG.standard_normal(64).astype(np.float32)
    z = RNG.standard_normal(64).astype(np.float32)
    want = ((tf.tanh(x) * tf.sigmoid(z) + x) * 2.0).numpy()
    cache = tmp_path / "cache"
    proc, _ = serve(tmp_path, model, x, z, cache)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [library] = libraries(cache)
    whole = library.read_bytes()
    assert len(whole) > 4000
    assert f"artifact length: {len(whole)}\n" in (library.parent / "meta").read_text()
    for damage in (_truncate, _empty, _extend, _flip_a_bit):
        for lib in libraries(cache):
            damage(lib)
        assert library.read_bytes() != whole, damage.__name__
        proc, got = serve(tmp_path, model, x, z, cache)
        assert proc.returncode == 0, (damage.__name__, proc.returncode, proc.stdout + proc.stderr)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        # Rebuilt whole: the same length as the first build, recorded in its meta.
        [rebuilt] = libraries(cache)
        data = rebuilt.read_bytes()
        assert b"ovl_run" in data, damage.__name__
        assert f"artifact length: {len(data)}\n" in (rebuilt.parent / "meta").read_text()


def test_missing_library_without_a_compiler_is_a_clear_error(bundle, tmp_path):
    model = tmp_path / "model"
    save_model(bundle, model)
    x = np.zeros(64, np.float32)
    broken = tmp_path / "broken-cxx"
    broken.write_text("#!/bin/sh\necho 'broken compiler' >&2\nexit 1\n")
    broken.chmod(0o755)
    proc, got = serve(tmp_path, model, x, x, tmp_path / "empty-cache", CXX=str(broken))
    assert got is None
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "OPERROR" in proc.stdout
    assert "DynamicLib" in proc.stdout and "compiler" in proc.stdout, proc.stdout

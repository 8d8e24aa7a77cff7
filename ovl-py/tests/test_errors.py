"""Each error: its exception type, a message naming the input, the inputs left valid and
unchanged, and the program still usable afterwards."""

import base64
import json
import re

import numpy as np
import pytest

import ovl
from conftest import Capsule, Legacy

RNG = np.random.default_rng(11)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def still_works(f, *inputs):
    """The inputs are unchanged and a correct call after the error runs."""
    x, b = f32(4, 5), f32(4, 5)
    np.testing.assert_allclose(f(x, b), 2 * x + b, rtol=1e-6)
    for array, saved in inputs:
        np.testing.assert_array_equal(array, saved)


@pytest.mark.parametrize("count", [0, 1, 3])
def test_input_count(bundle, count):
    f = bundle("scale_add")
    args = [f32(4, 5) for _ in range(count)]
    saved = [a.copy() for a in args]
    with pytest.raises(TypeError, match=re.escape(
        f"ovl program `scale_add` takes 2 inputs (x: float32[4, 5], b: float32[4, 5]), "
        f"{count} given"
    )):
        f(*args)
    still_works(f, *zip(args, saved))


def test_not_an_array(bundle):
    f = bundle("scale_add")
    x = f32(4, 5)
    with pytest.raises(TypeError, match=r"input 1 \(`b`\) is a list, not an array with `__dlpack__`"):
        f(x, [[0.0] * 5] * 4)
    still_works(f)


@pytest.mark.parametrize(
    "program, k, name, given",
    [
        ("scale_add", 0, "x", np.float64),
        ("scale_add", 1, "b", np.int32),
        ("mul_add_i32", 1, "b", np.int64),
        ("masked_negate", 0, "m", np.uint8),
    ],
)
def test_dtype(bundle, program, k, name, given):
    f = bundle(program)
    args = [np.zeros([d or 3 for d in t.shape], t.dtype) for t in f.inputs]
    args[k] = args[k].astype(given)
    saved = args[k].copy()
    with pytest.raises(TypeError, match=rf"ovl program `{program}`: input {k} \(`{name}`\) is "
                       rf"{np.dtype(given).name}\["):
        f(*args)
    np.testing.assert_array_equal(args[k], saved)


def test_dtype_ovl_does_not_have(bundle):
    f = bundle("scale_add")
    with pytest.raises(TypeError, match=r"input 0 \(`x`\): DLPack dtype .* is not supported"):
        f(np.zeros((4, 5), np.complex64), f32(4, 5))
    still_works(f)


def test_a_half_array_where_float32_is_expected(bundle):
    # float16 is an ovl dtype: a program of float32 names both.
    f = bundle("scale_add")
    with pytest.raises(TypeError, match=r"input 0 \(`x`\) is float16\[4, 5\], the program takes "
                                        r"float32\[4, 5\]"):
        f(np.zeros((4, 5), np.float16), f32(4, 5))
    still_works(f)


@pytest.mark.parametrize("shape", [(4, 6), (5, 5), (20,), (4, 5, 1), ()])
def test_shape(bundle, shape):
    f = bundle("scale_add")
    x, b = f32(4, 5), f32(*shape)
    saved = x.copy(), b.copy()
    with pytest.raises(ValueError, match=re.escape(
        f"ovl program `scale_add`: input 1 (`b`) has shape {list(shape)}, the program takes "
        "float32[4, 5]"
    )):
        f(x, b)
    still_works(f, (x, saved[0]), (b, saved[1]))


def test_polymorphic_shapes(bundle):
    f = bundle("scale_rows_any_batch")
    with pytest.raises(ValueError, match=re.escape(
        "input 0 (`x`) has shape [3, 4], the program takes float32[batch, 5]"
    )):
        f(f32(3, 4), f32(3))
    with pytest.raises(ValueError, match=r"input 1 \(`s`\) has shape \[2\], which makes batch = 2, "
                       r"but input 0 \(`x`\) made batch = 3"):
        f(f32(3, 5), f32(2))
    x, s = f32(2, 5), f32(2)
    np.testing.assert_allclose(f(x, s)[0], x * s[:, None], rtol=1e-6)


def test_consumed_capsule(bundle):
    f = bundle("scale_add")
    x, b = f32(4, 5), f32(4, 5)
    capsule = x.__dlpack__(max_version=(1, 0))
    np.from_dlpack(Capsule(capsule))  # consumes it
    with pytest.raises(ValueError, match=r"input 0 \(`x`\): its DLPack capsule was already consumed"):
        f(Capsule(capsule), b)
    # And a capsule ovl consumed cannot be taken twice either.
    capsule = x.__dlpack__(max_version=(1, 0))
    f(Capsule(capsule), b)
    with pytest.raises(ValueError, match=r"input 1 \(`b`\): its DLPack capsule was already consumed"):
        f(x, Capsule(capsule))
    still_works(f)


def test_not_a_capsule(bundle):
    f = bundle("scale_add")
    with pytest.raises(TypeError, match=r"input 0 \(`x`\): its `__dlpack__` returned a str"):
        f(Capsule("not a capsule"), f32(4, 5))
    still_works(f)


def test_producer_refuses(bundle):
    f = bundle("scale_add")
    x = f32(4, 5)
    x.flags.writeable = False
    # NumPy cannot flag a legacy capsule read-only, so it refuses to make one.
    with pytest.raises(BufferError, match=r"input 0 \(`x`\): its `__dlpack__` failed: .*read"):
        f(Legacy(x), f32(4, 5))
    still_works(f, (x, x.copy()))


def test_gpu_array_of_another_producer(bundle):
    # A GPU array that is neither a CUDA torch.Tensor nor a GPU jax.Array (a CuPy array, a
    # producer speaking only DLPack), or beside a NumPy array: refused, naming it.
    f = bundle("scale_add")
    gpu = Capsule(None, device=(2, 0))
    with pytest.raises(ValueError, match=r"input 1 \(`b`\) is on a GPU: a program called on "
                       r"GPU arrays takes them all from PyTorch"):
        f(f32(4, 5), gpu)
    still_works(f)


def test_export_taken_once(bundle):
    f = bundle("scale_add")
    x, b = f32(4, 5), f32(4, 5)
    (export,) = f._native.run((x, b))
    assert "float32" in repr(export)
    np.testing.assert_allclose(np.from_dlpack(export), 2 * x + b, rtol=1e-6)
    with pytest.raises(BufferError, match="already exported"):
        np.from_dlpack(export)
    # The legacy capsule, for consumers before DLPack 1.0.
    (export,) = f._native.run((x, b))
    legacy = export.__dlpack__()
    np.testing.assert_allclose(np.from_dlpack(Capsule(legacy)), 2 * x + b, rtol=1e-6)
    # A capsule nobody consumed is freed with it.
    (export,) = f._native.run((x, b))
    unconsumed = export.__dlpack__(max_version=(1, 0))
    del unconsumed, export


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        ovl.load(tmp_path / "missing.json")


def corrupt(bundle_dir, tmp_path, edit):
    text = json.loads((bundle_dir / "scale_add.json").read_text())
    edit(text)
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(text))
    return path


def test_bad_bundles(bundle_dir, tmp_path):
    path = tmp_path / "not_json.json"
    path.write_text("{ not json")
    with pytest.raises(ovl.BundleError, match=rf'bundle "{re.escape(str(path))}": it is not JSON'):
        ovl.load(path)
    assert issubclass(ovl.BundleError, ValueError)

    def flip(t):
        sealed = bytearray(base64.b64decode(t["program"]))
        sealed[-1] ^= 1
        t["program"] = base64.b64encode(bytes(sealed)).decode()

    with pytest.raises(ovl.BundleError, match="modified or corrupted"):
        ovl.load(corrupt(bundle_dir, tmp_path, flip))
    with pytest.raises(ovl.BundleError, match="not valid base64"):
        ovl.load(corrupt(bundle_dir, tmp_path, lambda t: t.update(program="abc")))
    with pytest.raises(ovl.BundleError, match="bundle version 99"):
        ovl.load(corrupt(bundle_dir, tmp_path, lambda t: t.update(version=99)))
    with pytest.raises(ovl.BundleError, match='the field "format"'):
        ovl.load(corrupt(bundle_dir, tmp_path, lambda t: t.update(format="other")))

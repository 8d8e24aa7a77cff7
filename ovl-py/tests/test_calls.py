"""Programs run on NumPy arrays, compared with the same computation in NumPy."""

import sys
import threading

import numpy as np
import pytest

import ovl
from conftest import Legacy

RNG = np.random.default_rng(7)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def test_the_package_is_the_installed_one():
    import ovl._native

    assert ovl._native.__file__.endswith((".so", ".pyd")), ovl._native.__file__
    assert "abi3" in ovl._native.__file__, "the module is not built for the stable ABI"


def test_elementwise(bundle):
    f = bundle("scale_add")
    x, b = f32(4, 5), f32(4, 5)
    y = f(x, b)
    assert isinstance(y, np.ndarray) and y.dtype == np.float32 and y.shape == (4, 5)
    np.testing.assert_allclose(y, 2 * x + b, rtol=1e-6)
    # A fresh, writable, C-contiguous array that shares no memory with the inputs.
    assert y.flags.c_contiguous and y.flags.writeable
    assert not np.shares_memory(y, x) and not np.shares_memory(y, b)
    y[0, 0] = 123.0


@pytest.mark.parametrize(
    "layout",
    ["transposed", "fortran", "every_other_row", "reversed", "broadcast", "offset_view"],
)
def test_strided_inputs_are_copied(bundle, layout):
    f = bundle("scale_add")
    base = f32(8, 10)
    x = {
        "transposed": base[:5, :4].T,
        "fortran": np.asfortranarray(base[:4, :5]),
        "every_other_row": base[::2, :5],
        "reversed": base[:4, :5][::-1, ::-1],
        "broadcast": np.broadcast_to(base[0, :5], (4, 5)),
        "offset_view": base[3:7, 2:7],
    }[layout]
    b = f32(4, 5)
    before = (x.copy(), base.copy())
    assert not x.flags.c_contiguous or layout == "offset_view"
    y = f(x, b)
    np.testing.assert_allclose(y, 2 * np.ascontiguousarray(x) + b, rtol=1e-6)
    np.testing.assert_array_equal(x, before[0])
    np.testing.assert_array_equal(base, before[1])


def test_inputs_unchanged_and_released(bundle):
    f = bundle("scale_add")
    x, b = f32(4, 5), f32(4, 5)
    saved = x.copy(), b.copy()
    refs = sys.getrefcount(x), sys.getrefcount(b)
    for _ in range(3):
        f(x, b)
    # Each capsule's deleter ran once: NumPy's reference to the array is gone again.
    assert (sys.getrefcount(x), sys.getrefcount(b)) == refs
    np.testing.assert_array_equal(x, saved[0])
    np.testing.assert_array_equal(b, saved[1])
    x += 1.0  # still a valid, writable array
    np.testing.assert_allclose(f(x, b), 2 * x + b, rtol=1e-6)


def test_read_only_inputs(bundle):
    f = bundle("scale_add")
    x, b = f32(4, 5), f32(4, 5)
    x.flags.writeable = False
    np.testing.assert_allclose(f(x, b), 2 * x + b, rtol=1e-6)


def test_legacy_producer(bundle):
    f = bundle("scale_add")
    x, b = f32(4, 5), f32(4, 5)
    refs = sys.getrefcount(x)
    np.testing.assert_allclose(f(Legacy(x), b), 2 * x + b, rtol=1e-6)
    assert sys.getrefcount(x) == refs


def test_two_outputs(bundle):
    f = bundle("min_max")
    a, b = f32(7), f32(7)
    out = f(a, b)
    assert isinstance(out, tuple) and len(out) == 2
    np.testing.assert_array_equal(out[0], np.minimum(a, b))
    np.testing.assert_array_equal(out[1], np.maximum(a, b))


def test_float64(bundle):
    x = RNG.standard_normal(9)
    np.testing.assert_allclose(bundle("affine_f64")(x), x * 0.5 - 3.0, rtol=1e-15)


def test_int32(bundle):
    a = RNG.integers(-1000, 1000, 9, dtype=np.int32)
    b = RNG.integers(-1000, 1000, 9, dtype=np.int32)
    y = bundle("mul_add_i32")(a, b)
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, a * b + 7)


def test_bool_input_and_output(bundle):
    f = bundle("masked_negate")
    m = np.array([True, False, True, True, False, False])
    a = f32(6)
    y, flipped = f(m, a)
    assert flipped.dtype == np.bool_
    np.testing.assert_array_equal(y, np.where(m, a, -a))
    np.testing.assert_array_equal(flipped, ~m)
    # A strided bool view, and bytes other than 0 and 1 viewed as bool: read as true.
    wide = np.array([True, True, False, False, True, True, False, True, True, False, False, False])
    y, flipped = f(wide[::2], a)
    np.testing.assert_array_equal(flipped, ~wide[::2])
    bytes_ = np.array([0, 2, 1, 255, 0, 7], dtype=np.uint8).view(np.bool_)
    y, flipped = f(bytes_, a)
    truth = np.array([False, True, True, True, False, True])
    np.testing.assert_array_equal(y, np.where(truth, a, -a))
    np.testing.assert_array_equal(flipped, ~truth)


def test_reduction(bundle):
    x = f32(3, 8)
    sums, softmax = bundle("row_stats")(x)
    np.testing.assert_allclose(sums, x.sum(axis=1), rtol=1e-5, atol=1e-6)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(softmax, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("batch", [1, 6, 33, 0])
def test_polymorphic_batch(bundle, batch):
    f = bundle("scale_rows_any_batch")
    x, s = f32(batch, 5), f32(batch)
    y, sums = f(x, s)
    assert y.shape == (batch, 5) and sums.shape == (batch,)
    np.testing.assert_allclose(y, x * s[:, None], rtol=1e-6)
    np.testing.assert_allclose(sums, (x * s[:, None]).sum(axis=1), rtol=1e-5, atol=1e-6)


def test_polymorphic_strided(bundle):
    f = bundle("scale_rows_any_batch")
    x, s = f32(5, 12), f32(10)
    y, _ = f(x[:, ::2][:, :5], s[::2])
    np.testing.assert_allclose(y, x[:, ::2][:, :5] * s[::2][:, None], rtol=1e-6)


def test_threads(bundle):
    f = bundle("scale_add")
    inputs = [(f32(4, 5), f32(4, 5)) for _ in range(8)]
    results = [None] * len(inputs)

    def work(k):
        for _ in range(20):
            results[k] = f(*inputs[k])

    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for (x, b), y in zip(inputs, results):
        np.testing.assert_allclose(y, 2 * x + b, rtol=1e-6)


def test_properties(bundle):
    f = bundle("scale_rows_any_batch")
    assert f.name == "scale_rows"
    assert f.symbols == ("batch",)
    assert f.inputs == (
        ovl.TensorSpec("x", "float32", (None, 5)),
        ovl.TensorSpec("s", "float32", (None,)),
    )
    assert f.outputs == (
        ovl.TensorSpec(None, "float32", (None, 5)),
        ovl.TensorSpec(None, "float32", (None,)),
    )
    assert repr(f) == (
        "<ovl.Program `scale_rows` (x: float32[batch, 5], s: float32[batch]) -> "
        "(float32[batch, 5], float32[batch])>"
    )
    g = bundle("masked_negate")
    assert g.symbols == ()
    assert [t.dtype for t in g.inputs] == ["bool", "float32"]
    assert g.outputs[1] == ovl.TensorSpec(None, "bool", (6,))
    assert g.kernel_count >= 1

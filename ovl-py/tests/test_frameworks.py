"""Outputs in the inputs' framework: NumPy in, NumPy out; JAX in, JAX out (on the CPU);
PyTorch in, PyTorch out; mixed, NumPy out."""

import os
import sys

import numpy as np
import pytest

from conftest import Legacy

RNG = np.random.default_rng(11)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def test_numpy_in_numpy_out(bundle):
    x, b = f32(4, 5), f32(4, 5)
    y = bundle("scale_add")(x, b)
    assert type(y) is np.ndarray
    np.testing.assert_allclose(y, 2 * x + b, rtol=1e-6)


def test_unknown_producer_gives_numpy(bundle):
    x, b = f32(4, 5), f32(4, 5)
    y = bundle("scale_add")(Legacy(x), Legacy(b))
    assert type(y) is np.ndarray
    np.testing.assert_allclose(y, 2 * x + b, rtol=1e-6)


def test_no_framework_imported_by_a_numpy_call(bundle):
    # A call on NumPy arrays imports no framework (whatever this process imported before).
    before = {name for name in ("torch", "jax", "cupy") if name in sys.modules}
    bundle("scale_add")(f32(4, 5), f32(4, 5))
    after = {name for name in ("torch", "jax", "cupy") if name in sys.modules}
    assert after == before


# --- JAX, on the CPU -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def jnp():
    # The CPU only (the project's environment has JAX without CUDA).
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    pytest.importorskip("jax", reason="JAX is not installed")
    import jax.numpy

    return jax.numpy


def test_jax_in_jax_out(bundle, jnp):
    import jax

    x, b = jnp.asarray(f32(4, 5)), jnp.asarray(f32(4, 5))
    y = bundle("scale_add")(x, b)
    assert isinstance(y, jax.Array)
    assert y.dtype == jnp.float32 and y.shape == (4, 5)
    assert y.devices() == {jax.devices("cpu")[0]}
    np.testing.assert_allclose(np.asarray(y), np.asarray(2 * x + b), rtol=1e-6)
    # A usable JAX array: JAX computes with it, also under `jax.jit`.
    np.testing.assert_allclose(
        np.asarray(jax.jit(lambda t: t * 3.0)(y)), np.asarray(y) * 3.0, rtol=1e-6
    )


def test_jax_two_outputs_int_and_bool(bundle, jnp):
    import jax

    a, b = jnp.asarray(f32(7)), jnp.asarray(f32(7))
    lo, hi = bundle("min_max")(a, b)
    assert isinstance(lo, jax.Array) and isinstance(hi, jax.Array)
    np.testing.assert_array_equal(np.asarray(lo), np.asarray(jnp.minimum(a, b)))
    np.testing.assert_array_equal(np.asarray(hi), np.asarray(jnp.maximum(a, b)))

    i = jnp.asarray(RNG.integers(-1000, 1000, 9, dtype=np.int32))
    j = jnp.asarray(RNG.integers(-1000, 1000, 9, dtype=np.int32))
    k = bundle("mul_add_i32")(i, j)
    assert isinstance(k, jax.Array) and k.dtype == jnp.int32
    np.testing.assert_array_equal(np.asarray(k), np.asarray(i * j + 7))

    m = jnp.asarray([True, False, True, True, False, False])
    v = jnp.asarray(f32(6))
    y, flipped = bundle("masked_negate")(m, v)
    assert isinstance(flipped, jax.Array) and flipped.dtype == jnp.bool_
    np.testing.assert_array_equal(np.asarray(y), np.asarray(jnp.where(m, v, -v)))
    np.testing.assert_array_equal(np.asarray(flipped), np.asarray(~m))


@pytest.mark.parametrize("batch", [3, 17, 0])
def test_jax_polymorphic_batch(bundle, jnp, batch):
    import jax

    x, s = jnp.asarray(f32(batch, 5)), jnp.asarray(f32(batch))
    y, sums = bundle("scale_rows_any_batch")(x, s)
    assert isinstance(y, jax.Array) and isinstance(sums, jax.Array)
    assert y.shape == (batch, 5) and sums.shape == (batch,)
    want = x * s[:, None]
    np.testing.assert_allclose(np.asarray(y), np.asarray(want), rtol=1e-6)
    np.testing.assert_allclose(
        np.asarray(sums), np.asarray(want.sum(axis=1)), rtol=1e-5, atol=1e-6
    )


def test_jax_outputs_outlive_the_call(bundle, jnp):
    import gc

    x, b = f32(4, 5), f32(4, 5)
    ys = [bundle("scale_add")(jnp.asarray(x), jnp.asarray(b)) for _ in range(3)]
    gc.collect()
    for y in ys:
        np.testing.assert_allclose(np.asarray(y), 2 * x + b, rtol=1e-6)


def test_jax_mixed_with_numpy_gives_numpy(bundle, jnp):
    x, b = f32(4, 5), f32(4, 5)
    for args in [(jnp.asarray(x), b), (x, jnp.asarray(b)), (jnp.asarray(x), Legacy(b))]:
        y = bundle("scale_add")(*args)
        assert type(y) is np.ndarray
        np.testing.assert_allclose(y, 2 * x + b, rtol=1e-6)


# --- PyTorch (in the project's environment, scripts/requirements.txt) ----------------------


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch", reason="PyTorch is not installed: torch outputs untested")


def test_torch_in_torch_out(bundle, torch):
    x, b = torch.randn(4, 5), torch.randn(4, 5)
    y = bundle("scale_add")(x, b)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32 and y.device.type == "cpu"
    torch.testing.assert_close(y, 2 * x + b)

    xs, s = torch.randn(6, 5), torch.randn(6)
    y, sums = bundle("scale_rows_any_batch")(xs, s)
    assert isinstance(y, torch.Tensor) and isinstance(sums, torch.Tensor)
    torch.testing.assert_close(y, xs * s[:, None])
    torch.testing.assert_close(sums, (xs * s[:, None]).sum(dim=1))


def test_torch_mixed_with_numpy_gives_numpy(bundle, torch):
    x, b = torch.randn(4, 5), f32(4, 5)
    y = bundle("scale_add")(x, b)
    assert type(y) is np.ndarray
    np.testing.assert_allclose(y, 2 * x.numpy() + b, rtol=1e-6)

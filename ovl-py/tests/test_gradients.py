"""The bundles' gradient programs (`program.gradient`), compared with gradients written out in
NumPy and with central differences."""

import numpy as np
import pytest

import ovl

RNG = np.random.default_rng(11)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def layernorm(x, eps=1e-5):
    x = x.astype(np.float64)
    mu = x.mean(axis=1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps)


def test_a_program_without_gradient_has_none(bundle):
    f = bundle("scale_add")
    assert not f.has_gradient
    assert f.gradient is None


def test_derived_gradient_at_any_batch(bundle):
    f = bundle("scale_rows_grad")
    assert f.has_gradient and f.symbols == ("batch",)
    g = f.gradient
    assert g is f.gradient, "the gradient program is loaded once"
    assert [t.name for t in g.inputs] == ["x", "s", "dy"]
    assert [(t.dtype, t.shape) for t in g.outputs] == [
        ("float32", (None, 5)),
        ("float32", (None,)),
    ]
    for batch in (1, 3, 17):
        x, s, dy = f32(batch, 5), f32(batch), f32(batch, 5)
        np.testing.assert_allclose(f(x, s), x * s[:, None], rtol=1e-6)
        dx, ds = g(x, s, dy)
        np.testing.assert_allclose(dx, s[:, None] * dy, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(ds, (x * dy).sum(axis=1), rtol=1e-5, atol=1e-5)


def test_layernorm_gradient_against_central_differences(bundle):
    f = bundle("layernorm_grad")
    x, dy = f32(6, 33), f32(6, 33)
    np.testing.assert_allclose(f(x), layernorm(x), rtol=1e-4, atol=1e-5)
    (dx,) = (f.gradient(x, dy),)
    # d/dx of sum(layernorm(x) * dy) by central differences in f64.
    h = 1e-4
    want = np.zeros_like(x, dtype=np.float64)
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            up, down = x.astype(np.float64), x.astype(np.float64)
            up[i, j] += h
            down[i, j] -= h
            want[i, j] = ((layernorm(up) - layernorm(down)) * dy).sum() / (2 * h)
    np.testing.assert_allclose(dx, want, rtol=1e-3, atol=2e-4)


def test_gradient_errors_name_the_input(bundle):
    g = bundle("scale_rows_grad").gradient
    with pytest.raises(TypeError, match="takes 3 inputs"):
        g(f32(2, 5), f32(2))
    with pytest.raises(ValueError, match=r"input 2 \(`dy`\).*batch = 3"):
        g(f32(2, 5), f32(2), f32(3, 5))

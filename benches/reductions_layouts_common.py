"""What the Python sides of the reductions benchmark's layout cases share
(benches/reductions_layouts_jax.py in the peer environment, benches/reductions_layouts_tf.py in
TensorFlow's): the input, the cases, the f64 reference and the check. Needs numpy only."""

import numpy as np

EPS = 1e-5
KERNELS = ["layernorm", "softmax", "rmsnorm", "logsumexp"]


def base():
    """The same values as benches/reductions_layouts.rs: x[i, j] of the C-order [4096, 1024]."""
    i = np.arange(4096, dtype=np.int64)[:, None]
    j = np.arange(1024, dtype=np.int64)[None, :]
    return (((i * 131 + j * 71) % 1009).astype(np.float32) / np.float32(1009.0)) * np.float32(
        4.0
    ) - np.float32(2.0)


def cases():
    """(key, array, axis): along axis 0 of the C-order [4096, 1024]; along the last axis of its
    transpose held in C order and in Fortran order."""
    c = base()
    fortran = np.asfortranarray(c.T)
    assert fortran.flags.f_contiguous and not fortran.flags.c_contiguous
    return [("axis0", c, 0), ("last_c", np.ascontiguousarray(c.T), 1), ("last_fortran", fortran, 1)]


def reference(kernel, x, axis):
    """The kernel along `axis` in float64."""
    x = x.astype(np.float64)
    if kernel == "layernorm":
        m = x.mean(axis=axis, keepdims=True)
        return (x - m) / np.sqrt(((x - m) ** 2).mean(axis=axis, keepdims=True) + EPS)
    if kernel == "rmsnorm":
        return x / np.sqrt((x * x).mean(axis=axis, keepdims=True) + EPS)
    top = x.max(axis=axis, keepdims=True)
    e = np.exp(x - top)
    if kernel == "softmax":
        return e / e.sum(axis=axis, keepdims=True)
    return np.squeeze(top + np.log(e.sum(axis=axis, keepdims=True)), axis=axis)


def check(kernel, key, got, x, axis):
    """The max abs error of `got` against the f64 reference; exits when it is too large."""
    want = reference(kernel, x, axis)
    err = float(np.max(np.abs(np.asarray(got, dtype=np.float64) - want)))
    if not err <= 1e-4 * (1 + float(np.max(np.abs(want)))):
        raise SystemExit(f"{kernel} {key}: max abs error {err:.1e} vs the f64 reference")
    return err

"""What the Python sides of the reductions benchmark share (benches/reductions_tf.py, run with
TensorFlow's environment, and benches/reductions_jax.py, run with the peer environment): the
sizes, the inputs, the bytes counted, and the correctness check. Needs numpy only."""

from pathlib import Path

import numpy as np

EPS = 1e-5
KERNELS = ["layernorm", "softmax", "rmsnorm", "logsumexp"]
FULL = [(256, 1024), (1024, 4096), (8192, 1024), (64, 65536)]
QUICK = [(256, 1024), (1024, 4096)]


def sizes_for(quick):
    """(rows, cols) of the run: benches/reductions.rs uses the same lists."""
    return QUICK if quick else FULL


def inputs(rows, cols):
    """x and the incoming gradients dy ([rows, cols]) and dy_row ([rows], for logsumexp):
    uniform in [-2, 2), f32, the same on every run."""
    rng = np.random.default_rng(rows * 100003 + cols)
    x = rng.uniform(-2, 2, (rows, cols)).astype(np.float32)
    dy = rng.uniform(-2, 2, (rows, cols)).astype(np.float32)
    dy_row = rng.uniform(-2, 2, (rows,)).astype(np.float32)
    return x, dy, dy_row


def bytes_moved(kernel, rows, cols, backward):
    """Forward reads x and writes y once; forward + backward reads x and dy and writes y and dx
    once (f32; logsumexp's y and dy have one value per row)."""
    full = rows * cols * 4
    per_output = rows * 4 if kernel == "logsumexp" else full
    return 2 * (full + per_output) if backward else full + per_output


def read_case(data_dir, rows, cols, kernel):
    """The inputs and TensorFlow's (y, dx) for `kernel` that benches/reductions_tf.py wrote."""
    d = Path(data_dir) / f"{rows}x{cols}"

    def load(name, shape):
        return np.fromfile(d / f"{name}.f32", dtype="<f4").reshape(shape)

    y_shape = (rows,) if kernel == "logsumexp" else (rows, cols)
    x = load("x", (rows, cols))
    dy = load("dy_row", (rows,)) if kernel == "logsumexp" else load("dy", (rows, cols))
    return x, dy, load(f"{kernel}_y", y_shape), load(f"{kernel}_dx", (rows, cols))


def check(got, want, what):
    """The largest |got - want| over the outputs; stops the run (SystemExit) when one is beyond
    1e-4 * (1 + max |want|), the tolerance benches/reductions.rs applies too."""
    worst = 0.0
    for g, w in zip(got, want):
        g = np.asarray(g, dtype=np.float64)
        w = np.asarray(w, dtype=np.float64)
        if g.shape != w.shape:
            raise SystemExit(f"{what}: shape {g.shape}, expected {w.shape}")
        err = float(np.max(np.abs(g - w))) if g.size else 0.0
        if not np.isfinite(err) or err > 1e-4 * (1 + float(np.max(np.abs(w)))):
            raise SystemExit(f"{what}: differs from TensorFlow eager by up to {err:e}")
        worst = max(worst, err)
    return worst

"""Fits the C++ prelude's f32 tanh: tanh(x) ~ x * P(x^2) / Q(x^2), P and Q of degree 4, on
0 < x <= 9.02 (beyond, tanh(x) rounds to 1 in f32), minimising the largest relative error.

The method is Lawson's iteration on the linearised problem P - f*Q = 0 (weighted least squares
whose weights grow where the error is largest), with P(0) = Q(0) = 1 fixed so that tanh(x) = x
near 0. Coefficients are then rounded to f32 one at a time, highest degrees first, refitting the
others after each, so that the rounded set is as good as the exact one.

Usage: python fit_tanh.py   (needs numpy; prints p0..p4 q0..q4, to paste into prelude.rs)
The prelude's accuracy is checked by tests/core/math_accuracy.rs; the exhaustive check over every
f32 that gave the documented bound (6 ulp) was a one-off C++ loop against double tanh.
"""

import sys

import numpy as np

DEG_P, DEG_Q = 4, 4
X_MAX = 9.02

x = np.concatenate(
    [np.linspace(1e-4, X_MAX, 30000), X_MAX * (1 - np.cos(np.linspace(0, np.pi / 2, 30000)))]
)
x = x[x > 0]
t = x * x
f = np.tanh(x) / x
VP = np.vander(t, DEG_P + 1, increasing=True)
VQ = np.vander(t, DEG_Q + 1, increasing=True)
COLUMNS = np.hstack([VP, -(f[:, None]) * VQ])  # COLUMNS @ c = P(t) - f(t) Q(t)
N = DEG_P + DEG_Q + 2


def fit(fixed):
    """Best coefficient vector [p0..pP, q0..qQ] (largest relative error, coefficients) with the
    entries of `fixed` (index -> value) held."""
    free = [i for i in range(N) if i not in fixed]
    weights = np.ones_like(x)
    q_prev = np.ones_like(x)
    best = None
    for _ in range(150):
        rhs = -sum(COLUMNS[:, i] * v for i, v in fixed.items())
        scale = np.sqrt(weights) / (f * np.abs(q_prev))
        sol, *_ = np.linalg.lstsq(COLUMNS[:, free] * scale[:, None], rhs * scale, rcond=None)
        c = np.zeros(N)
        for i, v in fixed.items():
            c[i] = v
        c[free] = sol
        p, q = VP @ c[: DEG_P + 1], VQ @ c[DEG_P + 1 :]
        err = (p / q - f) / f
        worst = np.abs(err).max()
        if best is None or worst < best[0]:
            best = (worst, c.copy())
        q_prev = q
        weights = weights * np.abs(err) + 1e-300
        weights /= weights.sum()
    return best


def main():
    fixed = {0: 1.0, DEG_P + 1: 1.0}
    order = []
    for k in range(DEG_P, 0, -1):
        order += [k, DEG_P + 1 + k]
    for i in order:
        worst, c = fit(fixed)
        fixed[i] = float(np.float32(c[i]))
        print(f"rounded coefficient {i}: largest relative error {worst:.3e}", file=sys.stderr)
    c = np.array([fixed[i] for i in range(N)])
    p, q = VP @ c[: DEG_P + 1], VQ @ c[DEG_P + 1 :]
    print(f"f32 coefficients: largest relative error {np.abs((p / q - f) / f).max():.3e}", file=sys.stderr)
    print(" ".join(f"{v:.9e}" for v in c))


if __name__ == "__main__":
    main()

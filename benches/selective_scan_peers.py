"""The selective scan of examples/selective_scan.rs (issue 52), the peers' side, and the report.

Per batch b and channel d: h_n = exp(dt A[d, n]) h_n + dt B[b, t, n] x, y = sum_n C[b, t, n] h_n;
forward returns y, forward + backward the gradients of sum(y * g) for x, dt, A, B and C. The
inputs come from the formula both sides share (`inputs`, the example's). Each peer's results are
checked against a NumPy float64 reference (forward and the gradients by central differences on
a few elements) before anything is timed.

    python benches/selective_scan_peers.py --peer torch [--quick] [--out DIR]  (PyTorch: eager
                                             loop over time, and torch.compile of it)
    python benches/selective_scan_peers.py --peer jax [--quick] [--out DIR]    (lax.scan, jit)
    python benches/selective_scan_peers.py --report [--out DIR]                (DIR/scan.md)
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import machine, timed  # noqa: E402

SIZES = [(2, 16, 64, 8), (2, 64, 256, 16)]
TOLERANCE = 2e-3


def formula(shape, seed, lo, hi):
    """The example's `inputs` formula: element k (from 1) is lo + (hi - lo) u, u from a hash."""
    n = int(np.prod(shape))
    k = np.arange(1, n + 1, dtype=np.int64)
    u = ((k * 2654435761 + seed * 40503) % 10007).astype(np.float32) / np.float32(10007.0)
    return (np.float32(lo) + np.float32(hi - lo) * u).astype(np.float32).reshape(shape)


def inputs(size):
    b, d, l, n = size
    return [
        formula([b, d, l], 1, -1.0, 1.0),
        formula([b, d, l], 2, 0.01, 0.1),
        formula([d, n], 3, -2.0, -0.1),
        formula([b, l, n], 4, -1.0, 1.0),
        formula([b, l, n], 5, -1.0, 1.0),
    ]


def reference(x, dt, a, bm, cm):
    x, dt, a, bm, cm = (v.astype(np.float64) for v in (x, dt, a, bm, cm))
    b, d, l = x.shape
    h = np.zeros((b, d, a.shape[1]))
    y = np.zeros((b, d, l))
    for t in range(l):
        e = np.exp(dt[:, :, t, None] * a[None])
        h = e * h + dt[:, :, t, None] * bm[:, None, t, :] * x[:, :, t, None]
        y[:, :, t] = (cm[:, None, t, :] * h).sum(-1)
    return y


def check(name, got, want):
    err = np.abs(np.asarray(got, np.float64) - want).max() / max(np.abs(want).max(), 1e-30)
    if err > TOLERANCE:
        raise SystemExit(f"{name}: relative error {err:.3g} past {TOLERANCE}")


def check_grads(grads, xs, g):
    """A few elements of each gradient against central differences of the f64 reference."""
    for i, gi in enumerate(grads):
        for k in (0, gi.size // 2, gi.size - 1):
            plus = [v.astype(np.float64) for v in xs]
            minus = [v.astype(np.float64) for v in xs]
            eps = 1e-6
            plus[i].reshape(-1)[k] += eps
            minus[i].reshape(-1)[k] -= eps
            want = ((reference(*plus) - reference(*minus)) * g).sum() / (2 * eps)
            got = float(np.asarray(gi).reshape(-1)[k])
            if abs(got - want) > TOLERANCE * max(1.0, abs(want)) * 10:
                raise SystemExit(f"gradient {i}[{k}]: {got} vs {want}")


def run_torch(size, reps, rows):
    import torch

    torch.set_num_threads(len(os.sched_getaffinity(0)))

    def scan(x, dt, a, bm, cm):
        h = torch.zeros(x.shape[0], x.shape[1], a.shape[1])
        ys = []
        for t in range(x.shape[2]):
            e = torch.exp(dt[:, :, t, None] * a[None])
            h = e * h + dt[:, :, t, None] * bm[:, None, t, :] * x[:, :, t, None]
            ys.append((cm[:, None, t, :] * h).sum(-1))
        return torch.stack(ys, -1)

    xs = inputs(size)
    g = torch.from_numpy(inputs((size[0], size[1], size[2], 1))[0])
    compiled = torch.compile(scan)
    for variant, fn in (("PyTorch eager (loop over time)", scan), ("torch.compile", compiled)):
        ts = [torch.from_numpy(v).requires_grad_(True) for v in xs]

        def fwd():
            with torch.no_grad():
                return fn(*ts)

        def fwd_bwd():
            y = fn(*ts)
            return torch.autograd.grad((y * g).sum(), ts)

        check(variant, fwd().numpy(), reference(*xs))
        check_grads([v.numpy() for v in fwd_bwd()], xs, g.numpy().astype(np.float64))
        f = timed(fwd, (), reps, warmup=1)[0]
        b = timed(fwd_bwd, (), reps, warmup=1)[0]
        rows.append({"peer": variant, "size": list(size), "forward_s": f, "backward_s": b})


def run_jax(size, reps, rows):
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", False)

    def scan(x, dt, a, bm, cm):
        def step(h, inp):
            xt, dtt, bt, ct = inp
            h = jnp.exp(dtt[:, :, None] * a[None]) * h + dtt[:, :, None] * bt[:, None] * xt[
                :, :, None
            ]
            return h, (ct[:, None] * h).sum(-1)

        h0 = jnp.zeros((x.shape[0], x.shape[1], a.shape[1]), x.dtype)
        seq = (jnp.moveaxis(x, 2, 0), jnp.moveaxis(dt, 2, 0), jnp.moveaxis(bm, 1, 0),
               jnp.moveaxis(cm, 1, 0))
        _, ys = jax.lax.scan(step, h0, seq)
        return jnp.moveaxis(ys, 0, 2)

    xs = inputs(size)
    g = jnp.asarray(inputs((size[0], size[1], size[2], 1))[0])
    fwd = jax.jit(scan)
    fwd_bwd = jax.jit(jax.grad(lambda *v: (scan(*v) * g).sum(), argnums=(0, 1, 2, 3, 4)))
    args = [jnp.asarray(v) for v in xs]
    check("jax", np.asarray(fwd(*args)), reference(*xs))
    check_grads([np.asarray(v) for v in fwd_bwd(*args)], xs, np.asarray(g, np.float64))
    sync = jax.block_until_ready
    f = timed(fwd, args, reps, warmup=1, sync=sync)[0]
    b = timed(fwd_bwd, args, reps, warmup=1, sync=sync)[0]
    rows.append({"peer": "JAX lax.scan under jit", "size": list(size), "forward_s": f,
                 "backward_s": b})


def report(out):
    lines = [f"# Selective scan, forward and forward + backward (f32, CPU)", "",
             f"Machine: {machine()}", "",
             "| size (B x D x L x N) | implementation | forward (ms) | forward + backward (ms) |"
             " backward / (2 x forward) |",
             "|---|---|---|---|---|"]
    rows = []
    ovl = json.load(open(os.path.join(out, "ovl.json")))
    for r in ovl["rows"]:
        rows.append(dict(r, peer="ovl (derived backward)"))
    for peer in ("torch", "jax"):
        path = os.path.join(out, f"{peer}.json")
        if os.path.exists(path):
            rows += json.load(open(path))
        else:
            lines.insert(4, f"{peer}: DID NOT RUN (see scripts/bench-scan.sh)\n")
    for r in sorted(rows, key=lambda r: (r["size"], r["peer"])):
        size = " x ".join(str(v) for v in r["size"])
        ratio = r["backward_s"] / (2 * r["forward_s"])
        lines.append(f"| {size} | {r['peer']} | {r['forward_s'] * 1e3:.3f} | "
                     f"{r['backward_s'] * 1e3:.3f} | {ratio:.2f} |")
    text = "\n".join(lines) + "\n"
    open(os.path.join(out, "scan.md"), "w").write(text)
    print(text)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--peer", choices=["torch", "jax"])
    p.add_argument("--report", action="store_true")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default="target/scan-bench")
    a = p.parse_args()
    if a.report:
        report(a.out)
        return
    sizes, reps = (SIZES[:1], 3) if a.quick else (SIZES, 7)
    rows = []
    for size in sizes:
        (run_torch if a.peer == "torch" else run_jax)(size, reps, rows)
    json.dump(rows, open(os.path.join(a.out, f"{a.peer}.json"), "w"), indent=1)


if __name__ == "__main__":
    main()

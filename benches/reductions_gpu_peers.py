"""The reductions benchmark, GPU peers: layer norm, softmax, RMS norm and logsumexp along the
last axis at the GPU sizes of `cargo bench --bench reductions -- --gpu`, forward and forward +
backward, in PyTorch eager, under torch.compile and in JAX under jit, on inputs already on the
GPU, each call timed by the wall clock with a synchronization after it and, for PyTorch, by CUDA
events around it (benches/gpu_peers_common.py), against a device-to-device copy measured in the
same run. Each result is checked against NumPy in f64 first. Writes OUT/gpu_peers.json.

The same kernels along axis 0 (down the columns) and a sum over axis 0 follow, under the names
`cargo bench --bench reductions -- --gpu` gives them ("softmax axis 0", ..., "sum axis 0";
benches/reductions/columns.rs), at its column sizes. Without a peer the NumPy references are
still computed and checked against each other's shapes (`--reference-only` stops there).

    python3 benches/reductions_gpu_peers.py --out target/reductions-bench [--quick]

A peer that is missing, or has no GPU, is recorded with the reason; the script exits 0.
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_peers_common import describe, row, start, time_jax, time_torch  # noqa: E402
from reductions_common import EPS, KERNELS, bytes_moved, inputs  # noqa: E402

# The sizes `cargo bench --bench reductions -- --gpu` measures (benches/reductions.rs).
GPU_SIZES = [(1024, 4096), (8192, 1024)]
# Its column sizes (benches/reductions/columns.rs).
COLUMN_SIZES = [(8192, 1024), (1024, 4096)]
COLUMN_KERNELS = ["sum"] + KERNELS


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="target/reductions-bench")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--reference-only", action="store_true",
                        help="compute the NumPy references of the column kernels and exit")
    args = parser.parse_args()
    if args.reference_only:
        for r, c in COLUMN_SIZES:
            x_np, dy_np, _ = inputs(r, c)
            for kernel in COLUMN_KERNELS:
                y, dx = column_reference(kernel, x_np.astype(np.float64),
                                         column_dy(kernel, dy_np))
                assert y.shape == ((c,) if kernel in ("sum", "logsumexp") else (r, c)), kernel
                assert dx.shape == (r, c) and np.isfinite(dx).all(), kernel
                print(f"{kernel} axis 0 {r}x{c}: reference y {y.shape}, dx {dx.shape}")
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    reps = 20 if args.quick else 100
    torch, jax, doc = start(reps)
    for r, c in GPU_SIZES:
        x_np, dy_np, dy_row_np = inputs(r, c)
        for kernel in KERNELS:
            dy_k = dy_row_np if kernel == "logsumexp" else dy_np
            y_ref, dx_ref = reference(kernel, x_np.astype(np.float64), dy_k)
            for backward in (False, True):
                pass_name = "forward+backward" if backward else "forward"
                nbytes = bytes_moved(kernel, r, c, backward)
                want = [y_ref, dx_ref] if backward else [y_ref]
                for name, fn, call_args in peers(torch, jax, kernel, x_np, dy_k, backward):
                    try:
                        got = [np.asarray(to_numpy(t), dtype=np.float64)
                               for t in fn(*call_args)]
                        err = max(float(np.max(np.abs(g - w))) for g, w in zip(got, want))
                        if not err <= 1e-4:
                            raise ValueError(f"max error vs NumPy f64 {err:.1e}")
                        timings = (time_jax(jax, fn, call_args, reps) if name.startswith("jax")
                                   else time_torch(torch, fn, call_args, reps))
                    except Exception as e:
                        print(f"{kernel} {r}x{c} {pass_name} {name}: FAILED "
                              f"({type(e).__name__}: {e})")
                        continue
                    print(f"{kernel:<9} {r:>5}x{c:<6} {pass_name:<16} "
                          f"{describe(name, timings, nbytes)}  max err vs f64 {err:.1e}",
                          flush=True)
                    doc["rows"].append(row(name, timings, nbytes, kernel=kernel, rows=r,
                                           cols=c, **{"pass": pass_name},
                                           max_abs_error_vs_f64=err))
    # Written after each part: a run stopped during the column part keeps the rows.
    (out / "gpu_peers.json").write_text(json.dumps(doc, indent=2))
    columns(torch, jax, doc, reps, out)
    print(f"wrote {out / 'gpu_peers.json'}")


def column_dy(kernel, dy):
    """The incoming gradient along axis 0: dy itself, or one value per column."""
    return dy[0] if kernel in ("sum", "logsumexp") else dy


def columns(torch, jax, doc, reps, out):
    """The column kernels: each along axis 0, forward and (but the sum) forward + backward;
    OUT/gpu_peers.json is written again after each kernel."""
    for r, c in COLUMN_SIZES:
        x_np, dy_np, _ = inputs(r, c)
        for kernel in COLUMN_KERNELS:
            dy_k = column_dy(kernel, dy_np)
            y_ref, dx_ref = column_reference(kernel, x_np.astype(np.float64), dy_k)
            name_k = f"{kernel} axis 0"
            for backward in (False,) if kernel == "sum" else (False, True):
                pass_name = "forward+backward" if backward else "forward"
                per_output = c * 4 if kernel in ("sum", "logsumexp") else r * c * 4
                nbytes = (2 if backward else 1) * (r * c * 4 + per_output)
                want = [y_ref, dx_ref] if backward else [y_ref]
                for name, fn, call_args in peers(torch, jax, kernel, x_np, dy_k, backward,
                                                 axis=0):
                    try:
                        got = [np.asarray(to_numpy(t), dtype=np.float64)
                               for t in fn(*call_args)]
                        err = max(float(np.max(np.abs(g - w))) for g, w in zip(got, want))
                        if not err <= 1e-4 * (1 + max(float(np.max(np.abs(w))) for w in want)):
                            raise ValueError(f"max error vs NumPy f64 {err:.1e}")
                        timings = (time_jax(jax, fn, call_args, reps) if name.startswith("jax")
                                   else time_torch(torch, fn, call_args, reps))
                    except Exception as e:
                        print(f"{name_k} {r}x{c} {pass_name} {name}: FAILED "
                              f"({type(e).__name__}: {e})")
                        continue
                    print(f"{name_k:<17} {r:>5}x{c:<6} {pass_name:<16} "
                          f"{describe(name, timings, nbytes)}  max err vs f64 {err:.1e}",
                          flush=True)
                    doc["rows"].append(row(name, timings, nbytes, kernel=name_k, rows=r,
                                           cols=c, **{"pass": pass_name},
                                           max_abs_error_vs_f64=err))
            (out / "gpu_peers.json").write_text(json.dumps(doc, indent=2))


def column_reference(kernel, x, dy):
    """y and dx along axis 0 in f64: the row reference on the transpose."""
    if kernel == "sum":
        return x.sum(axis=0), np.broadcast_to(dy.astype(np.float64), x.shape).copy()
    y, dx = reference(kernel, np.ascontiguousarray(x.T), dy if dy.ndim == 1 else dy.T)
    return (y if y.ndim == 1 else y.T), dx.T


def to_numpy(t):
    return t.detach().cpu().numpy() if hasattr(t, "detach") else np.asarray(t)


def peers(torch, jax, kernel, x, dy, backward, axis=-1):
    """(variant, callable returning a tuple of outputs, its device arguments) per loaded peer,
    the kernel along `axis` (-1 or 0)."""
    found = []
    if torch is not None:
        f = torch_functions(torch, axis)[kernel]
        step = with_gradient(torch, f) if backward else (lambda x, f=f: (f(x),))
        args = [torch.from_numpy(x).cuda()] + ([torch.from_numpy(dy).cuda()] if backward else [])
        found.append(("pytorch eager", step, args))
        try:
            found.append(("pytorch torch.compile", torch.compile(step), args))
        except Exception as e:  # missing or refused: measure the rest
            print(f"torch.compile unavailable: {e}")
    if jax is not None:
        f = jax_functions(jax, axis)[kernel]
        args = [jax.device_put(x)] + ([jax.device_put(dy)] if backward else [])
        if backward:
            def step(x, dy, f=f):
                y, vjp = jax.vjp(f, x)
                return y, vjp(dy)[0]
        else:
            def step(x, f=f):
                return (f(x),)
        found.append(("jax jit", jax.jit(step).lower(*args).compile(), args))
    return found


def torch_functions(torch, axis=-1):
    def layernorm(x):
        if axis == -1:
            return torch.nn.functional.layer_norm(x, (x.shape[-1],), eps=EPS)
        var, mu = torch.var_mean(x, dim=axis, keepdim=True, correction=0)
        return (x - mu) * torch.rsqrt(var + EPS)

    return {
        "layernorm": layernorm,
        "softmax": lambda x: torch.softmax(x, dim=axis),
        "rmsnorm": lambda x: x * torch.rsqrt(torch.mean(x * x, dim=axis, keepdim=True) + EPS),
        "logsumexp": lambda x: torch.logsumexp(x, dim=axis),
        "sum": lambda x: torch.sum(x, dim=axis),
    }


def jax_functions(jax, axis=-1):
    jnp = jax.numpy

    def layernorm(x):
        mu = jnp.mean(x, axis=axis, keepdims=True)
        var = jnp.mean(jnp.square(x - mu), axis=axis, keepdims=True)
        return (x - mu) * jax.lax.rsqrt(var + EPS)

    return {
        "layernorm": layernorm,
        "softmax": lambda x: jax.nn.softmax(x, axis=axis),
        "rmsnorm": lambda x: x * jax.lax.rsqrt(jnp.mean(x * x, axis=axis, keepdims=True) + EPS),
        "logsumexp": lambda x: jax.nn.logsumexp(x, axis=axis),
        "sum": lambda x: jnp.sum(x, axis=axis),
    }


def reference(kernel, x, dy):
    """y and dx = vjp(dy) in f64 (NumPy), for the check."""
    dy = dy.astype(np.float64)
    if kernel == "softmax":
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        y = e / e.sum(axis=-1, keepdims=True)
        return y, y * (dy - (dy * y).sum(axis=-1, keepdims=True))
    if kernel == "logsumexp":
        m = x.max(axis=-1, keepdims=True)
        y = (m + np.log(np.exp(x - m).sum(axis=-1, keepdims=True)))[:, 0]
        return y, np.exp(x - y[:, None]) * dy[:, None]
    n = x.shape[-1]
    if kernel == "rmsnorm":
        inv = 1.0 / np.sqrt((x * x).mean(axis=-1, keepdims=True) + EPS)
        y = x * inv
        return y, inv * dy - x * inv**3 * (dy * x).sum(axis=-1, keepdims=True) / n
    # layernorm without scale and shift
    mu = x.mean(axis=-1, keepdims=True)
    inv = 1.0 / np.sqrt(((x - mu) ** 2).mean(axis=-1, keepdims=True) + EPS)
    y = (x - mu) * inv
    dx = inv * (dy - dy.mean(axis=-1, keepdims=True)
                - y * (dy * y).mean(axis=-1, keepdims=True))
    return y, dx


def with_gradient(torch, f):
    def run(x, dy):
        x = x.detach().requires_grad_(True)
        y = f(x)
        (dx,) = torch.autograd.grad(y, (x,), (dy,))
        return y.detach(), dx

    return run


if __name__ == "__main__":
    main()

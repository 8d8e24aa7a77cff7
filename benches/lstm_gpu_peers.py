"""The LSTM-cell benchmark, GPU peers: the cell's nonlinearity forward and forward + backward in
PyTorch eager, under torch.compile and in JAX under jit, on inputs already on the GPU, each call
timed by the wall clock with a synchronization after it and, for PyTorch, by CUDA events around
it (benches/gpu_peers_common.py), plus a device-to-device copy bandwidth measured in the same
run. Every peer's results are checked against NumPy in f64 first. Writes OUT/gpu_peers.json for
benches/lstm_report.py and benches/gpu_report.py.

    python3 benches/lstm_gpu_peers.py --out target/lstm-bench [--quick]

A peer that is missing, or has no GPU, is recorded with the reason; the script exits 0, so the
benchmark's one command runs everywhere.
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_peers_common import describe, row, start, time_jax, time_torch  # noqa: E402

FORGET_BIAS = 1.0
# benches/lstm.rs measures the same sizes.
QUICK = [(20, 200), (20, 650), (1024, 4096)]
FULL = [(20, 200), (20, 650), (20, 1500), (1024, 4096)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="target/lstm-bench")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    reps = 10 if args.quick else 30
    torch, jax, doc = start(reps)
    for b, h in QUICK if args.quick else FULL:
        data = inputs(b, h)
        for backward in (False, True):
            want = reference(data, backward)
            case = {"batch": b, "hidden": h,
                    "pass": "forward+backward" if backward else "forward", "kernels": None}
            nbytes = b * h * (56 if backward else 28)
            for variant, fn, args_ in peers(torch, jax, data, backward):
                try:
                    got = [np.asarray(to_numpy(t), dtype=np.float64) for t in fn(*args_)]
                    err = max(float(np.max(np.abs(g - w))) for g, w in zip(got, want))
                    if not err <= 1e-4:
                        raise ValueError(f"max error vs NumPy f64 {err:.1e}")
                    timings = (time_jax(jax, fn, args_, reps) if variant.startswith("jax")
                               else time_torch(torch, fn, args_, reps))
                except Exception as e:  # one peer failing must not lose the others
                    print(f"B={b} H={h} {case['pass']} {variant}: FAILED "
                          f"({type(e).__name__}: {e})")
                    continue
                print(f"B={b:<5} H={h:<5} {case['pass']:<17} {describe(variant, timings, nbytes)}",
                      flush=True)
                doc["rows"].append(row(variant, timings, nbytes, **case))
    (out / "gpu_peers.json").write_text(json.dumps(doc, indent=2))
    print(f"wrote {out / 'gpu_peers.json'}")


def inputs(b, h):
    """z [b, 4h], c, dc, dh [b, h]: uniform in [-2, 2), f32, the same on every run."""
    rng = np.random.default_rng(b * 100003 + h)
    return [rng.uniform(-2, 2, shape).astype(np.float32)
            for shape in ((b, 4 * h), (b, h), (b, h), (b, h))]


def reference(data, backward):
    """new_c, new_h (and dz, dc_prev) in f64 (NumPy)."""
    z, c, dc, dh = (a.astype(np.float64) for a in data)
    n = c.shape[1]
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    i, j, f, o = (z[:, k * n:(k + 1) * n] for k in range(4))
    si, tj, sf, so = sig(i), np.tanh(j), sig(f + FORGET_BIAS), sig(o)
    new_c = c * sf + si * tj
    tc = np.tanh(new_c)
    new_h = tc * so
    if not backward:
        return [new_c, new_h]
    d_nc = dc + dh * so * (1 - tc * tc)
    dz = np.concatenate([d_nc * tj * si * (1 - si), d_nc * si * (1 - tj * tj),
                         d_nc * c * sf * (1 - sf), dh * tc * so * (1 - so)], axis=1)
    return [new_c, new_h, dz, d_nc * sf]


def to_numpy(t):
    return t.detach().cpu().numpy() if hasattr(t, "detach") else np.asarray(t)


def peers(torch, jax, data, backward):
    """(variant, callable, its device arguments) for every peer that loaded."""
    found = []
    if torch is not None:
        args = [torch.from_numpy(a).cuda() for a in data]
        step = torch_step(torch, backward)
        found.append(("pytorch eager", step, args))
        try:
            found.append(("pytorch torch.compile", torch.compile(step), args))
        except Exception as e:  # torch.compile missing or refused: say so, measure the rest
            print(f"torch.compile unavailable: {e}")
    if jax is not None:
        args = [jax.device_put(a) for a in data]
        fn = jax.jit(jax_step(jax, backward)).lower(*args).compile()
        found.append(("jax jit", fn, args))
    return found


def torch_cell(torch, z, c):
    i, j, f, o = torch.chunk(z, 4, dim=1)
    new_c = c * torch.sigmoid(f + FORGET_BIAS) + torch.sigmoid(i) * torch.tanh(j)
    return new_c, torch.tanh(new_c) * torch.sigmoid(o)


def torch_step(torch, backward):
    def forward(z, c, dc, dh):
        return torch_cell(torch, z, c)

    def forward_backward(z, c, dc, dh):
        z = z.detach().requires_grad_(True)
        c = c.detach().requires_grad_(True)
        new_c, new_h = torch_cell(torch, z, c)
        dz, dcp = torch.autograd.grad((new_c, new_h), (z, c), (dc, dh))
        return new_c.detach(), new_h.detach(), dz, dcp

    return forward_backward if backward else forward


def jax_step(jax, backward):
    jnp = jax.numpy

    def cell(z, c):
        i, j, f, o = jnp.split(z, 4, axis=1)
        new_c = c * jax.nn.sigmoid(f + FORGET_BIAS) + jax.nn.sigmoid(i) * jnp.tanh(j)
        return new_c, jnp.tanh(new_c) * jax.nn.sigmoid(o)

    def forward(z, c, dc, dh):
        return cell(z, c)

    def forward_backward(z, c, dc, dh):
        (new_c, new_h), vjp = jax.vjp(cell, z, c)
        dz, dcp = vjp((dc, dh))
        return new_c, new_h, dz, dcp

    return forward_backward if backward else forward


if __name__ == "__main__":
    main()

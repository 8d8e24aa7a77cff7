"""The reductions benchmark, PyTorch side (GPU only): layer norm, softmax, RMS norm and logsumexp
along the last axis at the GPU sizes of `cargo bench --bench reductions -- --gpu`, forward and
forward + backward, in PyTorch eager and under torch.compile, on device tensors, timed with CUDA
events around each whole call, against a device-to-device copy measured in the same run. Each
result is checked against NumPy in f64 first. Writes OUT/torch.json.

    python benches/reductions_torch.py --out target/reductions-bench [--quick]

Without PyTorch, or without a GPU it can use, it writes why into OUT/torch.json and exits 0.
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reductions_common import EPS, KERNELS, bytes_moved, inputs  # noqa: E402
from torch_common import copy_bandwidth, time_gpu  # noqa: E402

# The sizes `cargo bench --bench reductions -- --gpu` measures (benches/reductions.rs).
GPU_SIZES = [(1024, 4096), (8192, 1024)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="target/reductions-bench")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        import torch
    except ImportError as e:
        return skip(out, f"PyTorch is not installed here ({e})")
    if not torch.cuda.is_available():
        return skip(out, f"PyTorch {torch.__version__} sees no CUDA GPU")

    reps = 20 if args.quick else 100
    copy = copy_bandwidth(torch)
    print(f"PyTorch {torch.__version__} on {torch.cuda.get_device_name(0)}: "
          f"device-to-device copy {copy / 1e9:.0f} GB/s")
    functions = {
        "layernorm": lambda x: torch.nn.functional.layer_norm(x, (x.shape[-1],), eps=EPS),
        "softmax": lambda x: torch.softmax(x, dim=-1),
        "rmsnorm": lambda x: x * torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + EPS),
        "logsumexp": lambda x: torch.logsumexp(x, dim=-1),
    }
    rows = []
    for r, c in GPU_SIZES:
        x_np, dy_np, dy_row_np = inputs(r, c)
        for kernel in KERNELS:
            f = functions[kernel]
            x = torch.from_numpy(x_np).cuda()
            dy = torch.from_numpy(dy_row_np if kernel == "logsumexp" else dy_np).cuda()
            y_ref, dx_ref = reference(kernel, x_np.astype(np.float64),
                                      (dy_row_np if kernel == "logsumexp" else dy_np))
            for backward in (False, True):
                pass_name = "forward+backward" if backward else "forward"
                step = with_gradient(torch, f) if backward else f
                variants = [("pytorch eager", step)]
                try:
                    variants.append(("pytorch torch.compile", torch.compile(step)))
                except Exception as e:  # missing or refused: measure the rest
                    print(f"torch.compile unavailable: {e}")
                for name, fn in variants:
                    call_args = (x, dy) if backward else (x,)
                    try:
                        got = fn(*call_args)
                        got = [t.detach().cpu().numpy() for t in got] if backward else [
                            got.detach().cpu().numpy()]
                        err = max(float(np.max(np.abs(g - w))) for g, w in zip(
                            got, [y_ref, dx_ref]))
                        if err > 1e-4:
                            raise ValueError(f"max error vs NumPy f64 {err:.1e}")
                        best, median = time_gpu(torch, fn, call_args, reps)
                    except Exception as e:
                        print(f"{kernel} {r}x{c} {pass_name} {name}: FAILED "
                              f"({type(e).__name__}: {e})")
                        continue
                    gbps = bytes_moved(kernel, r, c, backward) / best / 1e9
                    print(f"{kernel:<9} {r:>5}x{c:<6} {pass_name:<16} {name:<22} "
                          f"best {best * 1e6:9.1f} us  median {median * 1e6:9.1f} us  "
                          f"{gbps:7.1f} GB/s ({100 * gbps * 1e9 / copy:3.0f}% of copy)  "
                          f"max err vs f64 {err:.1e}", flush=True)
                    rows.append({
                        "kernel": kernel, "variant": name, "rows": r, "cols": c,
                        "pass": pass_name, "best_us": best * 1e6, "median_us": median * 1e6,
                        "gb_per_s": gbps, "max_abs_error_vs_f64": err,
                    })
    doc = {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0),
        "copy_gb_per_s": copy / 1e9,
        "timing": "CUDA events around each whole call on device tensors",
        "repetitions": reps,
        "rows": rows,
    }
    (out / "torch.json").write_text(json.dumps(doc, indent=2))
    print(f"wrote {out / 'torch.json'}")


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


def skip(out, why):
    print(f"PYTORCH GPU PART DID NOT RUN: {why}")
    (out / "torch.json").write_text(json.dumps({"skipped": why}, indent=2))


if __name__ == "__main__":
    main()

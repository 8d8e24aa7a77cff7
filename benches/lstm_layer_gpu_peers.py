"""A whole LSTM layer on the GPU, the peers' side (issue 32), and the table.

The layer of benches/lstm_layer_peers.py (same inputs, same NumPy reference) on the GPU, inputs
already there: PyTorch nn.LSTM (cuDNN) and JAX lax.scan under jit, forward and forward +
backward, each in full f32 and with the library's default precision (PyTorch lets cuDNN use
TF32 tensor cores by default, JAX's default matmul precision on such GPUs is TF32 too; ovl's
cuBLAS calls are full f32, or TF32 with `--tf32`). ovl's outputs (benches/lstm_layer_gpu.rs
wrote them) and every
peer's are checked against the reference before anything is timed (full f32: 2e-3 of the
largest value; TF32: 2e-2).

    python benches/lstm_layer_gpu_peers.py [--quick] [--out DIR]

Times (benches/gpu_peers_common.py): PyTorch's from CUDA events and the wall clock with a
synchronization; JAX's from the wall clock; ovl's from benches/lstm_layer_gpu.rs (events and
wall). Writes DIR/lstm_layer_gpu.json and DIR/lstm_layer_gpu.md.
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_peers_common import start, time_jax, time_torch  # noqa: E402
from lstm_layer_peers import SIZES, inputs, jax_layer, reference  # noqa: E402

TOLERANCE = {"f32": 2e-3, "tf32": 2e-2}


def error(got, want):
    got = np.asarray(got, dtype=np.float64).reshape(want.shape)
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))


def check(name, got, want, precision):
    err = error(got, want)
    if not np.isfinite(err) or err > TOLERANCE[precision]:
        raise SystemExit(f"{name}: relative error {err:.2e} against the NumPy reference")
    return err


# ovl's runs: full f32, and with its products on TF32 tensor cores (`--tf32`).
OVL_RUNS = {"f32": "ovl_gpu", "tf32": "ovl_gpu_tf32"}


def check_ovl(out, tag, precision, size, ref_h, ref_grads):
    t, b, h = size
    base = os.path.join(out, f"{tag}_{t}x{b}x{h}")
    if not os.path.exists(base + "_h.f32"):
        return None
    err = check(f"{tag} h", np.fromfile(base + "_h.f32", dtype="<f4"), ref_h, precision)
    for name, want in zip(["dx", "dw", "du", "db"], ref_grads):
        got = np.fromfile(base + f"_{name}.f32", dtype="<f4")
        err = max(err, check(f"{tag} {name}", got, want, precision))
    return err


def torch_rows(torch, size, reps, ref_h, ref_grads):
    t, b, h = size
    x, w, u, bias, g = inputs(t, b, h)
    dev = torch.device("cuda")
    lstm = torch.nn.LSTM(h, h).to(dev)  # gates in the order i, f, g, o, as here
    with torch.no_grad():
        lstm.weight_ih_l0.copy_(torch.from_numpy(w).T)
        lstm.weight_hh_l0.copy_(torch.from_numpy(u).T)
        lstm.bias_ih_l0.copy_(torch.from_numpy(bias))
        lstm.bias_hh_l0.zero_()
    xt, gt = torch.from_numpy(x).to(dev), torch.from_numpy(g).to(dev)
    weights = [lstm.weight_ih_l0, lstm.weight_hh_l0, lstm.bias_ih_l0]

    def forward(xv):
        with torch.no_grad():
            return lstm(xv)[0]

    def forward_backward(xv):
        xv = xv.detach().requires_grad_()
        loss = (lstm(xv)[0] * gt).sum()
        return torch.autograd.grad(loss, [xv] + weights)

    rows = []
    for precision in ("f32", "tf32"):
        torch.backends.cudnn.allow_tf32 = precision == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        name = f"PyTorch nn.LSTM (cuDNN, {precision})"
        err = check(f"{name} h", forward(xt).cpu().numpy(), ref_h, precision)
        dx, dwi, dwh, dbi = (v.detach().cpu().numpy() for v in forward_backward(xt))
        for gname, got, want in zip(
            ["dx", "dw", "du", "db"], [dx, dwi.T, dwh.T, dbi], ref_grads
        ):
            err = max(err, check(f"{name} {gname}", got, want, precision))
        f = time_torch(torch, forward, (xt,), reps)
        fb = time_torch(torch, forward_backward, (xt,), reps)
        rows.append({"peer": name, "forward": f, "backward": fb, "max_rel_error": err})
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cuda.matmul.allow_tf32 = False
    return rows


def jax_rows(jax, size, reps, ref_h, ref_grads):
    import jax.numpy as jnp

    t, b, h = size
    x, w, u, bias, g = inputs(t, b, h)
    rows = []
    for precision in ("f32", "tf32"):
        layer, loss = jax_layer("highest" if precision == "f32" else "default")
        data = [jax.device_put(jnp.asarray(a)) for a in (x, w, u, bias, g)]
        forward = jax.jit(layer).lower(*data[:4]).compile()
        forward_backward = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3))).lower(*data).compile()
        name = f"JAX lax.scan under jit ({precision})"
        err = check(f"{name} h", np.asarray(forward(*data[:4])), ref_h, precision)
        for gname, got, want in zip(["dx", "dw", "du", "db"], forward_backward(*data), ref_grads):
            err = max(err, check(f"{name} {gname}", np.asarray(got), want, precision))
        f = time_jax(jax, forward, data[:4], reps)
        fb = time_jax(jax, forward_backward, data, reps)
        rows.append({"peer": name, "forward": f, "backward": fb, "max_rel_error": err})
    return rows


def us(seconds):
    return f"{seconds * 1e6:.0f}"


def table(doc, ovls):
    first = next(iter(ovls.values()), None)
    lines = [
        f"GPU: {doc.get('device', '?')}; PyTorch {doc.get('torch', '-')}, JAX "
        f"{doc.get('jax', '-')}; ovl: {first.get('cublas', 'did not run') if first else 'did not run'}."
        " Best of the repetitions, µs; GPU = CUDA events around the call, wall = the host's"
        " clock around the call and a synchronization.",
        "",
        "| T, B, H | variant | forward GPU | forward wall | f+b GPU | f+b wall | max rel. error |",
        "|---|---|---|---|---|---|---|",
    ]
    for size in doc["sizes"]:
        key = tuple(size["size"])
        for precision, ovl in ovls.items():
            by_size = {(r["t"], r["b"], r["h"]): r for r in ovl.get("sizes", [])}
            o = by_size.get(key)
            if o is None:
                continue
            how = "replayed as a CUDA graph" if o.get("forward_cuda_graph") else "kernel by kernel"
            err = size.get("ovl_error", {}).get(precision, float("nan"))
            lines.append(
                f"| {key[0]}, {key[1]}, {key[2]} | ovl ({precision}; cuBLAS, fusion level "
                f"{ovl.get('opt_level', '?')}, {how}) | "
                f"{o['forward_us']:.0f} | {o['forward_wall_us']:.0f} | {o['backward_us']:.0f} | "
                f"{o['backward_wall_us']:.0f} | {err:.1e} |"
            )
        for r in size["rows"]:
            f, fb = r["forward"], r["backward"]
            gpu = lambda t: us(t["gpu"][0]) if "gpu" in t else "-"  # noqa: E731
            lines.append(
                f"| {key[0]}, {key[1]}, {key[2]} | {r['peer']} | {gpu(f)} | {us(f['wall'][0])} | "
                f"{gpu(fb)} | {us(fb['wall'][0])} | {r['max_rel_error']:.1e} |"
            )
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default="target/lstm-layer-bench")
    args = parser.parse_args()
    reps = 10 if args.quick else 30
    os.makedirs(args.out, exist_ok=True)
    torch, jax, doc = start(reps)
    ovls = {}
    for precision, tag in OVL_RUNS.items():
        path = os.path.join(args.out, f"{tag}.json")
        if os.path.exists(path):
            with open(path) as f:
                ovls[precision] = json.load(f)
    doc["sizes"] = []
    for size in SIZES[:1] if args.quick else SIZES:
        ref_h, ref_grads = reference(*inputs(*size))
        entry = {"size": list(size), "rows": []}
        entry["ovl_error"] = {}
        for precision, tag in OVL_RUNS.items():
            err = check_ovl(args.out, tag, precision, size, ref_h, ref_grads)
            if err is not None:
                entry["ovl_error"][precision] = err
        if torch is not None:
            entry["rows"] += torch_rows(torch, size, reps, ref_h, ref_grads)
        if jax is not None:
            entry["rows"] += jax_rows(jax, size, reps, ref_h, ref_grads)
        doc["sizes"].append(entry)
        print(f"size {size}: checked and timed", flush=True)
    with open(os.path.join(args.out, "lstm_layer_gpu.json"), "w") as f:
        json.dump(doc, f, indent=1)
    md = table(doc, ovls)
    with open(os.path.join(args.out, "lstm_layer_gpu.md"), "w") as f:
        f.write(md)
    print(md)


if __name__ == "__main__":
    main()

"""The peers of benches/half.rs on the CPU, in f32 and bf16 on the same sizes: PyTorch (eager
ops on bf16 tensors; `nn.LSTM` in bf16) and JAX (bf16 arrays under `jax.jit`; the LSTM layer as
a `lax.scan`), the LSTM cell's nonlinearity, the four row reductions and the whole LSTM layer.
Then the report: one Markdown table with ovl's figures from `half.json` (written by
`cargo bench --bench half`) beside the peers', and the machine line.

    python benches/half_peers.py [--quick] --out DIR      measure the peers, write DIR/half-peers.json
    python benches/half_peers.py --report --out DIR       write DIR/half.md from both files

A peer that is not installed is reported as not run (never skipped silently).
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import machine, timed  # noqa: E402

# The quick sizes of benches/half.rs, and an LSTM layer (T steps, batch B, input and hidden H).
CELL = (512, 1024)
ROWS = (1024, 4096)
LAYER = (35, 20, 256)
KERNELS = ["lstm cell", "softmax", "layernorm", "rmsnorm", "logsumexp", "lstm layer"]


def torch_cases(dtype):
    import torch

    torch.manual_seed(0)
    b, h = CELL
    z, c = torch.randn(b, 4 * h, dtype=dtype), torch.randn(b, h, dtype=dtype)

    def cell(z, c):
        i, j, f, o = z.chunk(4, dim=1)
        nc = c * torch.sigmoid(f) + torch.sigmoid(i) * torch.tanh(j)
        return nc, torch.tanh(nc) * torch.sigmoid(o)

    x = torch.randn(*ROWS, dtype=dtype)
    n = ROWS[1]
    t, bl, hl = LAYER
    lstm = torch.nn.LSTM(hl, hl).to(dtype)
    seq = torch.randn(t, bl, hl, dtype=dtype)
    return {
        "lstm cell": (cell, (z, c)),
        "softmax": (lambda x: torch.softmax(x, dim=-1), (x,)),
        "layernorm": (lambda x: torch.nn.functional.layer_norm(x, (n,), eps=1e-5), (x,)),
        "rmsnorm": (lambda x: torch.nn.functional.rms_norm(x, (n,), eps=1e-5), (x,)),
        "logsumexp": (lambda x: torch.logsumexp(x, dim=-1), (x,)),
        "lstm layer": (lambda s: lstm(s)[0], (seq,)),
    }


def jax_cases(dtype):
    import jax
    import jax.numpy as jnp

    key = jax.random.PRNGKey(0)
    b, h = CELL
    z = jax.random.normal(key, (b, 4 * h)).astype(dtype)
    c = jax.random.normal(key, (b, h)).astype(dtype)

    def cell(z, c):
        i, j, f, o = jnp.split(z, 4, axis=1)
        nc = c * jax.nn.sigmoid(f) + jax.nn.sigmoid(i) * jnp.tanh(j)
        return nc, jnp.tanh(nc) * jax.nn.sigmoid(o)

    def layernorm(x):
        m = x.mean(-1, keepdims=True, dtype=jnp.float32)
        v = ((x.astype(jnp.float32) - m) ** 2).mean(-1, keepdims=True)
        return ((x - m) * jax.lax.rsqrt(v + 1e-5)).astype(x.dtype)

    def rmsnorm(x):
        ms = (x.astype(jnp.float32) ** 2).mean(-1, keepdims=True)
        return (x * jax.lax.rsqrt(ms + 1e-5)).astype(x.dtype)

    x = jax.random.normal(key, ROWS).astype(dtype)
    t, bl, hl = LAYER
    w = (jax.random.normal(key, (hl, 4 * hl)) * 0.05).astype(dtype)
    u = (jax.random.normal(key, (hl, 4 * hl)) * 0.05).astype(dtype)
    seq = jax.random.normal(key, (t, bl, hl)).astype(dtype)

    def layer(seq):
        def step(carry, xt):
            hp, cp = carry
            nc, nh = cell(xt @ w + hp @ u, cp)
            return (nh, nc), nh

        zero = jnp.zeros((bl, hl), dtype)
        return jax.lax.scan(step, (zero, zero), seq)[1]

    return {
        "lstm cell": (jax.jit(cell), (z, c)),
        "softmax": (jax.jit(lambda x: jax.nn.softmax(x, axis=-1)), (x,)),
        "layernorm": (jax.jit(layernorm), (x,)),
        "rmsnorm": (jax.jit(rmsnorm), (x,)),
        "logsumexp": (jax.jit(lambda x: jax.nn.logsumexp(x, axis=-1)), (x,)),
        "lstm layer": (jax.jit(layer), (seq,)),
    }


def measure(reps):
    """{peer: {kernel: {"f32": us, "bf16": us}}} or {peer: "why it did not run"}."""
    out = {}
    try:
        import torch

        torch.set_num_threads(len(__import__("os").sched_getaffinity(0)))
        res = {}
        for name, dtype in (("f32", torch.float32), ("bf16", torch.bfloat16)):
            with torch.no_grad():
                for kernel, (fn, args) in torch_cases(dtype).items():
                    res.setdefault(kernel, {})[name] = timed(fn, args, reps)[0] * 1e6
        out["PyTorch " + torch.__version__] = res
    except ImportError as e:
        out["PyTorch"] = f"DID NOT RUN: {e}"
    try:
        import jax
        import jax.numpy as jnp

        res = {}
        for name, dtype in (("f32", jnp.float32), ("bf16", jnp.bfloat16)):
            for kernel, (fn, args) in jax_cases(dtype).items():
                sync = jax.block_until_ready
                res.setdefault(kernel, {})[name] = timed(fn, args, reps, sync=sync)[0] * 1e6
        out["JAX " + jax.__version__] = res
    except ImportError as e:
        out["JAX"] = f"DID NOT RUN: {e}"
    return out


def report(out_dir):
    ovl = json.loads((out_dir / "half.json").read_text())
    peers = json.loads((out_dir / "half-peers.json").read_text())["peers"]
    ours = {r["kernel"]: r for r in ovl["results"]}
    lines = [
        f"Machine: {ovl['machine']}; {ovl.get('threads', '?')} threads; quick: {ovl['quick']}.",
        "Best time of a call in µs, f32 / bf16 (\"x\": f32's time over bf16's; above 1 bf16 is "
        "faster). ovl's LSTM layer in bf16 is not measured (benches/lstm_layer.rs is f32).",
        "",
    ]
    names = [p for p, r in peers.items() if isinstance(r, dict)]
    head = "| kernel | ovl f32 | ovl bf16 | ovl x |"
    rule = "|---|---|---|---|"
    for p in names:
        head += f" {p} f32 | {p} bf16 | {p} x |"
        rule += "---|---|---|"
    lines += [head, rule]
    for k in KERNELS:
        r = ours.get(k)
        row = f"| {k} |"
        row += (
            f" {r['f32_us']:.1f} | {r['bf16_us']:.1f} | {r['f32_us'] / r['bf16_us']:.2f} |"
            if r
            else " - | - | - |"
        )
        for p in names:
            t = peers[p].get(k, {})
            f, b = t.get("f32"), t.get("bf16")
            row += f" {f:.1f} | {b:.1f} | {f / b:.2f} |" if f and b else " - | - | - |"
        lines.append(row)
    for p, r in peers.items():
        if not isinstance(r, dict):
            lines.append(f"\n{p}: {r}")
    text = "\n".join(lines) + "\n"
    (out_dir / "half.md").write_text(text)
    print(text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--report", action="store_true")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    if args.report:
        report(out_dir)
        return
    res = measure(10 if args.quick else 30)
    (out_dir / "half-peers.json").write_text(json.dumps({"machine": machine(), "peers": res}))
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()

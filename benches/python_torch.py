"""The PyTorch benchmark of the `ovl` package (CPU, or CUDA with `--device cuda` in the GPU
check): ovl programs called through
`ovl.torch.op`, eagerly and inside `torch.compile`, against the same computation written in torch
ops (eager and `torch.compile`), in one run:

- the LSTM cell's nonlinearity (20x200 and 1024x4096) and the layer norm (1024x4096), forward
  and forward + backward (the bundles' gradient programs against torch's autograd);
- the per-call cost of a one-kernel op, `x + 1` on f32[16], against `torch.add`.

    python benches/python_torch.py --bundles DIR --out FILE.json [--quick] [--device cpu|cuda]

DIR holds the bundles `cargo run --release -p ovl-py --example bench_bundles -- DIR`
writes; `scripts/bench-python.sh` does both. Every variant's outputs are checked against torch
eager before timing. Timing: wall clock around whole calls (forward + backward: the forward call
and `torch.autograd.grad` with the given upstream gradients), compilation and warm-up before;
each variant is timed in several rounds, interleaved with the others, and the best round's time
per call is kept (the machine may be shared), the median of rounds reported next to it.
"""

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

import ovl
import ovl.torch
from bench_common import machine

FORGET_BIAS = 1.0
#: Where the tensors are (`--device`).
DEVICE = "cpu"


def sync():
    """Waits for the GPU's queued work (a CUDA run's time is the GPU's, not the queuing's)."""
    if DEVICE != "cpu":
        torch.cuda.synchronize()


def torch_cell(z, c):
    i, j, f, o = torch.chunk(z, 4, dim=1)
    new_c = c * torch.sigmoid(f + FORGET_BIAS) + torch.sigmoid(i) * torch.tanh(j)
    new_h = torch.tanh(new_c) * torch.sigmoid(o)
    return new_c, new_h


def torch_layernorm(x):
    return torch.nn.functional.layer_norm(x, x.shape[-1:], eps=1e-5)


def as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def forward_backward(fn, n_inputs):
    """`(inputs..., upstream...) -> (outputs..., input gradients...)`."""

    def run(*args):
        inputs, upstream = args[:n_inputs], args[n_inputs:]
        outs = as_tuple(fn(*inputs))
        grads = torch.autograd.grad(outs, inputs, upstream)
        return outs + tuple(grads)

    return run


def timed_rounds(variants, args_of, calls, rounds):
    """Per variant: the best and median over `rounds` of the mean time of `calls` calls, the
    rounds of all variants interleaved."""
    times = {name: [] for name, _ in variants}
    for _ in range(rounds):
        for name, fn in variants:
            args = args_of(name)
            sync()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn(*args)
            sync()
            times[name].append((time.perf_counter() - t0) / calls)
    return {n: (min(t), statistics.median(t)) for n, t in times.items()}


def case_rows(label, bundle, torch_fn, make_inputs, make_upstream, quick):
    """The rows of one computation: forward and forward + backward, 4 variants each."""
    rows = []
    op = ovl.torch.op(ovl.load(bundle))
    big = "1024" in label
    calls = (2 if quick else 5) if big else (50 if quick else 300)
    rounds = 3 if quick else 7
    for backward in (False, True):
        torch._dynamo.reset()
        inputs = make_inputs(requires_grad=backward)
        upstream = make_upstream() if backward else ()
        n = len(inputs)
        wrap = (lambda f: forward_backward(f, n)) if backward else (lambda f: f)
        compiled_torch = torch.compile(torch_fn, fullgraph=True)
        compiled_ovl = torch.compile(lambda *a: op(*a), fullgraph=True)
        variants = [
            ("torch eager", wrap(torch_fn)),
            ("torch.compile", wrap(compiled_torch)),
            ("ovl.torch.op eager", wrap(op)),
            ("ovl.torch.op in torch.compile", wrap(compiled_ovl)),
        ]
        want = wrap(torch_fn)(*inputs, *upstream)
        for name, fn in variants:
            for _ in range(2):  # compile and warm up
                got = fn(*inputs, *upstream)
            for g, w in zip(as_tuple(got), as_tuple(want)):
                torch.testing.assert_close(g, w, rtol=2e-3, atol=2e-4, msg=f"{label} {name}")
        results = timed_rounds(variants, lambda _: (*inputs, *upstream), calls, rounds)
        base = results["torch.compile"][0]
        for name, (best, median) in results.items():
            rows.append({
                "case": label,
                "pass": "forward+backward" if backward else "forward",
                "variant": name,
                "best_us": best * 1e6,
                "median_us": median * 1e6,
                "vs_torch_compile": best / base,
            })
            print(f"{label:24s} {rows[-1]['pass']:17s} {name:30s} {best * 1e6:11.1f} us "
                  f"({median * 1e6:.1f} median)  {best / base:5.2f}x torch.compile", flush=True)
    return rows


def per_call_rows(bundle, quick):
    op = ovl.torch.op(ovl.load(bundle))
    x = torch.randn(16, device=DEVICE)
    one = torch.ones(16, device=DEVICE)
    torch.testing.assert_close(op(x), x + 1)
    variants = [
        ("torch.add(x, 1)", lambda: torch.add(x, 1)),
        ("torch.add(x, y)", lambda: torch.add(x, one)),
        ("ovl.torch.op(program)(x)", lambda: op(x)),
        ("its torch.ops overload (x)", lambda: op.overload(x)),
        ("program(x), DLPack", lambda: op.program(x)),
    ]
    results = timed_rounds(variants, lambda _: (), 2000 if quick else 20000, 5 if quick else 11)
    base = results["torch.add(x, 1)"][0]
    rows = []
    for name, (best, median) in results.items():
        rows.append({"case": "x + 1, f32[16], eager", "variant": name, "best_us": best * 1e6,
                     "median_us": median * 1e6, "vs_torch_add": best / base})
        print(f"per call  {name:30s} {best * 1e6:7.2f} us ({median * 1e6:.2f} median)  "
              f"{best / base:5.2f}x torch.add(x, 1)", flush=True)
    return rows


def markdown(doc):
    """The tables of docs/benchmarks.md ("The `ovl` package from PyTorch") for a run."""
    cases = [r for r in doc["rows"] if "pass" in r]
    per_call = [r for r in doc["rows"] if "pass" not in r]
    out = [f"{doc['machine']}, on {doc.get('device', 'cpu')}, PyTorch {doc['torch']} ({doc['torch_threads']} threads), "
           f"ovl's {doc['ovl_kernel']} kernel; best of rounds (median of rounds):", "",
           "| case | pass | torch eager | torch.compile | ovl.torch.op eager | "
           "ovl.torch.op in torch.compile |", "|---|---|---|---|---|---|"]
    keys = []
    for r in cases:
        if (r["case"], r["pass"]) not in keys:
            keys.append((r["case"], r["pass"]))
    for case, pass_ in keys:
        by = {r["variant"]: r for r in cases if (r["case"], r["pass"]) == (case, pass_)}
        cells = [f"{by[v]['best_us'] / 1000:.3g} ms ({by[v]['median_us'] / 1000:.3g}), "
                 f"{by[v]['vs_torch_compile']:.2f}x" for v in
                 ("torch eager", "torch.compile", "ovl.torch.op eager",
                  "ovl.torch.op in torch.compile")]
        out.append(f"| {case} | {pass_} | " + " | ".join(cells) + " |")
    out += ["", "| `x + 1`, f32[16], eager | per call | / `torch.add(x, 1)` |", "|---|---|---|"]
    for r in per_call:
        out.append(f"| {r['variant']} | {r['best_us']:.2f} µs ({r['median_us']:.2f}) | "
                   f"{r['vs_torch_add']:.2f}x |")
    return "\n".join(out) + "\n"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bundles", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = parser.parse_args()
    global DEVICE
    DEVICE = args.device
    bundles = Path(args.bundles)
    print(f"{machine()}, on {DEVICE}, PyTorch {torch.__version__} "
          f"({torch.get_num_threads()} threads), "
          f"ovl's {ovl.torch.kernel_kind()} kernel", flush=True)
    g = torch.Generator().manual_seed(1)

    def uniform(*shape, requires_grad=False):
        t = (torch.rand(*shape, generator=g) * 4 - 2).to(DEVICE)
        return t.requires_grad_(requires_grad)

    rows = []
    rows += per_call_rows(bundles / "add_one.json", args.quick)
    for b, h in [(20, 200), (1024, 4096)]:
        rows += case_rows(
            f"LSTM cell {b}x{h}", bundles / f"lstm_{b}x{h}.json", torch_cell,
            lambda requires_grad, b=b, h=h: (uniform(b, 4 * h, requires_grad=requires_grad),
                                             uniform(b, h, requires_grad=requires_grad)),
            lambda b=b, h=h: (uniform(b, h), uniform(b, h)),
            args.quick,
        )
    rows += case_rows(
        "layer norm 1024x4096", bundles / "layernorm_1024x4096.json", torch_layernorm,
        lambda requires_grad: (uniform(1024, 4096, requires_grad=requires_grad),),
        lambda: (uniform(1024, 4096),),
        args.quick,
    )
    doc = {
        "machine": machine(),
        "device": DEVICE,
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "ovl_kernel": ovl.torch.kernel_kind(),
        "timing": "wall clock per call, best of rounds (median of rounds next to it); "
                  "forward+backward = the forward call and torch.autograd.grad",
        "rows": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=2))
    table = Path(args.out).with_suffix(".md")
    table.write_text(markdown(doc))
    print(f"wrote {args.out} and {table}")


if __name__ == "__main__":
    main()

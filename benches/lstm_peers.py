"""The LSTM-cell benchmark, compiler peers on the CPU: the cell's nonlinearity forward and
forward + backward under JAX jit (CPU backend) and torch.compile (CPU, inductor), on the inputs
benches/lstm_tf.py uses (same generator, seed and order) and with its repetition counts. Each
peer's results are checked against a NumPy reference before timing. Writes OUT/peers.json for
benches/lstm_report.py.

    python benches/lstm_peers.py --out target/lstm-bench [--quick]

Runs with the optional peer environment (`scripts/peer-env.sh`, which `scripts/bench-lstm.sh
--peers` calls). A peer that is not installed, or fails, is recorded with the reason and the
report says that it did not run; the script exits 0 either way.

Timing: wall clock around each whole call, with `block_until_ready` for JAX; compilation happens
before timing (JAX: `jit(..).lower(..).compile()`; torch: warm-up calls), and for torch the
script checks that no frame was traced or compiled during the timed calls (dynamo's counters).
"""

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np

FORGET_BIAS = 1.0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="target/lstm-bench")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # The sizes and repetitions of benches/lstm_tf.py.
    sizes = [(20, 200), (20, 650), (1024, 4096)]
    if not args.quick:
        sizes.insert(2, (20, 1500))
    reps = 5 if args.quick else 20

    rows, peers = [], {}
    for name, run in (("JAX jit", run_jax), ("torch.compile", run_torch)):
        try:
            version, peer_rows = run(sizes, reps)
        except PeerAbsent as e:
            print(f"{name.upper()} DID NOT RUN: {e}", flush=True)
            peers[name] = {"skipped": str(e)}
            continue
        except Exception as e:  # a peer that fails is reported, the other one still runs
            why = f"it failed: {type(e).__name__}: {e}"
            print(f"{name.upper()} DID NOT RUN: {why}", flush=True)
            peers[name] = {"skipped": why}
            continue
        peers[name] = {"version": version}
        rows += peer_rows
    doc = {"peers": peers, "rows": rows,
           "timing": "wall clock around each whole call (JAX: until the outputs are ready)"}
    (out / "peers.json").write_text(json.dumps(doc, indent=2))
    print(f"wrote {out / 'peers.json'}")


class PeerAbsent(Exception):
    """The peer is not installed here."""


def inputs(sizes):
    """The arrays of benches/lstm_tf.py: one generator, seed 1, z c dc dh per size in order."""
    rng = np.random.default_rng(1)
    for b, h in sizes:
        arrays = [rng.uniform(-2, 2, shape).astype(np.float32)
                  for shape in ((b, 4 * h), (b, h), (b, h), (b, h))]
        yield b, h, arrays


def reference(z, c, dc, dh):
    """The cell and its gradients in float64 NumPy: new_c, new_h, dz, dc_prev."""
    z, c, dc, dh = (a.astype(np.float64) for a in (z, c, dc, dh))
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    i, j, f, o = np.split(z, 4, axis=1)
    si, tj, sf, so = sig(i), np.tanh(j), sig(f + FORGET_BIAS), sig(o)
    new_c = c * sf + si * tj
    tc = np.tanh(new_c)
    new_h = tc * so
    d_nc = dc + dh * so * (1 - tc * tc)
    dz = np.concatenate([d_nc * tj * si * (1 - si), d_nc * si * (1 - tj * tj),
                         d_nc * c * sf * (1 - sf), dh * tc * so * (1 - so)], axis=1)
    return new_c, new_h, dz, d_nc * sf


def check(name, got, want):
    """Stops the peer when its results are not the cell's (a benchmark of a wrong program)."""
    for k, (g, w) in enumerate(zip(got, want)):
        err = float(np.max(np.abs(np.asarray(g, dtype=np.float64) - w)))
        if not err <= 1e-4:
            raise AssertionError(f"{name}: output {k} differs from the reference by {err:.2e}")


def timed(call, reps, probe=lambda: 0):
    """Best and median seconds of `reps` calls of `call`, after 3 warm-up calls, and how much
    `probe()` grew during the timed calls (not the warm-up)."""
    for _ in range(3):
        call()
    mark = probe()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times), probe() - mark


def row(variant, b, h, backward, best, median, **extra):
    pass_name = "forward+backward" if backward else "forward"
    gbps = b * h * (56 if backward else 28) / best / 1e9
    print(f"B={b:<5} H={h:<5} {pass_name:<17} {variant:<32}       best {best * 1e6:10.1f} us  "
          f"median {median * 1e6:10.1f} us  {gbps:6.1f} GB/s", flush=True)
    return {"variant": variant, "batch": b, "hidden": h, "pass": pass_name, "kernels": None,
            "best_us": best * 1e6, "median_us": median * 1e6, "gb_per_s": gbps, **extra}


def repetitions(b, h, reps):
    return reps if b * h <= 1 << 20 else min(reps, 10)


def run_jax(sizes, reps):
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    try:
        import jax
        import jax.numpy as jnp
    except ImportError as e:
        raise PeerAbsent(f"JAX is not installed here ({e}); scripts/bench-lstm.sh --peers "
                         "installs it") from None
    jax.config.update("jax_platforms", "cpu")
    device = jax.devices()[0]
    if device.platform != "cpu":
        raise PeerAbsent(f"JAX runs on {device.platform}, not the CPU")
    print(f"JAX {jax.__version__} on {device}", flush=True)

    def cell(z, c):
        i, j, f, o = jnp.split(z, 4, axis=1)
        new_c = c * jax.nn.sigmoid(f + FORGET_BIAS) + jax.nn.sigmoid(i) * jnp.tanh(j)
        new_h = jnp.tanh(new_c) * jax.nn.sigmoid(o)
        return new_c, new_h

    def forward_backward(z, c, dc, dh):
        (new_c, new_h), vjp = jax.vjp(cell, z, c)
        dz, dc_prev = vjp((dc, dh))
        return new_c, new_h, dz, dc_prev

    rows = []
    for b, h, arrays in inputs(sizes):
        want = reference(*arrays)
        args = [jax.device_put(a, device) for a in arrays]
        for backward in (False, True):
            fn, fn_args = (forward_backward, args) if backward else (cell, args[:2])
            compiled = jax.jit(fn).lower(*fn_args).compile()  # compiled before timing
            check("JAX jit", compiled(*fn_args), want if backward else want[:2])
            best, median, _ = timed(lambda: jax.block_until_ready(compiled(*fn_args)),
                                    repetitions(b, h, reps))
            rows.append(row("JAX jit", b, h, backward, best, median))
    return jax.__version__, rows


def run_torch(sizes, reps):
    try:
        import torch
        import torch._dynamo
        from torch._dynamo.utils import counters
    except ImportError as e:
        raise PeerAbsent(f"PyTorch is not installed here ({e}); scripts/bench-lstm.sh --peers "
                         "installs it") from None
    # Without it, torch.autograd.grad inside a compiled function breaks the graph and re-traces
    # at every call.
    torch._dynamo.config.trace_autograd_ops = True
    torch.set_num_threads(os.cpu_count() or 1)
    print(f"PyTorch {torch.__version__} on the CPU ({torch.get_num_threads()} threads), "
          "torch.compile with inductor", flush=True)

    def cell(z, c):
        i, j, f, o = torch.chunk(z, 4, dim=1)
        new_c = c * torch.sigmoid(f + FORGET_BIAS) + torch.sigmoid(i) * torch.tanh(j)
        new_h = torch.tanh(new_c) * torch.sigmoid(o)
        return new_c, new_h

    def forward_backward(z, c, dc, dh):
        z = z.detach().requires_grad_(True)
        c = c.detach().requires_grad_(True)
        new_c, new_h = cell(z, c)
        dz, dc_prev = torch.autograd.grad((new_c, new_h), (z, c), (dc, dh))
        return new_c.detach(), new_h.detach(), dz, dc_prev

    def traced_frames():
        return sum(counters["frames"].values()) + sum(counters["stats"].values())

    rows = []
    for b, h, arrays in inputs(sizes):
        want = reference(*arrays)
        args = [torch.from_numpy(a) for a in arrays]
        for backward in (False, True):
            fn, fn_args = (forward_backward, args) if backward else (cell, args[:2])
            torch._dynamo.reset()
            breaks_before = sum(counters["graph_break"].values())
            compiled = torch.compile(fn, backend="inductor")
            check("torch.compile", [t.detach().numpy() for t in compiled(*fn_args)],
                  want if backward else want[:2])
            best, median, retraced = timed(lambda: compiled(*fn_args), repetitions(b, h, reps),
                                           traced_frames)
            breaks = sum(counters["graph_break"].values()) - breaks_before
            if breaks:
                print(f"torch.compile: {breaks} graph break(s) at B={b} H={h}: part of the "
                      "step runs eagerly", flush=True)
            if retraced:
                raise AssertionError(
                    f"torch.compile traced or compiled {retraced} frame(s) during the timed calls "
                    f"at B={b} H={h} ({'forward+backward' if backward else 'forward'}): the "
                    "timing would include tracing")
            rows.append(row("torch.compile", b, h, backward, best, median,
                            graph_breaks=breaks))
    return torch.__version__, rows


if __name__ == "__main__":
    main()

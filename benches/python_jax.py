"""ovl programs from JAX on the CPU or a GPU (`--device gpu`, in the GPU check): `ovl.jax.op`
inside `jax.jit` against the same computation written in `jax.numpy` under `jax.jit`, in one run.

- the LSTM cell's nonlinearity at 20x200 and 1024x4096 and the layer norm over rows at
  1024x4096, forward and forward + backward (`jax.vjp` with given upstream gradients; ovl's
  backward is the bundle's gradient program);
- the per-call cost of a one-kernel op, `x + 1` on f32[16], inside `jit` (`ovl.jax.op` against
  `jnp.add`: a jitted call of one op, and per call in a chain of 51 inside one jit), and of
  the eager calls (`ovl.jax.op`, and `program(x)` through DLPack) for reference.

    python benches/python_jax.py --bundles DIR [--out target/python-jax-bench] [--quick]
        [--device cpu|gpu]

DIR holds the bundles of `cargo run --release -p ovl-py --example bench_bundles -- DIR`
(`scripts/bench-python-jax.sh` makes them and runs this). Every function is compiled before timing (`jax.jit(f).lower(..).compile()`), each call
waits for its result (`block_until_ready`), each result is checked against the jnp version
first. Each case is timed `--repeat` times (`--reps` calls each) and the minimum kept: the
machine may be busy. Writes OUT/jax.json.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import ovl  # noqa: E402
import ovl.jax as oj  # noqa: E402
from bench_common import machine, timed  # noqa: E402

FORGET_BIAS = 1.0
EPS = 1e-5


def jnp_cell(z, c):
    i, j, f, o = jnp.split(z, 4, axis=1)
    new_c = c * jax.nn.sigmoid(f + FORGET_BIAS) + jax.nn.sigmoid(i) * jnp.tanh(j)
    new_h = jnp.tanh(new_c) * jax.nn.sigmoid(o)
    return new_c, new_h


def jnp_layernorm(x):
    mu = jnp.mean(x, axis=-1, keepdims=True)
    return (x - mu) * jax.lax.rsqrt(jnp.var(x, axis=-1, keepdims=True) + EPS)


def forward_backward(f, n_out):
    """(inputs..., upstream gradients...) -> (outputs..., input gradients...)."""

    def run(*args):
        ins, ups = args[: len(args) - n_out], args[len(args) - n_out :]
        out, vjp = jax.vjp(f, *ins)
        out = out if isinstance(out, tuple) else (out,)
        ups = tuple(ups) if n_out > 1 else ups[0]
        return (*out, *vjp(ups))

    return run


def best_of(fn, args, reps, repeat):
    best, medians = float("inf"), []
    for _ in range(repeat):
        b, m = timed(fn, args, reps, sync=jax.block_until_ready)
        best, medians = min(best, b), medians + [m]
    return best, min(medians)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bundles", required=True)
    parser.add_argument("--out", default="target/python-jax-bench")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu",
                        help="where the arrays are, and so where both sides run")
    args = parser.parse_args()
    device = jax.devices(args.device)[0]
    bundles, out = Path(args.bundles), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    repeat = 2 if args.quick else args.repeat
    rng = np.random.default_rng(1)
    rows = []
    print(f"JAX {jax.__version__} on {device} ({machine()})", flush=True)

    cases = [("lstm", 20, 200), ("lstm", 1024, 4096), ("layernorm", 1024, 4096)]
    for kind, b, h in cases:
        if kind == "lstm":
            program = ovl.load(bundles / f"lstm_{b}x{h}.json")
            ins = [rng.uniform(-2, 2, (b, 4 * h)), rng.uniform(-2, 2, (b, h))]
            ups = [rng.uniform(-2, 2, (b, h)), rng.uniform(-2, 2, (b, h))]
            ref, n_out = jnp_cell, 2
        else:
            program = ovl.load(bundles / f"layernorm_{b}x{h}.json")
            ins, ups = [rng.standard_normal((b, h))], [rng.standard_normal((b, h))]
            ref, n_out = jnp_layernorm, 1
        ins = [jax.device_put(jnp.asarray(a, jnp.float32), device) for a in ins]
        ups = [jax.device_put(jnp.asarray(a, jnp.float32), device) for a in ups]
        ovl_fn = oj.op(program)
        reps = 200 if b * h < 100_000 else (5 if args.quick else 20)
        for backward in (False, True):
            pass_name = "forward+backward" if backward else "forward"
            call_args = (*ins, *ups) if backward else tuple(ins)
            results = {}
            for name, f in (("jax.jit", ref), ("ovl.jax.op in jit", ovl_fn)):
                fn = forward_backward(f, n_out) if backward else f
                compiled = jax.jit(fn).lower(*call_args).compile()
                results[name] = (compiled, compiled(*call_args))
            want = jax.tree_util.tree_leaves(results["jax.jit"][1])
            got = jax.tree_util.tree_leaves(results["ovl.jax.op in jit"][1])
            err = max(float(jnp.max(jnp.abs(g - w))) for g, w in zip(got, want))
            tol = 1e-3 if kind == "lstm" else 2e-3
            assert err < tol, f"{kind} {b}x{h} {pass_name}: ovl differs from jnp by {err}"
            for name, (compiled, _) in results.items():
                best, median = best_of(compiled, call_args, reps, repeat)
                row = dict(kernel=kind, shape=f"{b}x{h}", pass_=pass_name, variant=name,
                           best_us=best * 1e6, median_us=median * 1e6, max_err=err)
                rows.append(row)
                print(f"{kind:<9} {b:>5}x{h:<5} {pass_name:<16} {name:<20} best "
                      f"{best * 1e6:10.1f} us  median {median * 1e6:10.1f} us", flush=True)

    # Per-call cost: x + 1 on f32[16].
    add_one = ovl.load(bundles / "add_one.json")
    x = jax.device_put(jnp.arange(16, dtype=jnp.float32), device)
    op = oj.op(add_one)
    calls = {
        "jnp.add in jit": jax.jit(lambda x: jnp.add(x, 1.0)).lower(x).compile(),
        "ovl.jax.op in jit": jax.jit(op).lower(x).compile(),
        "ovl.jax.op eager": op,
        "program(x) eager (DLPack)": add_one,
    }
    for name, fn in calls.items():
        np.testing.assert_allclose(np.asarray(fn(x)), np.asarray(x) + 1)
        reps = 2000 if "eager" not in name else 300
        best, median = best_of(fn, (x,), reps, repeat)
        rows.append(dict(kernel="x + 1", shape="16", pass_="per call", variant=name,
                         best_us=best * 1e6, median_us=median * 1e6, max_err=0.0))
        print(f"x + 1     f32[16]     per call         {name:<26} best {best * 1e6:8.2f} us  "
              f"median {median * 1e6:8.2f} us", flush=True)

    # The op's own cost inside a compiled function: 51 calls chained in one jit (an
    # optimization barrier after each, so that XLA neither fuses nor drops them) less one call,
    # per call; jit's dispatch drops out.
    def chain(f, n):
        def g(x):
            for _ in range(n):
                x = jax.lax.optimization_barrier(f(x))
            return x

        return jax.jit(g).lower(x).compile()

    for name, fn in (("jnp.add", lambda x: jnp.add(x, 1.0)), ("ovl.jax.op", op)):
        one, many = chain(fn, 1), chain(fn, 51)
        np.testing.assert_allclose(np.asarray(many(x)), np.asarray(x) + 51)
        t1 = best_of(one, (x,), 1000, repeat)[0]
        t51 = best_of(many, (x,), 1000, repeat)[0]
        per = (t51 - t1) / 50
        rows.append(dict(kernel="x + 1", shape="16", pass_="per call in a chain of 51 in jit",
                         variant=name, best_us=per * 1e6, median_us=None, max_err=0.0))
        print(f"x + 1     f32[16]     in a chain       {name:<26} {per * 1e6:8.3f} us per call "
              f"(1 call {t1 * 1e6:.2f} us, 51 calls {t51 * 1e6:.2f} us)", flush=True)

    result = {
        "machine": machine(),
        "device": str(device),
        "jax": jax.__version__,
        "cores": os.cpu_count(),
        "timing": "wall time per call of the compiled function (block_until_ready), best "
        f"of {repeat} repeats; median: the smallest of the repeats' medians",
        "rows": rows,
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    (out / "jax.json").write_text(json.dumps(result, indent=1))
    print(f"wrote {out / 'jax.json'}")


if __name__ == "__main__":
    main()

"""The reductions benchmark, JAX side: the four kernels forward and forward + backward (jax.vjp)
under jax.jit on the CPU, on the inputs benches/reductions_tf.py wrote into OUT/data, each
result checked against TensorFlow's before timing. Run with the optional peer environment
(.venv-peers, `scripts/peer-env.sh jax`); without JAX it writes why into OUT/jax.json and exits
0, so the benchmark's command runs everywhere (the report then says JAX did not run).

    .venv-peers/bin/python benches/reductions_jax.py --out target/reductions-bench [--quick]

Every function is compiled ahead of timing (`jax.jit(f).lower(...).compile()`) and the timed
calls call the compiled executable, so no tracing or compilation is timed; each call waits for
its result (block_until_ready).
"""

import argparse
import json
from pathlib import Path

from bench_common import timed
from reductions_common import EPS, KERNELS, bytes_moved, check, read_case, sizes_for


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="target/reductions-bench")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        import jax
        import jax.numpy as jnp
    except ImportError as e:
        return skip(out, f"JAX is not installed here ({e}); scripts/bench-reductions.sh "
                         f"--peers installs it into .venv-peers")
    backend = jax.default_backend()
    if backend != "cpu":
        return skip(out, f"JAX's default backend is {backend}, not the CPU")
    if not (out / "data").is_dir():
        return skip(out, f"no inputs in {out / 'data'}: run benches/reductions_tf.py first")

    functions = {
        "layernorm": lambda x: (x - jnp.mean(x, axis=-1, keepdims=True))
        * jax.lax.rsqrt(jnp.var(x, axis=-1, keepdims=True) + EPS),
        "softmax": lambda x: jax.nn.softmax(x, axis=-1),
        "rmsnorm": lambda x: x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + EPS),
        "logsumexp": lambda x: jax.nn.logsumexp(x, axis=-1),
    }

    def with_gradient(f):
        def run(x, dy):
            y, vjp = jax.vjp(f, x)
            return y, vjp(dy)[0]

        return run

    sizes, reps = sizes_for(args.quick), (5 if args.quick else 20)
    print(f"JAX {jax.__version__} on {jax.devices()[0]}")
    rows = []
    for r, c in sizes:
        for kernel in KERNELS:
            x_np, dy_np, y_ref, dx_ref = read_case(out / "data", r, c, kernel)
            x, dy = jax.device_put(x_np), jax.device_put(dy_np)
            for backward in (False, True):
                pass_name = "forward+backward" if backward else "forward"
                f = with_gradient(functions[kernel]) if backward else functions[kernel]
                call_args = (x, dy) if backward else (x,)
                compiled = jax.jit(f).lower(*call_args).compile()
                got = compiled(*call_args)
                got = list(got) if backward else [got]
                name = "JAX jit"
                err = check(got, [y_ref, dx_ref], f"{kernel} {r}x{c} {pass_name}, {name}")
                best, median = timed(compiled, call_args, reps, sync=jax.block_until_ready)
                gbps = bytes_moved(kernel, r, c, backward) / best / 1e9
                print(
                    f"{kernel:<9} {r:>5}x{c:<6} {pass_name:<16} {name:<40}   -      "
                    f"best {best * 1e6:10.1f} us  median {median * 1e6:10.1f} us  "
                    f"{gbps:6.1f} GB/s  max err vs TF {err:.1e}",
                    flush=True,
                )
                rows.append({
                    "kernel": kernel,
                    "variant": name,
                    "rows": r,
                    "cols": c,
                    "pass": pass_name,
                    "kernels": None,  # one XLA executable; its internal kernels are not visible
                    "best_us": best * 1e6,
                    "median_us": median * 1e6,
                    "gb_per_s": gbps,
                    "max_abs_error_vs_tensorflow": err,
                })
    doc = {"jax": jax.__version__, "backend": backend, "device": str(jax.devices()[0]),
           "repetitions": reps, "rows": rows}
    (out / "jax.json").write_text(json.dumps(doc, indent=2))
    print(f"wrote {out / 'jax.json'}")


def skip(out, why):
    print(f"JAX PART DID NOT RUN: {why}")
    (out / "jax.json").write_text(json.dumps({"skipped": why}, indent=2))


if __name__ == "__main__":
    main()

"""The reductions benchmark's layout cases, JAX side (issue 34): layer norm, softmax, RMS norm and
logsumexp along axis 0 of a C-order [4096, 1024] f32 matrix, and along the last axis of a
[1024, 4096] matrix held in C order and in Fortran order, under jax.jit on the CPU, each result
checked against a NumPy f64 reference before timing. Timed two ways, as benches/reductions_layouts.rs
times ovl: the NumPy array passed at every call (JAX brings it onto its device each time), and put
on the device once (the kernel alone). Writes OUT/jax_layouts.json.

    .venv-peers/bin/python benches/reductions_layouts_jax.py --out target/reductions-bench [--quick]
"""

import argparse
import json
from pathlib import Path

from bench_common import timed
from reductions_layouts_common import EPS, KERNELS, cases, check


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
        why = f"JAX is not installed here ({e}); scripts/bench-reductions.sh --peers installs it"
        print(f"JAX PART DID NOT RUN: {why}")
        (out / "jax_layouts.json").write_text(json.dumps({"skipped": why}, indent=2))
        return

    def functions(axis):
        return {
            "layernorm": lambda x: (x - jnp.mean(x, axis=axis, keepdims=True))
            * jax.lax.rsqrt(jnp.var(x, axis=axis, keepdims=True) + EPS),
            "softmax": lambda x: jax.nn.softmax(x, axis=axis),
            "rmsnorm": lambda x: x * jax.lax.rsqrt(jnp.mean(x * x, axis=axis, keepdims=True) + EPS),
            "logsumexp": lambda x: jax.nn.logsumexp(x, axis=axis),
        }

    reps = 10 if args.quick else 30
    print(f"JAX {jax.__version__} on {jax.devices()[0]}, best of {reps}")
    rows = []
    for key, x, axis in cases():
        for kernel in KERNELS:
            f = jax.jit(functions(axis)[kernel])
            err = check(kernel, key, f(x), x, axis)
            per_call, _ = timed(f, (x,), reps, sync=jax.block_until_ready)
            on_device = jax.device_put(x)
            once, _ = timed(f, (on_device,), reps, sync=jax.block_until_ready)
            print(f"{kernel:<10} {key:<13} per call {per_call * 1e3:7.3f} ms   "
                  f"on device {once * 1e3:7.3f} ms   max err {err:.1e}", flush=True)
            rows.append({"kernel": kernel, "case": key, "per_call_ms": per_call * 1e3,
                         "fed_once_ms": once * 1e3, "max_abs_error": err})
    doc = {"jax": jax.__version__, "device": str(jax.devices()[0]), "repetitions": reps,
           "rows": rows}
    (out / "jax_layouts.json").write_text(json.dumps(doc, indent=2))
    print(f"wrote {out / 'jax_layouts.json'}")


if __name__ == "__main__":
    main()

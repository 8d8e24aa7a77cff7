"""The reductions benchmark's layout cases, XLA side (issue 34): layer norm, softmax, RMS norm
and logsumexp along axis 0 of a C-order [4096, 1024] f32 matrix, and along the last axis of a
[1024, 4096] matrix held in C order and in Fortran order, in TensorFlow's
tf.function(jit_compile=True) (XLA) on the CPU, each result checked against a NumPy f64
reference before timing. Timed two ways, as benches/reductions_layouts.rs times ovl: the NumPy
array passed at every call (TensorFlow makes it a tensor each time, in row-major order), and a
tensor made once (the kernel alone). Writes OUT/tf_layouts.json.

    .venv/bin/python benches/reductions_layouts_tf.py --out target/reductions-bench [--quick]
"""

import argparse
import json
import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

from bench_common import timed  # noqa: E402
from reductions_layouts_common import EPS, KERNELS, cases, check  # noqa: E402


def functions(axis):
    def layernorm(x):
        m = tf.reduce_mean(x, axis=axis, keepdims=True)
        v = tf.reduce_mean(tf.square(x - m), axis=axis, keepdims=True)
        return (x - m) * tf.math.rsqrt(v + EPS)

    return {
        "layernorm": layernorm,
        "softmax": lambda x: tf.nn.softmax(x, axis=axis),
        "rmsnorm": lambda x: x
        * tf.math.rsqrt(tf.reduce_mean(x * x, axis=axis, keepdims=True) + EPS),
        "logsumexp": lambda x: tf.reduce_logsumexp(x, axis=axis),
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="target/reductions-bench")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    reps = 10 if args.quick else 30
    print(f"TensorFlow {tf.__version__} XLA (jit_compile) on the CPU, best of {reps}")
    rows = []
    for key, x, axis in cases():
        for kernel in KERNELS:
            f = tf.function(functions(axis)[kernel], jit_compile=True)
            err = check(kernel, key, f(x).numpy(), x, axis)
            # Eager TensorFlow runs a function synchronously on the CPU: the call returns with
            # the result computed (as JAX's block_until_ready; no copy out in either).
            per_call, _ = timed(f, (x,), reps)
            tensor = tf.constant(x)
            once, _ = timed(f, (tensor,), reps)
            print(f"{kernel:<10} {key:<13} per call {per_call * 1e3:7.3f} ms   "
                  f"tensor made once {once * 1e3:7.3f} ms   max err {err:.1e}", flush=True)
            rows.append({"kernel": kernel, "case": key, "per_call_ms": per_call * 1e3,
                         "fed_once_ms": once * 1e3, "max_abs_error": err})
    doc = {"tensorflow": tf.__version__, "repetitions": reps, "rows": rows}
    (out / "tf_layouts.json").write_text(json.dumps(doc, indent=2))
    print(f"wrote {out / 'tf_layouts.json'}")


if __name__ == "__main__":
    main()

"""The reductions benchmark, TensorFlow side: layer norm, softmax, RMS norm and logsumexp along
the last axis of a [rows, cols] f32 tensor, forward and forward + backward (the gradient with
respect to x for an incoming gradient dy, through tf.GradientTape), in TensorFlow eager,
tf.function and tf.function(jit_compile=True) (XLA).

    python benches/reductions_tf.py --out target/reductions-bench [--quick]

It also writes the inputs and TensorFlow's results, as raw little-endian f32 files, into
OUT/data/ROWSxCOLS/ (x, dy, dy_row, KERNEL_y, KERNEL_dx): benches/reductions.rs checks every
ovl variant against them before timing it, and benches/reductions_jax.py reads the same inputs.
Writes OUT/tf.json. Bytes as on the ovl side: forward reads x and writes y once, forward +
backward reads x and dy and writes y and dx once.
"""

import argparse
import json
import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

from bench_common import graph_kernels, timed  # noqa: E402
from reductions_common import (  # noqa: E402
    EPS,
    KERNELS,
    bytes_moved,
    check,
    inputs,
    sizes_for,
)


def layernorm(x):
    mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
    return (x - mean) * tf.math.rsqrt(var + EPS)


def softmax(x):
    return tf.nn.softmax(x, axis=-1)


def rmsnorm(x):
    return x * tf.math.rsqrt(tf.reduce_mean(tf.square(x), axis=-1, keepdims=True) + EPS)


def logsumexp(x):
    return tf.reduce_logsumexp(x, axis=-1)


FUNCTIONS = {"layernorm": layernorm, "softmax": softmax, "rmsnorm": rmsnorm,
             "logsumexp": logsumexp}


def with_gradient(f):
    def run(x, dy):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = f(x)
        return y, tape.gradient(y, x, output_gradients=dy)

    return run


def benchmark(sizes, reps, data_dir):
    rows = []
    for r, c in sizes:
        x_np, dy_np, dy_row_np = inputs(r, c)
        case_dir = data_dir / f"{r}x{c}"
        case_dir.mkdir(parents=True, exist_ok=True)
        for name, a in (("x", x_np), ("dy", dy_np), ("dy_row", dy_row_np)):
            a.astype("<f4").tofile(case_dir / f"{name}.f32")
        x = tf.constant(x_np)
        for kernel in KERNELS:
            f = FUNCTIONS[kernel]
            dy = tf.constant(dy_np if kernel != "logsumexp" else dy_row_np)
            # The reference the other sides check against: eager forward + backward.
            y_ref, dx_ref = (t.numpy() for t in with_gradient(f)(x, dy))
            y_ref.astype("<f4").tofile(case_dir / f"{kernel}_y.f32")
            dx_ref.astype("<f4").tofile(case_dir / f"{kernel}_dx.f32")
            for backward in (False, True):
                pass_name = "forward+backward" if backward else "forward"
                g = with_gradient(f) if backward else f
                args = (x, dy) if backward else (x,)
                variants = [
                    ("tensorflow eager", g, None),
                    ("tensorflow tf.function", tf.function(g), "graph"),
                    ("tensorflow XLA", tf.function(g, jit_compile=True), "xla"),
                ]
                for name, fn, kind in variants:
                    got = fn(*args)
                    got = [t.numpy() for t in got] if backward else [got.numpy()]
                    err = check(got, [y_ref, dx_ref], f"{kernel} {r}x{c} {pass_name}, {name}")
                    best, median = timed(fn, args, reps)
                    if kind == "xla":
                        kernels = None  # one XLA cluster; its internal kernels are not visible
                    else:
                        # Eager runs the ops the traced graph holds, one by one.
                        kernels = graph_kernels(tf.function(g) if kind is None else fn, args)
                    gbps = bytes_moved(kernel, r, c, backward) / best / 1e9
                    print(
                        f"{kernel:<9} {r:>5}x{c:<6} {pass_name:<16} {name:<40} "
                        f"{'-' if kernels is None else kernels:>3} ops  best {best * 1e6:10.1f} us  "
                        f"median {median * 1e6:10.1f} us  {gbps:6.1f} GB/s  "
                        f"max err vs eager {err:.1e}",
                        flush=True,
                    )
                    rows.append({
                        "kernel": kernel,
                        "variant": name,
                        "rows": r,
                        "cols": c,
                        "pass": pass_name,
                        "kernels": kernels,
                        "best_us": best * 1e6,
                        "median_us": median * 1e6,
                        "gb_per_s": gbps,
                        "max_abs_error_vs_tensorflow": err,
                    })
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="target/reductions-bench")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    out = Path(args.out)
    sizes, reps = sizes_for(args.quick), (5 if args.quick else 20)
    tf.config.threading.set_intra_op_parallelism_threads(os.cpu_count() or 1)
    rows = benchmark(sizes, reps, out / "data")
    doc = {"tensorflow": tf.__version__, "repetitions": reps, "rows": rows}
    (out / "tf.json").write_text(json.dumps(doc, indent=2))
    print(f"wrote {out / 'tf.json'}")


if __name__ == "__main__":
    main()

"""The jacobian benchmark: ``tape.batch_jacobian`` of the LSTM cell's ``new_h`` with respect to
``z`` (the cell's pre-activations, ``[batch, 4 * hidden]``; ``c`` is a constant), inside
``tf.function``, four ways:

- the ovl cell (``DynamicLib``), vectorized by pfor (``experimental_use_pfor=True``): the
  converter in ``ovl_tf/_pfor.py`` runs the gradient program batched over the ``hidden`` rows
  of the jacobian, one op;
- the ovl cell through the while-loop fallback (``experimental_use_pfor=False``): the gradient
  program once per row;
- the cell in TensorFlow ops, vectorized by pfor, and through the while loop.

Every variant's jacobian is checked first: the ovl ones against each other exactly (the batched
program computes each row as the program does) and against TensorFlow's ops (close).

    scripts/bench-jacobian.sh [--reps N]

or by hand, after exporting the cells (``make_bundles DIR --lstm 20x200 --lstm 256x200``):

    OVL_TF_LIBRARY=target/release/libovl_tf_bridge.so \\
        python ovl-tf-bridge/python/bench_jacobian.py --bundles DIR --out target/jacobian-bench

Writes OUT/jacobian.md (a Markdown table) and OUT/jacobian.json.
"""

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "benches"))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import ovl_tf  # noqa: E402
from bench_common import fmt, timed  # noqa: E402

SIZES = [(20, 200), (256, 200)]


def tf_cell(z, c):
    i, j, f, o = tf.split(z, 4, axis=1)
    new_c = c * tf.sigmoid(f + 1.0) + tf.sigmoid(i) * tf.tanh(j)
    new_h = tf.tanh(new_c) * tf.sigmoid(o)
    return new_c, new_h


def batch_jacobian(cell, c, use_pfor):
    @tf.function
    def run(z):
        with tf.GradientTape() as tape:
            tape.watch(z)
            new_h = cell(z, c)[1]
        return tape.batch_jacobian(new_h, z, experimental_use_pfor=use_pfor)

    return run


def while_loops(fn, z):
    """While ops in the traced graph (0 when pfor vectorized everything)."""
    graph = fn.get_concrete_function(z).graph
    return sum(op.type in ("While", "StatelessWhile") for op in graph.get_operations())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bundles", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=Path("target/jacobian-bench"))
    parser.add_argument("--reps", type=int, default=10)
    args = parser.parse_args()
    rng = np.random.default_rng(3)
    rows = []
    for batch, hidden in SIZES:
        cell = ovl_tf.load(args.bundles / f"lstm_cell_{batch}x{hidden}.json")
        z = tf.constant(rng.uniform(-2, 2, (batch, 4 * hidden)), dtype=tf.float32)
        c = tf.constant(rng.uniform(-2, 2, (batch, hidden)), dtype=tf.float32)
        variants = [
            ("ovl DynamicLib, pfor (vectorized)", batch_jacobian(cell, c, True)),
            ("ovl DynamicLib, while loop", batch_jacobian(cell, c, False)),
            ("TensorFlow ops, pfor", batch_jacobian(tf_cell, c, True)),
            ("TensorFlow ops, while loop", batch_jacobian(tf_cell, c, False)),
        ]
        results = [fn(z).numpy() for _, fn in variants]
        want_shape = (batch, hidden, 4 * hidden)
        for (name, _), r in zip(variants, results):
            assert r.shape == want_shape, (name, r.shape)
        np.testing.assert_array_equal(results[0], results[1])
        for r in results[2:]:
            np.testing.assert_allclose(results[0], r, rtol=2e-5, atol=2e-6)
        assert while_loops(variants[0][1], z) == 0, "the ovl jacobian was not vectorized"
        reference = None
        for name, fn in variants:
            best, median = timed(fn, (z,), args.reps)
            if name == "TensorFlow ops, pfor":
                reference = best
            rows.append(
                {
                    "batch": batch,
                    "hidden": hidden,
                    "variant": name,
                    "best_us": best * 1e6,
                    "median_us": median * 1e6,
                    "while_loops": while_loops(fn, z),
                }
            )
            print(f"{batch} x {hidden}  {name:36} best {fmt(best * 1e6)}", flush=True)
        for r in rows[-len(variants) :]:
            r["vs_tf_pfor"] = r["best_us"] / (reference * 1e6)
    lines = [
        "| batch × hidden | variant | best | median | time / TF ops pfor |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['batch']} × {r['hidden']} | {r['variant']} | {fmt(r['best_us'])} | "
            f"{fmt(r['median_us'])} | {r['vs_tf_pfor']:.2f}x |"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "jacobian.md").write_text("\n".join(lines) + "\n")
    (args.out / "jacobian.json").write_text(
        json.dumps({"reps": args.reps, "tensorflow": tf.__version__, "rows": rows}, indent=2)
    )
    print("\n".join(lines))
    print(f"wrote {args.out / 'jacobian.md'} and {args.out / 'jacobian.json'}")


if __name__ == "__main__":
    main()

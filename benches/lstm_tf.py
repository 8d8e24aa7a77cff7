"""The LSTM-cell benchmark, TensorFlow side: the cell's nonlinearity forward and forward +
backward in TensorFlow ops (eager, tf.function, XLA) and through ovl's DynamicLib op (eager and
inside tf.function, and inside XLA clusters with ovl_tf.enable_xla), plus an end-to-end check: a small LSTM language model on synthetic tokens trained
with TensorFlow's cell and with the ovl cell (same loss curve, time per step), at hidden 200 and
650 and 10 and 35 steps unrolled.

    python benches/lstm_tf.py --out target/lstm-bench [--quick]

Reads the bundles `benches/lstm.rs` exported into OUT/bundles and writes OUT/tf.json. Bytes per
hidden unit as on the ovl side: 28 forward, 56 forward + backward (f32).
"""

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "ovl-tf-bridge" / "python"))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import ovl_tf  # noqa: E402
from bench_common import graph_kernels, timed  # noqa: E402

FORGET_BIAS = 1.0


def tf_cell(z, c):
    i, j, f, o = tf.split(z, 4, axis=1)
    new_c = c * tf.sigmoid(f + FORGET_BIAS) + tf.sigmoid(i) * tf.tanh(j)
    new_h = tf.tanh(new_c) * tf.sigmoid(o)
    return new_c, new_h


def forward_and_backward(cell):
    def run(z, c, dc, dh):
        with tf.GradientTape() as tape:
            tape.watch([z, c])
            new_c, new_h = cell(z, c)
        dz, dcp = tape.gradient([new_c, new_h], [z, c], output_gradients=[dc, dh])
        return new_c, new_h, dz, dcp

    return run


def benchmark(sizes, reps, bundle_dir):
    rows = []
    rng = np.random.default_rng(1)
    for b, h in sizes:
        z = tf.constant(rng.uniform(-2, 2, (b, 4 * h)), dtype=tf.float32)
        c = tf.constant(rng.uniform(-2, 2, (b, h)), dtype=tf.float32)
        dc = tf.constant(rng.uniform(-2, 2, (b, h)), dtype=tf.float32)
        dh = tf.constant(rng.uniform(-2, 2, (b, h)), dtype=tf.float32)
        ovl_cell = ovl_tf.load(bundle_dir / f"lstm_{b}x{h}.json")
        n = reps if b * h <= 1 << 20 else min(reps, 10)
        for backward in (False, True):
            pass_name = "forward+backward" if backward else "forward"
            args = (z, c, dc, dh) if backward else (z, c)
            bytes_moved = b * h * (56 if backward else 28)
            wrap = forward_and_backward if backward else (lambda cell: cell)
            variants = [
                ("tensorflow eager", wrap(tf_cell), None),
                ("tensorflow tf.function", tf.function(wrap(tf_cell)), "graph"),
                ("tensorflow XLA", tf.function(wrap(tf_cell), jit_compile=True), "xla"),
                ("ovl DynamicLib eager", wrap(ovl_cell), "dynamiclib"),
                ("ovl DynamicLib in tf.function", tf.function(wrap(ovl_cell)), "graph"),
            ]
            if ovl_tf.xla_enabled():
                variants.append(
                    ("ovl DynamicLib in XLA", tf.function(wrap(ovl_cell), jit_compile=True),
                     "xla")
                )
            for name, fn, kind in variants:
                best, median = timed(fn, args, n)
                if kind == "graph":
                    kernels = graph_kernels(fn, args)
                elif kind == "xla":
                    kernels = None  # one XLA cluster; its internal kernels are not visible
                elif kind == "dynamiclib":
                    kernels = 2 if backward else 1  # the program, and its gradient program
                else:
                    kernels = 11 if not backward else None
                gbps = bytes_moved / best / 1e9
                print(
                    f"B={b:<5} H={h:<5} {pass_name:<17} {name:<32} "
                    f"{'-' if kernels is None else kernels:>3} ops  best {best * 1e6:10.1f} us  "
                    f"median {median * 1e6:10.1f} us  {gbps:6.1f} GB/s",
                    flush=True,
                )
                rows.append(
                    {
                        "variant": name,
                        "batch": b,
                        "hidden": h,
                        "pass": pass_name,
                        "kernels": kernels,
                        "best_us": best * 1e6,
                        "median_us": median * 1e6,
                        "gb_per_s": gbps,
                    }
                )
    return rows


LM_SIZES = [(200, 10), (200, 35), (650, 10), (650, 35)]


def language_model(steps, bundle_dir, hidden, seq):
    """A one-layer LSTM language model on synthetic tokens (a noisy repeating pattern), batch
    20, `seq` steps unrolled in one tf.function (forward, backward, SGD), trained with
    TensorFlow's cell and with the ovl cell from the same initial weights, and the same step
    with no cell (two slices of the gates instead: what replacing the cell can at best reach).
    The models' steps alternate, so the machine's load falls on all alike."""
    batch, vocab = 20, 50
    bundle = bundle_dir / f"lstm_{batch}x{hidden}.json"
    if not bundle.exists():
        print(f"LANGUAGE MODEL AT HIDDEN {hidden} DID NOT RUN: {bundle} is missing", flush=True)
        return None
    ovl_cell = ovl_tf.load(bundle)
    rng = np.random.default_rng(3)
    pattern = rng.integers(0, vocab, 17)
    tokens = np.stack([np.roll(pattern, s)[np.arange(steps + seq + 1) % 17] for s in range(batch)])
    noise = rng.random(tokens.shape) < 0.1
    tokens = np.where(noise, rng.integers(0, vocab, tokens.shape), tokens).astype(np.int32)

    scale = 0.1 * (200 / hidden) ** 0.5
    init = {
        "embed": rng.normal(0, 0.1, (vocab, hidden)),
        "w": rng.normal(0, scale, (2 * hidden, 4 * hidden)),
        "b": np.zeros(4 * hidden),
        "out": rng.normal(0, scale, (hidden, vocab)),
    }

    def model(cell):
        v = {k: tf.Variable(a, dtype=tf.float32) for k, a in init.items()}
        opt = tf.keras.optimizers.SGD(learning_rate=0.5)

        @tf.function
        def step(x, y):
            with tf.GradientTape() as tape:
                h = tf.zeros((batch, hidden))
                c = tf.zeros((batch, hidden))
                loss = 0.0
                for t in range(seq):
                    e = tf.nn.embedding_lookup(v["embed"], x[:, t])
                    z = tf.matmul(tf.concat([e, h], axis=1), v["w"]) + v["b"]
                    c, h = cell(z, c)
                    logits = tf.matmul(h, v["out"])
                    loss += tf.reduce_mean(
                        tf.nn.sparse_softmax_cross_entropy_with_logits(y[:, t], logits)
                    )
                loss /= seq
            names = sorted(v)
            grads = tape.gradient(loss, [v[k] for k in names])
            opt.apply_gradients(zip(grads, [v[k] for k in names]))
            return loss

        return step

    def no_cell(z, c):
        # The Amdahl bound: the same step with the cell replaced by two slices of `z` (the
        # step's products, lookups, softmax and SGD remain), i.e. the step of a cell that
        # costs nothing.
        return z[:, :hidden], z[:, hidden : 2 * hidden]

    steps_of = {"tensorflow": model(tf_cell), "ovl": model(ovl_cell), "no cell": model(no_cell)}
    losses = {k: [] for k in steps_of}
    times = {k: [] for k in steps_of}
    for s in range(steps):
        x = tokens[:, s : s + seq]
        y = tokens[:, s + 1 : s + seq + 1]
        for name, step in steps_of.items():
            start = time.perf_counter()
            losses[name].append(float(step(x, y)))
            times[name].append(time.perf_counter() - start)
    tf_step, ovl_step, free_step = (
        statistics.median(times[k][2:]) for k in ("tensorflow", "ovl", "no cell")
    )
    tf_losses, ovl_losses = losses["tensorflow"], losses["ovl"]
    gap = max(abs(a - b) for a, b in zip(tf_losses, ovl_losses))
    print(
        f"language model, hidden {hidden}, {seq} steps unrolled, {steps} training steps: loss "
        f"{tf_losses[0]:.3f} -> {tf_losses[-1]:.3f} (tensorflow cell) vs {ovl_losses[0]:.3f} -> "
        f"{ovl_losses[-1]:.3f} (ovl cell), largest difference {gap:.2e}; median step "
        f"{tf_step * 1e3:.2f} ms vs {ovl_step * 1e3:.2f} ms ({ovl_step / tf_step:.2f}x); "
        f"without a cell {free_step * 1e3:.2f} ms (the bound: {free_step / tf_step:.2f}x)",
        flush=True,
    )
    return {
        "batch": batch,
        "hidden": hidden,
        "seq": seq,
        "steps": steps,
        "tensorflow_losses": tf_losses,
        "ovl_losses": ovl_losses,
        "largest_loss_difference": gap,
        "tensorflow_step_ms": tf_step * 1e3,
        "ovl_step_ms": ovl_step * 1e3,
        "no_cell_step_ms": free_step * 1e3,
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(REPO / "target" / "lstm-bench"))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--language-model-only", action="store_true",
                        help="only the language models (reads OUT/bundles, prints, writes "
                             "OUT/language_models.json)")
    args = parser.parse_args()
    out = Path(args.out)
    sizes = [(20, 200), (20, 650), (1024, 4096)]
    if not args.quick:
        sizes.insert(2, (20, 1500))
    reps = 5 if args.quick else 20
    tf.config.threading.set_intra_op_parallelism_threads(os.cpu_count() or 1)
    try:
        ovl_tf.enable_xla()  # DynamicLib inside jit_compile=True (compiled once, cached)
    except RuntimeError as e:
        print(f"OVL DYNAMICLIB IN XLA DID NOT RUN: {e}", flush=True)
    steps = 30 if args.quick else 100
    if args.language_model_only:
        lms = [language_model(steps, out / "bundles", h, seq) for h, seq in LM_SIZES]
        (out / "language_models.json").write_text(json.dumps(lms, indent=2))
        return
    rows = benchmark(sizes, reps, out / "bundles")
    lms = [language_model(steps, out / "bundles", h, seq) for h, seq in LM_SIZES]
    doc = {"tensorflow": tf.__version__, "rows": rows,
           "language_models": [lm for lm in lms if lm is not None]}
    (out / "tf.json").write_text(json.dumps(doc, indent=2))
    print(f"wrote {out / 'tf.json'}")


if __name__ == "__main__":
    main()

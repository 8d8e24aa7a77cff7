"""Per-call cost of DynamicLib inside one tf.function, next to TensorFlow's own ops doing the same.

Each case chains CHAIN calls (every call reads the previous call's result, so nothing runs in
parallel), ITERATIONS times in a `tf.range` loop inside one tf.function, and the same with one
call per iteration; the per-call cost is the difference divided by (CHAIN - 1) * ITERATIONS, so
neither tf.function's dispatch nor the loop is spread over the calls. Each round times every
function once, in turn (the machine's load falls on every case alike); the best of REPEATS
rounds counts. Grappler's arithmetic optimizer is off: it folds a chain of `x + 1` into one op.
Cases:

- ``x + 1`` on float32[16]: the ovl program ``add_one_16`` against TensorFlow's ``AddV2``;
- the LSTM cell (batch 4, hidden 8; the test bundles ``lstm_cell``, fixed shapes, and
  ``lstm_cell_any_batch``, any batch size) against the same cell in TensorFlow ops (split,
  sigmoid, tanh, add, mul: 11 ops), forward, and forward + backward (one ``GradientTape`` per
  chain: gradients of the last ``c`` and of the sum of every ``h`` with respect to ``z`` and
  the first ``c``).

Every pair is checked to compute the same values first. DynamicLib runs its C++ kernel (the
default); `OVL_TF_KERNEL=c-api` measures the C-API kernel instead (TensorFlow picks one kernel
per process, so that is another run).

    cargo build --release -p ovl-tf-bridge
    cargo run --release -p ovl-tf-bridge --example make_bundles -- target/ovl-tf-bundles
    OVL_TF_LIBRARY=target/release/libovl_tf_bridge.so \\
        python ovl-tf-bridge/python/bench_overhead.py [--bundles target/ovl-tf-bundles] [--json F]
"""

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import ovl_tf  # noqa: E402

CHAIN = 50
ITERATIONS = 100
REPEATS = 9
FORGET_BIAS = 1.0


def tf_cell(z, c):
    i, j, f, o = tf.split(z, 4, axis=1)
    new_c = c * tf.sigmoid(f + FORGET_BIAS) + tf.sigmoid(i) * tf.tanh(j)
    new_h = tf.tanh(new_c) * tf.sigmoid(o)
    return new_c, new_h


def add_chain(op, n, iterations=ITERATIONS):
    """A tf.function running `n` calls of `op` in a chain, `iterations` times in a loop."""

    @tf.function
    def run(x, one):
        for _iteration in tf.range(iterations):
            for _call in range(n):
                x = op(x, one)
        return x

    return run


def cell_chain(cell, n, backward, iterations=ITERATIONS):
    """A tf.function running `n` cells in a chain through `c` (every `h` is summed, so each is
    used), `iterations` times in a loop; with `backward`, each iteration also takes the
    gradients of the last `c` and the sum of the `h` with respect to `z` and the first `c`."""

    def forward(z, c):
        hs = []
        for _call in range(n):
            c, h = cell(z, c)
            hs.append(h)
        return c, tf.add_n(hs)

    @tf.function
    def run(z, c):
        total = tf.zeros(())
        for _iteration in tf.range(iterations):
            if backward:
                with tf.GradientTape() as tape:
                    tape.watch([z, c])
                    new_c, h_sum = forward(z, c)
                dz, dc = tape.gradient([new_c, h_sum], [z, c])
                total += tf.reduce_sum(dz) + tf.reduce_sum(dc)
            else:
                new_c, h_sum = forward(z, c)
                total += tf.reduce_sum(h_sum)
            # The next iteration starts from a bounded state.
            c = tf.tanh(new_c)
        return c, total

    return run


def measure(cases):
    """Per case: (seconds per call in a chain, seconds of one iteration of the loop around the
    chain of CHAIN). Every round times each function once, in turn (the machine's load falls on
    every case alike); the best of REPEATS rounds counts."""
    fns = []
    for case in cases:
        long, short = case["make"](CHAIN), case["make"](1)
        long(*case["args"])  # trace, optimize, warm up
        short(*case["args"])
        fns.append((long, short, case["args"]))
    best = [[float("inf"), float("inf")] for _ in fns]
    for _ in range(REPEATS):
        for k, (long, short, args) in enumerate(fns):
            for j, fn in enumerate((long, short)):
                start = time.perf_counter()
                fn(*args)
                best[k][j] = min(best[k][j], time.perf_counter() - start)
    return [
        ((t_long - t_short) / ((CHAIN - 1) * ITERATIONS), t_long / ITERATIONS)
        for t_long, t_short in best
    ]


def check_same(a, b, rtol):
    for x, y in zip(tf.nest.flatten(a), tf.nest.flatten(b)):
        np.testing.assert_allclose(x.numpy(), y.numpy(), rtol=rtol, atol=1e-5)


def main():
    parser = argparse.ArgumentParser()
    repo = HERE.parents[1]
    parser.add_argument("--bundles", default=str(repo / "target" / "ovl-tf-bundles"))
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    # Grappler's arithmetic optimizer folds a chain of `x + 1` into one AddN (and inside a loop
    # TensorFlow 2.21 then returns an empty tensor): off, so that each add runs.
    tf.config.optimizer.set_experimental_options({"arithmetic_optimization": False})
    bundles = Path(args.bundles)
    add_one = ovl_tf.load(bundles / "add_one_16.json")
    fixed = ovl_tf.load(bundles / "lstm_cell.json")
    any_batch = ovl_tf.load(bundles / "lstm_cell_any_batch.json")

    rng = np.random.default_rng(1)
    x = tf.constant(rng.standard_normal(16), dtype=tf.float32)
    one = tf.constant(1.0)
    z = tf.constant(rng.uniform(-2, 2, (4, 32)), dtype=tf.float32)
    c = tf.constant(rng.uniform(-2, 2, (4, 8)), dtype=tf.float32)

    def ovl_add(x, one):
        return add_one(x)

    def tf_add(x, one):
        return tf.add(x, one)  # AddV2

    def case(name, pass_name, variant, make, args, **extra):
        return {"case": name, "pass": pass_name, "variant": variant, "make": make,
                "args": args, **extra}

    add = "x + 1, float32[16]"
    cases = [
        case(add, "forward", "DynamicLib (ovl add_one)", lambda n: add_chain(ovl_add, n),
             (x, one)),
        case(add, "forward", "AddV2 (TensorFlow)", lambda n: add_chain(tf_add, n), (x, one)),
    ]
    for backward in (False, True):
        pass_name = "forward + backward" if backward else "forward"
        for variant, cell in [
            ("DynamicLib, fixed shapes", fixed),
            ("DynamicLib, any batch", any_batch),
            ("TensorFlow ops (11)", tf_cell),
        ]:
            cases.append(case("LSTM cell 4 x 8", pass_name, variant,
                              lambda n, cell=cell, b=backward: cell_chain(cell, n, b), (z, c)))

    # The same values first (one iteration).
    check_same(add_chain(ovl_add, CHAIN, 3)(x, one), add_chain(tf_add, CHAIN, 3)(x, one), 1e-6)
    for backward in (False, True):
        want = cell_chain(tf_cell, CHAIN, backward, 1)(z, c)
        for cell in (fixed, any_batch):
            check_same(cell_chain(cell, CHAIN, backward, 1)(z, c), want, 1e-4)

    print(
        f"TensorFlow {tf.__version__}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs; per call in a chain of {CHAIN} inside one tf.function "
        f"(a loop of {ITERATIONS} chains; best of {REPEATS}); DynamicLib's "
        f"{ovl_tf.kernel_kind()} kernel",
        flush=True,
    )
    rows = []
    for row, (call, iteration) in zip(cases, measure(cases)):
        rows.append({"case": row["case"], "pass": row["pass"], "variant": row["variant"],
                     "per_call_us": call * 1e6, "chain_us": iteration * 1e6})
        print(f"{row['case']:<20} {row['pass']:<19} {row['variant']:<26} {call * 1e6:8.2f} us per "
              f"call  ({iteration * 1e6:8.1f} us per chain of {CHAIN})")
    if args.json:
        Path(args.json).write_text(json.dumps({"tensorflow": tf.__version__, "chain": CHAIN,
                                               "kernel": ovl_tf.kernel_kind(), "rows": rows},
                                              indent=2))


if __name__ == "__main__":
    main()

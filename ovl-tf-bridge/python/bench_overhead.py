"""Per-call overhead of DynamicLib next to a built-in TensorFlow op of the same size.

Both ops compute x + 1 on a float32 tensor of 4 elements inside tf.function: the ovl program
`add_one` (exported by `make_bundles`) and TensorFlow's AddV2. Each function chains CHAIN calls
(every call reads the previous result, and the 1 is a function argument, so Grappler cannot fold
the chain); the per-call time is the function's time divided by CHAIN. A function making a
single call is timed too (that includes tf.function's own dispatch), and so are eager calls.
Best of REPEATS runs.

    OVL_TF_LIBRARY=target/release/libovl_tf_bridge.so \
        python ovl-tf-bridge/python/bench_overhead.py target/ovl-tf-bundles/add_one.json
"""

import sys
import time

import numpy as np
import tensorflow as tf

import ovl_tf

CHAIN = 200
CALLS = 200
REPEATS = 7


def best_seconds(fn, *args):
    fn(*args)  # trace, compile, warm up
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        for _ in range(CALLS):
            fn(*args)
        best = min(best, (time.perf_counter() - start) / CALLS)
    return best


def main():
    program = ovl_tf.load(sys.argv[1] if len(sys.argv) > 1 else "add_one.json")
    x = tf.constant(np.arange(4, dtype=np.float32))
    one = tf.constant(1.0)

    @tf.function
    def ovl_chain(x, one):
        for _ in range(CHAIN):
            x = program(x)
        return x

    @tf.function
    def tf_chain(x, one):
        for _ in range(CHAIN):
            x = tf.raw_ops.AddV2(x=x, y=one)
        return x

    @tf.function
    def ovl_once(x, one):
        return program(x)

    @tf.function
    def tf_once(x, one):
        return tf.raw_ops.AddV2(x=x, y=one)

    np.testing.assert_array_equal(ovl_chain(x, one).numpy(), tf_chain(x, one).numpy())
    rows = [
        ("DynamicLib (ovl add_one), per call in a chain", best_seconds(ovl_chain, x, one) / CHAIN),
        ("AddV2 (TensorFlow), per call in a chain", best_seconds(tf_chain, x, one) / CHAIN),
        ("tf.function with one DynamicLib", best_seconds(ovl_once, x, one)),
        ("tf.function with one AddV2", best_seconds(tf_once, x, one)),
        ("eager DynamicLib", best_seconds(program, x)),
        ("eager AddV2", best_seconds(lambda x: tf.raw_ops.AddV2(x=x, y=one), x)),
    ]
    print(f"TensorFlow {tf.__version__}, float32[4], best of {REPEATS} x {CALLS} calls")
    for name, seconds in rows:
        print(f"{name:<48} {seconds * 1e6:8.2f} us")


if __name__ == "__main__":
    main()

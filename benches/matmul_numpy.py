"""NumPy's matrix product (its BLAS) at the sizes of benches/matmul.rs, f32, in GFLOP/s (best
of the repetitions), and the table against ovl's `DIR/ovl.json`: writes DIR/matmul.md.

    python benches/matmul_numpy.py [--quick] [--out DIR]
"""

import argparse
import json
import os
import time

import numpy as np


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default="target/matmul-bench")
    args = parser.parse_args()
    reps = 5 if args.quick else 20
    with open(os.path.join(args.out, "ovl.json")) as f:
        ovl = json.load(f)
    lines = [
        "| n (f32, n x n x n) | ovl GFLOP/s | NumPy GFLOP/s | ovl / NumPy |",
        "|---|---|---|---|",
    ]
    for row in ovl["sizes"]:
        n = row["n"]
        a = np.random.default_rng(1).random((n, n), dtype=np.float32)
        b = np.random.default_rng(2).random((n, n), dtype=np.float32)
        best = float("inf")
        for _ in range(2):
            a @ b
        for _ in range(max(reps, 2048 // n * 3)):
            start = time.perf_counter()
            a @ b
            best = min(best, time.perf_counter() - start)
        numpy = 2 * n**3 / best / 1e9
        lines.append(f"| {n} | {row['gflops']:.1f} | {numpy:.1f} | {row['gflops'] / numpy:.2f}x |")
    text = f"Machine: {ovl['machine']}.\n\n" + "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "matmul.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()

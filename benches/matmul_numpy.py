"""NumPy's matrix product (its BLAS) at the shapes of benches/matmul.rs (`SHAPES`), f32, in
GFLOP/s (best of the repetitions): writes DIR/numpy.json. With --report, instead, the table of
every round's DIR/ovl.*.json and DIR/numpy.*.json (each shape's best over the rounds), written
to DIR/matmul.md.

    python benches/matmul_numpy.py [--quick] [--out DIR] [--report]
"""

import argparse
import glob
import json
import os
import time

import numpy as np

from bench_common import machine

SHAPES = [
    (512, 512, 512, "nn"),
    (1024, 1024, 1024, "nn"),
    (2048, 2048, 2048, "nn"),
    (20, 650, 2600, "nn"),
    (700, 650, 2600, "nn"),
    (20, 2600, 650, "nt"),
    (650, 700, 2600, "tn"),
    (64, 1024, 4096, "nn"),
    (1280, 1024, 4096, "nn"),
]


def blas():
    """What NumPy's BLAS is and which kernels it runs (threadpoolctl, when installed)."""
    try:
        from threadpoolctl import threadpool_info

        for pool in threadpool_info():
            if pool.get("user_api") == "blas":
                return f"{pool.get('internal_api')} {pool.get('version')}, {pool.get('architecture')} kernels, {pool.get('num_threads')} threads"
    except ImportError:
        pass
    return "threadpoolctl not installed: kernels not known"


def measure(reps):
    rows = []
    for m, k, n, form in SHAPES:
        rng = np.random.default_rng(1)
        a = rng.random((k, m) if form == "tn" else (m, k), dtype=np.float32)
        b = rng.random((n, k) if form == "nt" else (k, n), dtype=np.float32)
        prod = {"nn": lambda: a @ b, "nt": lambda: a @ b.T, "tn": lambda: a.T @ b}[form]
        for _ in range(2):
            prod()
        best = float("inf")
        for _ in range(min(max(reps, 2048 // max(min(m, n), 1) * 3), 60)):
            start = time.perf_counter()
            prod()
            best = min(best, time.perf_counter() - start)
        gflops = 2 * m * k * n / best / 1e9
        print(f"{m}x{k}x{n} {form}: {gflops:.1f} GFLOP/s")
        rows.append({"m": m, "k": k, "n": n, "form": form, "gflops": gflops})
    return rows


def report(out):
    def best(pattern):
        found = {}
        for path in sorted(glob.glob(os.path.join(out, pattern))):
            with open(path) as f:
                data = json.load(f)
            for row in data["sizes"]:
                key = (row["m"], row["k"], row["n"], row["form"])
                found[key] = max(found.get(key, 0.0), row["gflops"])
            found["machine"], found["blas"] = data["machine"], data.get("blas", "")
        return found

    ovl, numpy = best("ovl.*.json"), best("numpy.*.json")
    rounds = len(glob.glob(os.path.join(out, "ovl.*.json")))
    lines = [
        f"Machine: {ovl['machine']}. NumPy's BLAS: {numpy['blas']}. Best of {rounds} "
        "alternating rounds each.",
        "",
        "| product (f32, m x k x n, form) | ovl GFLOP/s | NumPy GFLOP/s | ovl / NumPy speed |",
        "|---|---|---|---|",
    ]
    for m, k, n, form in SHAPES:
        o, p = ovl.get((m, k, n, form)), numpy.get((m, k, n, form))
        if o and p:
            lines.append(f"| {m} x {k} x {n} {form} | {o:.1f} | {p:.1f} | {o / p:.2f}x |")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out, "matmul.md"), "w") as f:
        f.write(text)
    print(text)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default="target/matmul-bench")
    parser.add_argument("--report", action="store_true")
    args = parser.parse_args()
    if args.report:
        return report(args.out)
    rows = measure(5 if args.quick else 20)
    data = {"machine": machine(), "blas": blas(), "sizes": rows}
    with open(os.path.join(args.out, "numpy.json"), "w") as f:
        json.dump(data, f, indent=1)


if __name__ == "__main__":
    main()

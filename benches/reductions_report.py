"""Merges the sides of the reductions benchmark (OUT/ovl.json from benches/reductions.rs,
OUT/tf.json from benches/reductions_tf.py, OUT/jax.json from benches/reductions_jax.py) into
OUT/reductions.json, Markdown tables in OUT/reductions.md (one summary table per pass, the
issue-14 targets, every measurement in detail) and a chart OUT/reductions.png (best time per
variant and size, one panel per kernel and pass, log scale).

    python benches/reductions_report.py --out target/reductions-bench
"""

import argparse
import json
import platform
from pathlib import Path

from bench_common import bar_chart, vector_features, fmt, table
from reductions_common import KERNELS

PASSES = ["forward", "forward+backward"]
PEERS = ["tensorflow eager", "tensorflow tf.function", "tensorflow XLA", "JAX jit"]
OVL = [f"ovl {w}{c}" for w in ("stdlib ops", "hand-written operator", "stdlib function")
       for c in ("", ", compiled once")]
# Issue 14's targets: sizes where ovl must match the fastest peers, and the triad fraction.
TARGET_SIZES = [(1024, 4096), (8192, 1024)]
TARGET_TRIAD = 0.6


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="target/reductions-bench")
    args = parser.parse_args()
    out = Path(args.out)
    ovl = json.loads((out / "ovl.json").read_text())
    tf = load(out / "tf.json", "benches/reductions_tf.py was not run")
    jax = load(out / "jax.json", "benches/reductions_jax.py was not run")
    triad = ovl["triad_gb_per_s"]
    rows = list(ovl["rows"])
    for side in (tf, jax):
        rows += side.get("rows", [])
    for r in rows:
        r["fraction_of_triad"] = r["gb_per_s"] / triad
    order = {v: k for k, v in enumerate(PEERS + OVL)}
    rows.sort(key=lambda r: (KERNELS.index(r["kernel"]), r["rows"] * r["cols"], r["cols"],
                             PASSES.index(r["pass"]), order.get(r["variant"], len(order))))
    sizes = sorted({(r["rows"], r["cols"]) for r in rows}, key=lambda s: (s[0] * s[1], s[1]))
    not_run = {}
    if "skipped" in tf:
        not_run.update({v: tf["skipped"] for v in PEERS[:3]})
    if "skipped" in jax:
        not_run["JAX jit"] = jax["skipped"]

    checked = ("every ovl variant's outputs were checked against TensorFlow's (and a plain-Rust "
               "f64 reference), and JAX's against TensorFlow's, before timing"
               if ovl.get("checked_against_tensorflow") else
               "ovl's outputs were checked against a plain-Rust f64 reference only (no "
               "TensorFlow results were present)")
    lines = [
        f"Machine: {ovl['machine']} ({platform.system()}); vector features: {vector_features()}; "
        "TensorFlow "
        f"{tf.get('tensorflow', 'did not run')}; JAX "
        + (f"{jax['jax']} ({jax['device']})" if "jax" in jax else "did not run")
        + f"; triad bandwidth measured in the same run: {triad:.1f} GB/s"
        + (f" (the better of {ovl['triad_start_gb_per_s']:.1f} before and "
           f"{ovl['triad_end_gb_per_s']:.1f} after the ovl kernels)"
           if "triad_end_gb_per_s" in ovl else "")
        + f"; best of {ovl['repetitions']} calls.",
        "f32, along the last axis of a rows x cols tensor. Bytes counted: forward reads x and "
        "writes y once; forward + backward reads x and dy and writes y and dx once (logsumexp's "
        "y and dy: one value per row).",
        "ovl variants: from stdlib ops with keepdim statistics, one hand-written operator per "
        "kernel (and one for its gradient), the stdlib function (with the gradient it carries); "
        "each recorded at every call and run with `evaluate_into_all`, and compiled once "
        "(`ovl::compile`, `run_into`). Kernels (k): for ovl the kernels launched; for TensorFlow "
        "the compute ops of the traced graph (XLA and JAX: one compiled cluster, not broken "
        f"down). Correctness: {checked}.",
    ]
    lines.append("Summary columns: ovl ops = from stdlib ops, operator = hand-written operator, "
                 "stdlib fn = the stdlib function; compiled = compiled once; k = kernels.")
    for variant, why in not_run.items():
        lines.append(f"{variant}: did not run ({why.splitlines()[0]}).")
    for p in PASSES:
        lines += ["", f"### {p}", ""] + summary(rows, p, sizes, not_run)
    targets, target_lines = check_targets(rows, sizes, triad)
    lines += ["", "### Issue 14's targets", ""] + target_lines
    lines += ["", "### Every measurement", ""]
    lines += table(rows, [("kernel", "kernel"), ("rows", "rows"), ("cols", "cols"),
                          ("pass", "pass")], triad, "triad")
    (out / "reductions.md").write_text("\n".join(lines) + "\n")
    merged = {
        "machine": ovl["machine"],
        "tensorflow": tf.get("tensorflow"),
        "jax": {k: v for k, v in jax.items() if k != "rows"},
        "triad_gb_per_s": triad,
        "checked_against_tensorflow": ovl.get("checked_against_tensorflow"),
        "bytes": ovl["bytes"],
        "not_run": not_run,
        "targets": targets,
        "rows": rows,
    }
    (out / "reductions.json").write_text(json.dumps(merged, indent=2))
    panels = [(f"{k}, {p}", lambda r, k=k, p=p: r["kernel"] == k and r["pass"] == p)
              for k in KERNELS for p in PASSES]
    groups = [(f"{r} x {c}", lambda row, s=(r, c): (row["rows"], row["cols"]) == s)
              for r, c in sizes]
    bar_chart(rows, out / "reductions.png", panels, groups, ncols=2, order=PEERS + OVL)
    print("\n".join(lines))
    print(f"\nwrote {out / 'reductions.md'}, {out / 'reductions.json'}, {out / 'reductions.png'}")


def load(path, why):
    return json.loads(path.read_text()) if path.exists() else {"skipped": why}


def find(rows, kernel, size, p, variant):
    match = [r for r in rows if r["kernel"] == kernel and (r["rows"], r["cols"]) == size
             and r["pass"] == p and r["variant"] == variant]
    return match[0] if match else None


# Short column headers of the summary tables.
SHORT = {
    "tensorflow eager": "TF eager",
    "tensorflow tf.function": "TF tf.function",
    "tensorflow XLA": "TF XLA",
    "JAX jit": "JAX jit",
    "ovl stdlib ops": "ovl ops",
    "ovl stdlib ops, compiled once": "ovl ops, compiled",
    "ovl hand-written operator": "ovl operator",
    "ovl hand-written operator, compiled once": "ovl operator, compiled",
    "ovl stdlib function": "ovl stdlib fn",
    "ovl stdlib function, compiled once": "ovl stdlib fn, compiled",
}


def summary(rows, p, sizes, not_run):
    """One row per kernel and size, one column per variant: best time (kernels)."""
    variants = PEERS + OVL
    lines = [
        "| kernel | rows x cols | " + " | ".join(SHORT[v] for v in variants)
        + " | best ovl, of triad |",
        "|" + "---|" * (len(variants) + 3),
    ]
    for kernel in KERNELS:
        for size in sizes:
            cells = []
            for v in variants:
                r = find(rows, kernel, size, p, v)
                if r is None:
                    cells.append("did not run" if v in not_run else "-")
                elif r["kernels"] is None:
                    cells.append(fmt(r["best_us"]))
                else:
                    cells.append(f"{fmt(r['best_us'])} ({r['kernels']} k)")
            ours = [r for r in (find(rows, kernel, size, p, v) for v in OVL) if r]
            best = max((r["fraction_of_triad"] for r in ours), default=None)
            cells.append("-" if best is None else f"{100 * best:.0f}%")
            lines.append(f"| {kernel} | {size[0]} x {size[1]} | " + " | ".join(cells) + " |")
    return lines


def verdict(met):
    return "not judged (a peer did not run)" if met is None else "met" if met else "MISSED"


def check_targets(rows, sizes, triad):
    """Issue 14's targets, each met or missed, from this run's numbers."""
    results = []
    lines = []
    for kernel in ("layernorm", "softmax"):
        for size in sizes:
            fwd = find(rows, kernel, size, "forward", "ovl stdlib ops")
            both = find(rows, kernel, size, "forward+backward", "ovl stdlib ops")
            if not fwd or not both:
                continue
            backward = both["kernels"] - fwd["kernels"]
            met = fwd["kernels"] <= 2 and backward <= 2
            results.append({"target": "kernels", "kernel": kernel, "rows": size[0],
                            "cols": size[1], "forward_kernels": fwd["kernels"],
                            "forward_backward_kernels": both["kernels"], "met": met})
    lines.append("Kernel counts of layernorm and softmax from stdlib ops (target: at most 2 "
                 "forward, at most 2 more for forward + backward; 1 forward is the goal):")
    lines.append("")
    for t in results:
        lines.append(f"- {t['kernel']} {t['rows']} x {t['cols']}: {t['forward_kernels']} "
                     f"forward, {t['forward_backward_kernels']} forward + backward: "
                     f"{'met' if t['met'] else 'MISSED'}")
    lines += ["", "At " + " and ".join(f"{r} x {c}" for r, c in TARGET_SIZES) + ", every ovl "
              f"variant at or below TF XLA and JAX jit, and at least {100 * TARGET_TRIAD:.0f}% "
              f"of the triad ({triad:.1f} GB/s in this run). Per case, the slowest ovl variant:",
              "", "| kernel | rows x cols | pass | TF XLA | JAX jit | slowest ovl | its time / "
              "the faster peer | lowest triad fraction | met |", "|---|---|---|---|---|---|---|"
              "---|---|"]
    met_count = total = 0
    for kernel in KERNELS:
        for size in TARGET_SIZES:
            if size not in sizes:
                continue
            for p in PASSES:
                ours = [r for r in (find(rows, kernel, size, p, v) for v in OVL) if r]
                if not ours:
                    continue
                xla = find(rows, kernel, size, p, "tensorflow XLA")
                jax = find(rows, kernel, size, p, "JAX jit")
                peers = [r["best_us"] for r in (xla, jax) if r]
                slowest = max(ours, key=lambda r: r["best_us"])
                lowest = min(r["fraction_of_triad"] for r in ours)
                ratio = slowest["best_us"] / min(peers) if peers else None
                # Not judged when a peer did not run.
                met = None if len(peers) < 2 else ratio <= 1.0 and lowest >= TARGET_TRIAD
                total += met is not None
                met_count += bool(met)
                results.append({"target": "speed", "kernel": kernel, "rows": size[0],
                                "cols": size[1], "pass": p, "slowest_ovl": slowest["variant"],
                                "slowest_ovl_us": slowest["best_us"],
                                "tensorflow_xla_us": xla and xla["best_us"],
                                "jax_jit_us": jax and jax["best_us"],
                                "ratio_to_faster_peer": ratio,
                                "lowest_fraction_of_triad": lowest, "met": met})
                lines.append(
                    f"| {kernel} | {size[0]} x {size[1]} | {p} | "
                    f"{fmt(xla['best_us']) if xla else 'did not run'} | "
                    f"{fmt(jax['best_us']) if jax else 'did not run'} | "
                    f"{slowest['variant']} {fmt(slowest['best_us'])} | "
                    f"{'-' if ratio is None else f'{ratio:.2f}x'} | {100 * lowest:.0f}% | "
                    f"{verdict(met)} |")
    judged = sum(1 for t in results if t["target"] == "speed")
    lines += ["", f"Speed targets met in {met_count} of {total} cases"
              + (f" ({judged - total} not judged: a peer did not run)." if judged > total
                 else ".")]
    return results, lines


if __name__ == "__main__":
    main()

"""Merges the sides of the LSTM benchmark (OUT/ovl.json from benches/lstm.rs, OUT/tf.json from
benches/lstm_tf.py, OUT/peers.json from benches/lstm_peers.py when the compiler peers ran,
OUT/gpu_peers.json from benches/lstm_gpu_peers.py) into OUT/lstm.json, Markdown
tables in OUT/lstm.md (CPU; GPU where one was present), and a chart OUT/lstm.png (CPU time per
variant and size, log scale).

    python benches/lstm_report.py --out target/lstm-bench
"""

import argparse
import json
import platform
from pathlib import Path

from bench_common import bar_chart, table as bench_table
from lstm_summary import load_peers, peer_lines, summary


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="target/lstm-bench")
    args = parser.parse_args()
    out = Path(args.out)
    ovl = json.loads((out / "ovl.json").read_text())
    tf = json.loads((out / "tf.json").read_text())
    triad = ovl["triad_gb_per_s"]
    peers = load_peers(out / "peers.json")
    rows = ovl["rows"] + tf["rows"] + peers["rows"]
    for r in rows:
        r["fraction_of_triad"] = r["gb_per_s"] / triad
    rows.sort(key=lambda r: (r["batch"] * r["hidden"], r["hidden"], r["pass"], r["best_us"]))

    lines = [
        f"Machine: {ovl['machine']} ({platform.system()}), TensorFlow {tf['tensorflow']}; "
        f"triad bandwidth measured in the same run: {triad:.1f} GB/s.",
        "Bytes per hidden unit (f32): forward 28 (reads 4 gates + c, writes new_c, new_h); "
        "forward + backward 56 (also reads 2 incoming gradients, writes 5 input gradients).",
        "Kernels: for ovl, the kernels launched; for TensorFlow, the compute ops of the traced "
        "graph (XLA: one cluster, not broken down).",
    ] + peer_lines(peers) + [""] + summary(rows, peers) + [""] + table(rows, triad, "triad")
    lms = tf.get("language_models") or []
    if lms:
        lines += [
            "",
            "Language model (batch 20, forward + backward + SGD in one tf.function; median "
            "time per training step, TensorFlow's cell against the ovl cell in the same run; "
            "no cell: the same step with two slices instead of the cell, the bound of "
            "replacing the cell):",
            "",
            "| hidden | steps unrolled | training steps | loss, TF cell | loss, ovl cell | "
            "largest difference | TF cell | ovl cell | ovl / TF | no cell | bound |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for lm in lms:
            free = lm.get("no_cell_step_ms")
            bound = (
                f"{free:.2f} ms | {free / lm['tensorflow_step_ms']:.2f}x"
                if free is not None
                else "did not run | -"
            )
            lines.append(
                f"| {lm['hidden']} | {lm['seq']} | {lm['steps']} | "
                f"{lm['tensorflow_losses'][0]:.3f} -> {lm['tensorflow_losses'][-1]:.3f} | "
                f"{lm['ovl_losses'][0]:.3f} -> {lm['ovl_losses'][-1]:.3f} | "
                f"{lm['largest_loss_difference']:.1e} | {lm['tensorflow_step_ms']:.2f} ms | "
                f"{lm['ovl_step_ms']:.2f} ms | {lm['ovl_step_ms'] / lm['tensorflow_step_ms']:.2f}x | "
                f"{bound} |"
            )
    peers_path = out / "gpu_peers.json"
    gpu_peers = json.loads(peers_path.read_text()) if peers_path.exists() else {
        "skipped": "benches/lstm_gpu_peers.py was not run"}
    gpu = ovl.get("gpu") or {"skipped": "this ovl.json has no GPU part"}
    lines += gpu_table(gpu, gpu_peers)
    (out / "lstm.md").write_text("\n".join(lines) + "\n")
    merged = {
        "machine": ovl["machine"],
        "tensorflow": tf["tensorflow"],
        "triad_gb_per_s": triad,
        "rows": rows,
        "language_models": lms,
        "peers": peers["peers"],
        "gpu": gpu,
        "gpu_peers": gpu_peers,
    }
    (out / "lstm.json").write_text(json.dumps(merged, indent=2))
    chart(rows, out / "lstm.png")
    print("\n".join(lines))
    print(f"\nwrote {out / 'lstm.md'}, {out / 'lstm.json'}, {out / 'lstm.png'}")


def gpu_table(gpu, peers):
    """The GPU table: ovl's CUDA backend and the GPU peers, against the copy bandwidth ovl
    measured (benches/gpu_report.py writes the comparison table of scripts/bench-gpu.sh)."""
    if "skipped" in gpu:
        return ["", f"GPU: not measured in this run ({gpu['skipped'].splitlines()[0]})."]
    copy = gpu["copy_gb_per_s"]
    rows = list(gpu["rows"])
    lines = [
        "",
        f"GPU: {gpu['device']}; device-to-device copy bandwidth measured in the same run: "
        f"{copy:.0f} GB/s. ovl: {gpu['timing']}.",
    ]
    if "skipped" in peers:
        lines.append(f"Peers: not measured ({peers['skipped']}).")
    else:
        rows += peers["rows"]
        for peer, why in (peers.get("skipped_peers") or {}).items():
            lines.append(f"{peer}: not measured ({why}).")
        lines.append("Peers: PyTorch rows are CUDA-event times around each whole call, JAX rows "
                     "wall times per call (benches/gpu_peers_common.py).")
    rows.sort(key=lambda r: (r["batch"] * r["hidden"], r["hidden"], r["pass"], r["best_us"]))
    return lines + [""] + table(rows, copy, "copy")


def table(rows, reference_gb_per_s, reference):
    """Markdown rows: each variant's times, GB/s, and fraction of the reference bandwidth."""
    keys = [("B", "batch"), ("H", "hidden"), ("pass", "pass")]
    return bench_table(rows, keys, reference_gb_per_s, reference)


def chart(rows, path):
    """CPU time per variant and size, forward and forward + backward side by side."""
    sizes = sorted({(r["batch"], r["hidden"]) for r in rows}, key=lambda s: s[0] * s[1])
    panels = [(f"LSTM cell, {p}", lambda r, p=p: r["pass"] == p)
              for p in ("forward", "forward+backward")]
    groups = [(f"B={b}\nH={h}", lambda r, s=(b, h): (r["batch"], r["hidden"]) == s)
              for b, h in sizes]
    bar_chart(rows, path, panels, groups, ncols=2, sharey=True)


if __name__ == "__main__":
    main()

"""Merges the sides of the LSTM benchmark (OUT/ovl.json from benches/lstm.rs, OUT/tf.json from
benches/lstm_tf.py, OUT/peers.json from benches/lstm_peers.py when the compiler peers ran,
OUT/torch.json from benches/lstm_torch.py) into OUT/lstm.json, Markdown
tables in OUT/lstm.md (CPU; GPU where one was present), and a chart OUT/lstm.png (CPU time per
variant and size, log scale).

    python benches/lstm_report.py --out target/lstm-bench
"""

import argparse
import json
import platform
from pathlib import Path

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
    lm = tf.get("language_model")
    if lm:
        lines += [
            "",
            f"Language model ({lm['steps']} training steps, batch 20, hidden 200): loss "
            f"{lm['tensorflow_losses'][0]:.3f} -> {lm['tensorflow_losses'][-1]:.3f} with "
            f"TensorFlow's cell, {lm['ovl_losses'][0]:.3f} -> {lm['ovl_losses'][-1]:.3f} with the "
            f"ovl cell (largest difference {lm['largest_loss_difference']:.1e}); median time per "
            f"step {lm['tensorflow_step_ms']:.2f} ms vs {lm['ovl_step_ms']:.2f} ms.",
        ]
    torch_path = out / "torch.json"
    torch = json.loads(torch_path.read_text()) if torch_path.exists() else {
        "skipped": "benches/lstm_torch.py was not run"}
    gpu = ovl.get("gpu") or {"skipped": "this ovl.json has no GPU part"}
    lines += gpu_table(gpu, torch)
    (out / "lstm.md").write_text("\n".join(lines) + "\n")
    merged = {
        "machine": ovl["machine"],
        "tensorflow": tf["tensorflow"],
        "triad_gb_per_s": triad,
        "rows": rows,
        "language_model": lm,
        "peers": peers["peers"],
        "gpu": gpu,
        "torch": torch,
    }
    (out / "lstm.json").write_text(json.dumps(merged, indent=2))
    chart(rows, out / "lstm.png")
    print("\n".join(lines))
    print(f"\nwrote {out / 'lstm.md'}, {out / 'lstm.json'}, {out / 'lstm.png'}")


def gpu_table(gpu, torch):
    """The GPU table: ovl's CUDA backend and PyTorch, against the copy bandwidth ovl measured."""
    if "skipped" in gpu:
        return ["", f"GPU: not measured in this run ({gpu['skipped'].splitlines()[0]})."]
    copy = gpu["copy_gb_per_s"]
    rows = list(gpu["rows"])
    lines = [
        "",
        f"GPU: {gpu['device']}; device-to-device copy bandwidth measured in the same run: "
        f"{copy:.0f} GB/s. ovl: {gpu['timing']}.",
    ]
    if "skipped" in torch:
        lines.append(f"PyTorch: not measured ({torch['skipped']}).")
    else:
        rows += torch["rows"]
        lines.append(f"PyTorch {torch['torch']}: {torch['timing']} (its own copy measurement: "
                     f"{torch['copy_gb_per_s']:.0f} GB/s).")
    rows.sort(key=lambda r: (r["batch"] * r["hidden"], r["hidden"], r["pass"], r["best_us"]))
    return lines + [""] + table(rows, copy, "copy")


def table(rows, reference_gb_per_s, reference):
    """Markdown rows: each variant's times, GB/s, and fraction of the reference bandwidth."""
    lines = [
        f"| B | H | pass | variant | kernels | best | median | GB/s | of {reference} |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        kernels = "-" if r["kernels"] is None else str(r["kernels"])
        lines.append(
            f"| {r['batch']} | {r['hidden']} | {r['pass']} | {r['variant']} | {kernels} | "
            f"{fmt(r['best_us'])} | {fmt(r['median_us'])} | {r['gb_per_s']:.1f} | "
            f"{100 * r['gb_per_s'] / reference_gb_per_s:.0f}% |"
        )
    return lines


def fmt(us):
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.0f} µs"


def chart(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    passes = ["forward", "forward+backward"]
    sizes = sorted({(r["batch"], r["hidden"]) for r in rows}, key=lambda s: s[0] * s[1])
    variants = sorted({r["variant"] for r in rows})
    fig, axes = plt.subplots(1, 2, figsize=(14, 5), sharey=True)
    width = 0.8 / len(variants)
    for ax, p in zip(axes, passes):
        for k, v in enumerate(variants):
            times = []
            for s in sizes:
                match = [r for r in rows if r["variant"] == v and r["pass"] == p
                         and (r["batch"], r["hidden"]) == s]
                times.append(match[0]["best_us"] if match else float("nan"))
            xs = [i + (k - len(variants) / 2 + 0.5) * width for i in range(len(sizes))]
            ax.bar(xs, times, width, label=v)
        ax.set_yscale("log")
        ax.set_xticks(range(len(sizes)))
        ax.set_xticklabels([f"B={b}\nH={h}" for b, h in sizes])
        ax.set_title(f"LSTM cell, {p}")
        ax.set_ylabel("best time (µs, log scale)")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()

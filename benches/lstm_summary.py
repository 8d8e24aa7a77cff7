"""The LSTM benchmark's summary for benches/lstm_report.py: one row per size and pass, one
column per variant (best times; "did not run" for a compiler peer that was absent), and the
ratios the project tracks (`evaluate` against the same cell compiled once, and against JAX jit
and torch.compile)."""

# Columns in order: (header, variant name in the rows).
COLUMNS = [
    ("TF eager", "tensorflow eager"),
    ("TF tf.function", "tensorflow tf.function"),
    ("TF XLA", "tensorflow XLA"),
    ("JAX jit", "JAX jit"),
    ("torch.compile", "torch.compile"),
    ("ovl unfused", "ovl unfused (opt 0)"),
    ("ovl fused", "ovl fused automatically (opt 3)"),
    ("ovl hand-fused", "ovl hand-fused"),
    ("ovl fused, compiled once", "ovl fused, compiled once"),
    ("ovl hand-fused, compiled once", "ovl hand-fused, compiled once"),
    ("DL eager", "ovl DynamicLib eager"),
    ("DL in tf.function", "ovl DynamicLib in tf.function"),
    ("DL in XLA", "ovl DynamicLib in XLA"),
]

# The compiler peers of benches/lstm_peers.py.
PEERS = ["JAX jit", "torch.compile"]


def load_peers(path):
    """OUT/peers.json, or a record saying that the peers were not run."""
    import json

    if path.exists():
        return json.loads(path.read_text())
    why = "not requested: scripts/bench-lstm.sh --peers runs them"
    return {"peers": {p: {"skipped": why} for p in PEERS}, "rows": []}


def peer_lines(peers):
    """One line per compiler peer: its version, or that it did not run and why."""
    parts = []
    for name in PEERS:
        p = peers["peers"].get(name, {"skipped": "not in this run"})
        if "skipped" in p:
            parts.append(f"{name}: did not run ({p['skipped']}).")
        else:
            what = "JAX" if name == "JAX jit" else "PyTorch"
            parts.append(f"{name}: {what} {p['version']} on the CPU.")
    return ["Compiler peers (benches/lstm_peers.py, wall clock per call, compiled before "
            "timing): " + " ".join(parts)]


def summary(rows, peers):
    """The wide table and the ratio lines, as Markdown lines."""
    absent = {name for name in PEERS
              if "skipped" in peers["peers"].get(name, {"skipped": ""})}
    best = {(r["batch"], r["hidden"], r["pass"], r["variant"]): r for r in rows}
    keys = sorted({(r["batch"], r["hidden"], r["pass"]) for r in rows},
                  key=lambda k: (k[0] * k[1], k[1], k[2]))
    lines = [
        "Best times (k = kernels launched by ovl; DL = DynamicLib):",
        "",
        "| B × H | pass | " + " | ".join(h for h, _ in COLUMNS) + " |",
        "|---|---|" + "---|" * len(COLUMNS),
    ]
    for b, h, p in keys:
        cells = []
        for _, variant in COLUMNS:
            r = best.get((b, h, p, variant))
            if r is None:
                cells.append("did not run" if variant in absent else "-")
                continue
            cell = _time(r["best_us"])
            if variant.startswith("ovl ") and "DynamicLib" not in variant and r["kernels"]:
                cell += f" ({r['kernels']} k)"
            cells.append(cell)
        pass_name = "fwd + bwd" if p == "forward+backward" else p
        lines.append(f"| {b} × {h} | {pass_name} | " + " | ".join(cells) + " |")

    def ratio(num, den):
        out = []
        for b, h, p in keys:
            n, d = best.get((b, h, p, num)), best.get((b, h, p, den))
            if n and d:
                pass_name = "fwd+bwd" if p == "forward+backward" else "fwd"
                r = n["best_us"] / d["best_us"]
                out.append(f"{b}×{h} {pass_name} {r:.2f}x" if r >= 0.1 else f"{b}×{h} {pass_name} {r:.3f}x")
        return ", ".join(out) if out else "not measured"

    fused = "ovl fused automatically (opt 3)"
    lines += [
        "",
        f"- `evaluate` on a repeated graph (ovl fused) ÷ compiled once: "
        f"{ratio(fused, 'ovl fused, compiled once')}.",
    ]
    lines += [
        f"- DynamicLib in tf.function ÷ TF's cell in tf.function: "
        f"{ratio('ovl DynamicLib in tf.function', 'tensorflow tf.function')}; "
        f"DynamicLib in XLA (`ovl_tf.enable_xla`) ÷ TF XLA: "
        f"{ratio('ovl DynamicLib in XLA', 'tensorflow XLA')}.",
    ]
    for peer in PEERS:
        if peer in absent:
            lines.append(f"- ovl fused ÷ {peer}: {peer} did not run.")
        else:
            lines.append(f"- ovl fused ÷ {peer} (below 1: ovl is faster): {ratio(fused, peer)}.")
    return lines


def _time(us):
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.0f} µs"

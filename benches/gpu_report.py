"""The GPU benchmark report: one Markdown table per benchmark from the files that
scripts/bench-gpu.sh has the benchmarks write, ovl and its peers measured in the same run.

    python3 benches/gpu_report.py --lstm DIR --reductions DIR --out FILE

DIR/ovl.json (benches/lstm.rs, its "gpu" part) or DIR/ovl_gpu.json (benches/reductions.rs
--gpu), and DIR/gpu_peers.json (benches/*_gpu_peers.py). Columns: ovl's kernel time (the sum
of its kernels' GPU times, `ovl::profile`) and the fraction of the device copy bandwidth it
reaches; the wall time of one whole call on device tensors, synchronized, for ovl (compiled
once, `Compiled::run_device_into`) and every peer; PyTorch's GPU time from CUDA events around
the call; and ovl's call against the fastest peer's call. Needs only the standard library.
"""

import argparse
import json
from pathlib import Path

PEERS = ["pytorch eager", "pytorch torch.compile", "jax jit"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lstm", type=Path)
    parser.add_argument("--reductions", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    lines = []
    if args.lstm:
        lines += lstm(args.lstm)
    if args.reductions:
        lines += reductions(args.reductions)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def load(path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        return {"skipped": f"{path} could not be read ({e})"}


def fmt(us):
    if us is None:
        return "-"
    return f"{us / 1000:.2f} ms" if us >= 10000 else f"{us:.1f} µs"


def header(title, ovl, peers, copy):
    lines = [f"### {title}", ""]
    lines.append(f"GPU: {ovl.get('device', peers.get('device', '?'))}; device-to-device copy "
                 f"{copy:.0f} GB/s (ovl's measurement in the same run)."
                 if copy else "GPU: not measured.")
    versions = [f"PyTorch {peers['torch']}" if "torch" in peers else None,
                f"JAX {peers['jax']}" if "jax" in peers else None]
    versions = [v for v in versions if v]
    if versions:
        lines.append("Peers: " + ", ".join(versions) + ".")
    for peer, why in (peers.get("skipped_peers") or {}).items():
        lines.append(f"{peer}: did not run ({why}).")
    if "skipped" in peers:
        lines.append(f"Peers: did not run ({peers['skipped']}).")
    return lines + [""]


def table(cases, ovl_kernel, ovl_call, peer_rows, bytes_of, copy, case_cols):
    """Rows of the table: for each case, ovl's kernel time and call, each peer's call. The
    fraction of the copy bandwidth is that of ovl's call on device tensors (its GPU time)."""
    head = case_cols + ["ovl kernels (profile)", "ovl call (GPU)", "% of copy", "ovl call (wall)"]
    for p in PEERS:
        head += [f"{p} (wall)"] + ([f"{p} (GPU)"] if p.startswith("pytorch") else [])
    head += ["ovl call / best peer call"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, label in cases:
        k = ovl_kernel.get(key)
        c = ovl_call.get(key)
        cells = list(label)
        cells.append(f"{fmt(k['best_us'])} ({k['kernels']})" if k else "-")
        g = c.get("gpu_best_us") if c else None
        cells.append(fmt(g))
        cells.append(f"{100 * bytes_of(key) / (g * 1e-6) / 1e9 / copy:.0f}%" if g and copy else "-")
        cells.append(fmt(c["best_us"]) if c else "-")
        walls = []
        for p in PEERS:
            r = peer_rows.get((key, p))
            cells.append(fmt(r["wall_best_us"]) if r else "-")
            if r:
                walls.append(r["wall_best_us"])
            if p.startswith("pytorch"):
                cells.append(fmt(r["best_us"]) if r else "-")
        cells.append(f"{c['best_us'] / min(walls):.2f}x" if c and walls else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def lstm(d):
    doc = load(d / "ovl.json")
    gpu = doc.get("gpu") or {"skipped": doc.get("skipped", "no GPU part in ovl.json")}
    if "skipped" in gpu:
        return ["### LSTM cell", "", f"Not measured: {gpu['skipped'].splitlines()[0]}", ""]
    peers = load(d / "gpu_peers.json")
    copy = gpu.get("copy_gb_per_s")
    key = lambda r: (r["batch"], r["hidden"], r["pass"])  # noqa: E731
    kernel = {key(r): r for r in gpu["rows"] if r["variant"] == "ovl fused automatically (opt 3) CUDA"}
    call = {key(r): r for r in gpu["rows"]
            if r["variant"] == "ovl fused automatically (opt 3) CUDA, call on device tensors"}
    peer_rows = {(key(r), r["variant"]): r for r in peers.get("rows", [])}
    cases = sorted(set(kernel) | set(call), key=lambda k: (k[0] * k[1], k[2]))
    bytes_of = lambda k: k[0] * k[1] * (56 if k[2] == "forward+backward" else 28)  # noqa: E731
    return header("LSTM cell (fused automatically, f32)", gpu, peers, copy) + table(
        [(k, [f"{k[0]}x{k[1]}", k[2]]) for k in cases], kernel, call, peer_rows, bytes_of,
        copy, ["B x H", "pass"]) + [""]


# The reductions' ovl variants with a table each: (title, variant in ovl_gpu.json).
REDUCTION_TABLES = [
    ("Row reductions (stdlib functions, f32)", "ovl stdlib function CUDA"),
    ("Column reductions (along axis 0, from stdlib operators, f32)",
     "ovl stdlib ops along axis 0 CUDA"),
]


def reductions(d):
    ovl = load(d / "ovl_gpu.json")
    if "rows" not in ovl:
        why = ovl.get("skipped", "no rows in ovl_gpu.json").splitlines()[0]
        return ["### Row and column reductions", "", f"Not measured: {why}", ""]
    peers = load(d / "gpu_peers.json")
    copy = ovl.get("copy_gb_per_s")
    key = lambda r: (r["kernel"], r["rows"], r["cols"], r["pass"])  # noqa: E731
    peer_rows = {(key(r), r["variant"]): r for r in peers.get("rows", [])}
    lines = []
    for title, variant in REDUCTION_TABLES:
        mine = [r for r in ovl["rows"] if r["variant"] == variant]
        if not mine:
            continue
        kernel = {key(r): r for r in mine}
        call = {key(r): {"best_us": r["call_best_us"], "gpu_best_us": r.get("call_gpu_best_us")}
                for r in mine if "call_best_us" in r}

        def bytes_of(k, by_key=kernel):
            r = by_key[k]
            return r["gb_per_s"] * 1e9 * r["best_us"] * 1e-6

        cases = [(k, [k[0], f"{k[1]}x{k[2]}", k[3]]) for k in kernel]
        lines += header(title, ovl, peers, copy) + table(
            cases, kernel, call, peer_rows, bytes_of, copy,
            ["kernel", "rows x cols", "pass"]) + [""]
    return lines


if __name__ == "__main__":
    main()

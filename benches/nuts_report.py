"""Merges the NUTS benchmark's JSON files (nuts-ovl.json, nuts-numpyro.json, nuts-tfp.json in
DIR) into DIR/nuts.json ({"rows": [...]}) and a Markdown table, DIR/nuts.md (also printed)."""

import json
import os
import sys


def main(out_dir, machine):
    rows = []
    for impl in ("ovl", "numpyro", "tfp"):
        path = os.path.join(out_dir, f"nuts-{impl}.json")
        if os.path.exists(path):
            with open(path) as f:
                rows += json.load(f)["rows"]
    rows.sort(key=lambda r: (r["model"], r["chains"], r["impl"]))
    with open(os.path.join(out_dir, "nuts.json"), "w") as f:
        json.dump({"machine": machine, "rows": rows}, f, indent=1)
    lines = [
        f"NUTS, {machine}: the fastest of the repeats (noisy: see docs/benchmarks.md).",
        "",
        "| model | chains | implementation | transitions | seconds | leapfrogs/s | ESS/s "
        "| mean depth | accept | divergences |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['chains']} | {r['impl']} | {r['transitions']} "
            f"| {r['seconds']:.3f} | {r['leapfrogs_per_s']:.3g} | {r['ess_per_s']:.3g} "
            f"| {r['mean_depth']:.2f} | {r['mean_accept']:.2f} | {r['divergences']} |"
        )
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out_dir, "nuts.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "this machine")

"""The table of the reductions benchmark's layout cases: OUT/ovl_layouts.json
(benches/reductions_layouts.rs) next to OUT/jax_layouts.json (benches/reductions_layouts_jax.py)
and OUT/tf_layouts.json (benches/reductions_layouts_tf.py, TensorFlow's XLA), with the ratios the
issue's targets name (ovl / the fastest peer per case; Fortran order / C order for ovl) and the
CPU's vector features. Writes OUT/layouts.md and prints it.

    python benches/reductions_layouts_report.py --out target/reductions-bench
"""

import argparse
import json
from datetime import date
from pathlib import Path

from bench_common import machine, vector_features


def best_of_runs(out, stem):
    """OUT/STEM.json, or every OUT/STEM.N.json of a repeated run with each row's times the
    minimum over the runs (the shared machine's noise only ever adds time); None if absent."""
    paths = sorted(out.glob(f"{stem}.*.json")) or [out / f"{stem}.json"]
    docs = [json.loads(p.read_text()) for p in paths if p.exists()]
    if not docs:
        return None
    best = docs[0]
    for doc in docs[1:]:
        rows = {(r["kernel"], r["case"]): r for r in doc.get("rows", [])}
        for r in best.get("rows", []):
            other = rows.get((r["kernel"], r["case"]), {})
            for key, value in other.items():
                if key.endswith("_ms"):
                    r[key] = min(r[key], value)
    best["runs"] = len(docs)
    return best


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="target/reductions-bench")
    args = parser.parse_args()
    out = Path(args.out)
    ovl = best_of_runs(out, "ovl_layouts")
    jax = best_of_runs(out, "jax_layouts") or {"skipped": "not run"}
    xla = best_of_runs(out, "tf_layouts") or {"skipped": "not run"}
    peers = [
        {(r["kernel"], r["case"]): r for r in doc.get("rows", [])} for doc in (jax, xla)
    ]
    by = {(r["kernel"], r["case"]): r for r in ovl["rows"]}
    lines = [
        f"Machine: {machine()}; vector features: {vector_features()}.",
        f"Date: {date.today().isoformat()}; best of {ovl['repetitions']} calls each"
        + (f", and of {ovl['runs']} runs (alternating ovl and the peers)" if ovl["runs"] > 1
           else "")
        + "; "
        + (f"JAX {jax['jax']} jit on {jax['device']}" if "rows" in jax
           else f"JAX did not run: {jax.get('skipped')}")
        + "; "
        + (f"TensorFlow {xla['tensorflow']} `tf.function(jit_compile=True)` (XLA)." if "rows" in xla
           else f"XLA (TensorFlow) did not run: {xla.get('skipped')}."),
        "",
        "Per call: the user's array made into the input at every call (ovl `Lazy::from(&x)` into a "
        "kernel compiled once; JAX jit and the XLA function called on the NumPy array). Borrowed: "
        "ovl `Compiled::run_views(&[FeedView::from(&x)], ..)` at every call (a C-order array read "
        "in place, a Fortran-order one copied by the tiled copy). Fed once: the input already "
        "made (ovl), on the device (JAX) or a tensor (XLA): the kernel alone. The ratios are "
        "against the faster of the two peers.",
        "",
        "| kernel | case | ovl per call | ovl borrowed | JAX jit per call | XLA per call | "
        "ovl borrowed / fastest peer | ovl fed once | JAX on device | XLA tensor made once | "
        "ovl / fastest peer |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def ratio(a, b):
        return f"{a / b:.2f}x" if b else "-"

    def ms(row, key):
        return f"{row[key]:.2f} ms" if row else "-"

    for r in ovl["rows"]:
        j, x = (p.get((r["kernel"], r["case"])) for p in peers)
        present = [p for p in (j, x) if p]
        best_call = min((p["per_call_ms"] for p in present), default=None)
        best_once = min((p["fed_once_ms"] for p in present), default=None)
        lines.append(
            f"| {r['kernel']} | {r['case_name']} | {r['per_call_ms']:.2f} ms | "
            f"{r['borrowed_ms']:.2f} ms | {ms(j, 'per_call_ms')} | {ms(x, 'per_call_ms')} | "
            f"{ratio(r['borrowed_ms'], best_call) if present else '-'} | "
            f"{r['fed_once_ms']:.2f} ms | {ms(j, 'fed_once_ms')} | {ms(x, 'fed_once_ms')} | "
            f"{ratio(r['fed_once_ms'], best_once) if present else '-'} |"
        )
    lines += ["", "Fortran order / C order (ovl, same kernel, same values):", ""]
    lines += ["| kernel | per call (`Lazy::from(&x)`) | borrowed | fed once | "
              "the input made alone, C / Fortran |", "|---|---|---|---|---|"]
    for k in ["layernorm", "softmax", "rmsnorm", "logsumexp"]:
        f, c = by.get((k, "last_fortran")), by.get((k, "last_c"))
        if f and c:
            lines.append(f"| {k} | {ratio(f['per_call_ms'], c['per_call_ms'])} | "
                         f"{ratio(f['borrowed_ms'], c['borrowed_ms'])} | "
                         f"{ratio(f['fed_once_ms'], c['fed_once_ms'])} | "
                         f"{c.get('input_ms', 0):.2f} / {f.get('input_ms', 0):.2f} ms |")
    text = "\n".join(lines) + "\n"
    (out / "layouts.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()

"""What the Python sides of the benchmarks share (benches/lstm_*.py, benches/reductions_*.py):
the timing loop, TensorFlow's kernel count, and the report's Markdown table and bar chart.

Rows are dicts with at least "variant", "best_us", "median_us", "gb_per_s" and "kernels" (None
when not known), plus the keys that identify the case (size, pass, ...).
"""

import os
import platform
import statistics
import time
from pathlib import Path


def vector_features():
    """The CPU's vector features (from /proc/cpuinfo's flags), for the record."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = line.split(":", 1)[1].split()
                return " ".join(f for f in flags if f.startswith(("sse", "avx", "fma", "amx")))
    except OSError:
        pass
    return "unknown"


def machine():
    """The CPU for the record, as benches/common/mod.rs `machine()` writes it: the model, the
    core's generation where /proc/cpuinfo tells it (a virtual machine may name only "AMD
    EPYC": family 25 is Zen 3 or 4, 26 Zen 5), the cores this process may use and the caches
    per core."""
    fields = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    model = fields.get("model name") or platform.processor() or "unknown CPU"
    core = ""
    try:
        family, number = int(fields["cpu family"]), int(fields["model"])
        if fields.get("vendor_id") == "AuthenticAMD":
            zen4 = 0x10 <= number <= 0x1F or 0x60 <= number <= 0x7F or 0xA0 <= number <= 0xAF
            generation = {23: "Zen 1-2", 25: "Zen 4" if zen4 else "Zen 3", 26: "Zen 5"}
            core = f" ({generation.get(family, 'AMD')}: family {family}, model {number})"
        else:
            core = f" (family {family}, model {number})"
    except (KeyError, ValueError):
        pass
    caches = ""
    for index in range(8):
        base = Path(f"/sys/devices/system/cpu/cpu0/cache/index{index}")
        try:
            level, kind, size = ((base / f).read_text().strip() for f in ("level", "type", "size"))
        except OSError:
            break
        if kind in ("Data", "Unified"):
            caches += f", L{level}{'d' if kind == 'Data' else ''} {size}"
    isa = os.environ.get("OVL_CPU_ISA", "").strip().lower()
    held = f", held to {isa.upper()} (OVL_CPU_ISA={isa})" if isa not in ("", "native") else ""
    return f"{model}{core}, {len(os.sched_getaffinity(0))} cores{caches}{held}"


def timed(fn, args, reps, warmup=3, sync=None):
    """Best and median seconds of `reps` calls of `fn(*args)` after `warmup` untimed ones;
    `sync(result)` waits for an asynchronous result (JAX: block_until_ready) inside the timing."""
    sync = sync or (lambda result: result)
    for _ in range(warmup):
        sync(fn(*args))
    times = []
    for _ in range(max(reps, 1)):
        start = time.perf_counter()
        sync(fn(*args))
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times)


def graph_kernels(fn, args):
    """Compute ops in a tf.function's traced graph (placeholders, identities and constants not
    counted)."""
    graph = fn.get_concrete_function(*args).graph
    skip = {"Placeholder", "Identity", "Const", "NoOp", "IdentityN", "ReadVariableOp"}
    return sum(1 for op in graph.get_operations() if op.type not in skip)


def fmt(us):
    """A time in µs as the tables print it."""
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.0f} µs"


def table(rows, key_columns, reference_gb_per_s, reference):
    """Markdown rows: the case's key columns (a list of (header, row key)), then each variant's
    kernels, times, GB/s, and fraction of the reference bandwidth."""
    headers = [h for h, _ in key_columns]
    lines = [
        "| " + " | ".join(headers) + f" | variant | kernels | best | median | GB/s | of {reference} |",
        "|" + "---|" * (len(headers) + 6),
    ]
    for r in rows:
        kernels = "-" if r["kernels"] is None else str(r["kernels"])
        keys = " | ".join(str(r[k]) for _, k in key_columns)
        lines.append(
            f"| {keys} | {r['variant']} | {kernels} | "
            f"{fmt(r['best_us'])} | {fmt(r['median_us'])} | {r['gb_per_s']:.1f} | "
            f"{100 * r['gb_per_s'] / reference_gb_per_s:.0f}% |"
        )
    return lines


def bar_chart(rows, path, panels, groups, ncols=2, sharey=False, order=None):
    """A grid of bar charts of the best time (log scale), one panel per entry of `panels`
    ((title, predicate on a row)), one group of bars per entry of `groups` ((tick label,
    predicate)), one bar per variant (in `order`, then the others sorted by name), one legend
    below the panels; a missing measurement is a gap."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    present = {r["variant"] for r in rows}
    order = [v for v in (order or []) if v in present]
    variants = order + sorted(present - set(order))
    nrows = (len(panels) + ncols - 1) // ncols
    legend_rows = (len(variants) + 3) // 4
    legend_in = 0.25 * legend_rows + 0.3
    height = 5 * nrows + legend_in
    fig, axes = plt.subplots(nrows, ncols, figsize=(7 * ncols, height), sharey=sharey,
                             squeeze=False)
    width = 0.8 / max(len(variants), 1)
    flat = [ax for row in axes for ax in row]
    for ax, (title, in_panel) in zip(flat, panels):
        for k, v in enumerate(variants):
            times = []
            for _, in_group in groups:
                match = [r for r in rows if r["variant"] == v and in_panel(r) and in_group(r)]
                times.append(match[0]["best_us"] if match else float("nan"))
            xs = [i + (k - len(variants) / 2 + 0.5) * width for i in range(len(groups))]
            ax.bar(xs, times, width, label=v)
        ax.set_yscale("log")
        ax.set_xticks(range(len(groups)))
        ax.set_xticklabels([label for label, _ in groups])
        ax.set_title(title)
        ax.set_ylabel("best time (µs, log scale)")
    for ax in flat[len(panels):]:
        ax.set_visible(False)
    handles, labels = flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(variants), 4), fontsize=9)
    fig.tight_layout(rect=(0, legend_in / height, 1, 1))
    fig.savefig(path, dpi=100)

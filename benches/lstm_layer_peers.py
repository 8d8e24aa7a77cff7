"""A whole LSTM layer, the peers' side (issue 32), and the report.

The layer of benches/lstm_layer.rs: x [T, B, I], per step z = x_t W + h U + b, gates in Keras's
order (i, f, g, o), c = sig(f) c + sig(i) tanh(g), h = sig(o) tanh(c), from h = c = 0; forward
returns every h, forward + backward the gradients of sum(h * g) for x, W, U and b. The inputs
come from the formula both sides share (`inp`). Every result is checked against a NumPy
reference (float64, backpropagation through time written out) before anything is timed:
ovl's outputs (written by the Rust side), TensorFlow's, JAX's and PyTorch's.

    python benches/lstm_layer_peers.py --peer tf  [--quick] [--out DIR]   (TensorFlow's env)
    python benches/lstm_layer_peers.py --peer jax [--quick] [--out DIR]   (.venv-peers)
    python benches/lstm_layer_peers.py --peer torch [--quick] [--out DIR] (.venv-peers)
    python benches/lstm_layer_peers.py --report [--out DIR]               (DIR/lstm_layer.md)
"""

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import machine, timed  # noqa: E402

SIZES = [(35, 20, 650), (35, 20, 1500), (20, 64, 1024)]
TOLERANCE = 2e-3  # max |got - want| / max |want|, per array (f32 through T steps)


def inp(shape, seed, scale):
    """Element k: scale * sin(0.7071 k + seed), in float64, rounded to float32."""
    k = np.arange(int(np.prod(shape)), dtype=np.float64)
    return (scale * np.sin(k * 0.7071 + seed)).astype(np.float32).reshape(shape)


def inputs(t, b, h):
    scale = 1.0 / np.sqrt(h)
    return (
        inp([t, b, h], 0.1, 1.0),
        inp([h, 4 * h], 0.2, scale),
        inp([h, 4 * h], 0.3, scale),
        inp([4 * h], 0.4, 0.1),
        inp([t, b, h], 0.5, 1.0),
    )


def sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def reference(x, w, u, bias, g):
    """Every h [T, B, H] and the gradients (dx, dW, dU, db) of sum(h * g), in float64."""
    x, w, u, bias, g = (a.astype(np.float64) for a in (x, w, u, bias, g))
    t_len, b, _ = x.shape
    hid = u.shape[0]
    h = np.zeros((b, hid))
    c = np.zeros((b, hid))
    hs, tape = [], []
    for t in range(t_len):
        z = x[t] @ w + h @ u + bias
        si, sf = sigmoid(z[:, :hid]), sigmoid(z[:, hid : 2 * hid])
        tg, so = np.tanh(z[:, 2 * hid : 3 * hid]), sigmoid(z[:, 3 * hid :])
        c_prev, h_prev = c, h
        c = sf * c + si * tg
        tc = np.tanh(c)
        h = so * tc
        hs.append(h)
        tape.append((si, sf, tg, so, c_prev, h_prev, tc))
    dx = np.zeros_like(x)
    dw, du, db = np.zeros_like(w), np.zeros_like(u), np.zeros_like(bias)
    dh_next = np.zeros((b, hid))
    dc_next = np.zeros((b, hid))
    for t in reversed(range(t_len)):
        si, sf, tg, so, c_prev, h_prev, tc = tape[t]
        dh = g[t] + dh_next
        dc = dh * so * (1 - tc * tc) + dc_next
        dz = np.concatenate(
            [
                dc * tg * si * (1 - si),
                dc * c_prev * sf * (1 - sf),
                dc * si * (1 - tg * tg),
                dh * tc * so * (1 - so),
            ],
            axis=1,
        )
        dc_next = dc * sf
        dw += x[t].T @ dz
        du += h_prev.T @ dz
        db += dz.sum(axis=0)
        dx[t] = dz @ w.T
        dh_next = dz @ u.T
    return np.stack(hs), (dx, dw, du, db)


class WrongResult(Exception):
    """An implementation's outputs differ from the NumPy reference: a PyTorch variant's are
    reported (and it is not timed), the others' (ovl's included) end the run."""


def check(name, got, want):
    got = np.asarray(got, dtype=np.float64).reshape(want.shape)
    err = np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30)
    if not np.isfinite(err) or err > TOLERANCE:
        raise WrongResult(f"{name}: relative error {err:.2e} against the NumPy reference")
    return err


def check_ovl(out, size, ref_h, ref_grads):
    """ovl's outputs of one run, written by benches/lstm_layer.rs; None when absent."""
    t, b, h = size
    base = os.path.join(out, f"ovl_{t}x{b}x{h}")
    if not os.path.exists(base + "_h.f32"):
        return None
    errs = [check("ovl h", np.fromfile(base + "_h.f32", dtype="<f4"), ref_h)]
    for name, want in zip(["dx", "dw", "du", "db"], ref_grads):
        got = np.fromfile(base + f"_{name}.f32", dtype="<f4")
        errs.append(check(f"ovl {name}", got, want))
    return max(errs)


def run_tf(size, args, ref_h, ref_grads):
    import tensorflow as tf

    t, b, h = size
    x, w, u, bias, g = inputs(t, b, h)
    # Keras reads [batch, time, features]; the data is given in that layout (not timed).
    xb, gb = tf.constant(x.transpose(1, 0, 2)), tf.constant(g.transpose(1, 0, 2))
    rows = []
    for jit in (False, True):
        layer = tf.keras.layers.LSTM(h, return_sequences=True)
        layer.build((b, t, h))
        layer.set_weights([w, u, bias])

        @tf.function(jit_compile=jit)
        def forward(xv):
            return layer(xv)

        @tf.function(jit_compile=jit)
        def forward_backward(xv, gv):
            with tf.GradientTape() as tape:
                tape.watch(xv)
                loss = tf.reduce_sum(layer(xv) * gv)
            return tape.gradient(loss, [xv] + layer.trainable_variables)

        start = time.perf_counter()
        hs = forward(xb).numpy()
        compile_f = time.perf_counter() - start
        start = time.perf_counter()
        grads = [v.numpy() for v in forward_backward(xb, gb)]
        compile_fb = time.perf_counter() - start
        err = check("tf h", hs.transpose(1, 0, 2), ref_h)
        grads[0] = grads[0].transpose(1, 0, 2)
        for name, got, want in zip(["dx", "dw", "du", "db"], grads, ref_grads):
            err = max(err, check(f"tf {name}", got, want))
        f_best, f_med = timed(forward, (xb,), args.reps, warmup=1)
        fb_best, fb_med = timed(forward_backward, (xb, gb), args.reps, warmup=1)
        rows.append(
            {
                "peer": f"TF keras.layers.LSTM{' (jit_compile)' if jit else ''}",
                "forward_ms": f_best * 1e3,
                "forward_median_ms": f_med * 1e3,
                "backward_ms": fb_best * 1e3,
                "backward_median_ms": fb_med * 1e3,
                "first_call_forward_s": compile_f,
                "first_call_backward_s": compile_fb,
                "max_rel_error": err,
            }
        )
    return rows


def jax_layer(precision=None):
    """The layer in JAX, lax.scan over the steps, and the loss sum(h * g) on it: (layer, loss).
    `precision`: the products' (jax.lax.Precision or its name; None: JAX's default)."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    def layer(xv, wv, uv, bv):
        def step(carry, xt):
            hv, cv = carry
            z = jnp.matmul(xt, wv, precision=precision) + jnp.matmul(hv, uv, precision=precision)
            i, f, gg, o = jnp.split(z + bv, 4, axis=1)
            cv = jax.nn.sigmoid(f) * cv + jax.nn.sigmoid(i) * jnp.tanh(gg)
            hv = jax.nn.sigmoid(o) * jnp.tanh(cv)
            return (hv, cv), hv

        zeros = jnp.zeros((xv.shape[1], uv.shape[0]), xv.dtype)
        return lax.scan(step, (zeros, zeros), xv)[1]

    def loss(xv, wv, uv, bv, gv):
        return jnp.sum(layer(xv, wv, uv, bv) * gv)

    return layer, loss


def run_jax(size, args, ref_h, ref_grads):
    import jax
    import jax.numpy as jnp

    t, b, h = size
    x, w, u, bias, g = inputs(t, b, h)
    layer, loss = jax_layer()

    data = [jnp.asarray(a) for a in (x, w, u, bias, g)]
    start = time.perf_counter()
    forward = jax.jit(layer).lower(*data[:4]).compile()
    compile_f = time.perf_counter() - start
    start = time.perf_counter()
    forward_backward = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3))).lower(*data).compile()
    compile_fb = time.perf_counter() - start
    err = check("jax h", np.asarray(forward(*data[:4])), ref_h)
    for name, got, want in zip(["dx", "dw", "du", "db"], forward_backward(*data), ref_grads):
        err = max(err, check(f"jax {name}", np.asarray(got), want))
    ready = jax.block_until_ready
    f_best, f_med = timed(forward, data[:4], args.reps, warmup=1, sync=ready)
    fb_best, fb_med = timed(forward_backward, data, args.reps, warmup=1, sync=ready)
    return [
        {
            "peer": "JAX lax.scan under jit",
            "forward_ms": f_best * 1e3,
            "forward_median_ms": f_med * 1e3,
            "backward_ms": fb_best * 1e3,
            "backward_median_ms": fb_med * 1e3,
            "first_call_forward_s": compile_f,
            "first_call_backward_s": compile_fb,
            "max_rel_error": err,
        }
    ]


def run_torch(size, args, ref_h, ref_grads):
    """PyTorch nn.LSTM (its weights set to W, U, b) and torch.compile (inductor) of the layer
    written as a loop of the cell over the steps."""
    import torch

    t, b, h = size
    x, w, u, bias, g = inputs(t, b, h)
    gt = torch.from_numpy(g)

    def cell_scan(xv, wv, uv, bv):
        hv = xv.new_zeros((xv.shape[1], uv.shape[0]))
        cv = hv
        hs = []
        for xt in xv.unbind(0):
            z = xt @ wv + hv @ uv + bv
            i, f, gg, o = z.chunk(4, dim=1)
            cv = torch.sigmoid(f) * cv + torch.sigmoid(i) * torch.tanh(gg)
            hv = torch.sigmoid(o) * torch.tanh(cv)
            hs.append(hv)
        return torch.stack(hs)

    lstm = torch.nn.LSTM(h, h)  # gates in the order i, f, g, o, as here
    with torch.no_grad():
        lstm.weight_ih_l0.copy_(torch.from_numpy(w).T)
        lstm.weight_hh_l0.copy_(torch.from_numpy(u).T)
        lstm.bias_ih_l0.copy_(torch.from_numpy(bias))
        lstm.bias_hh_l0.zero_()
    params = {
        "w": torch.from_numpy(w).requires_grad_(),
        "u": torch.from_numpy(u).requires_grad_(),
        "b": torch.from_numpy(bias).requires_grad_(),
    }
    compiled = torch.compile(cell_scan)
    # On this shared 2-core machine PyTorch's OpenMP pool ran a [20, 650] x [650, 2600] product
    # 2-13x slower with 2 threads than with 1 (its threads wait on each other while other
    # processes hold a core): the layer runs with the thread count whose nn.LSTM forward is
    # faster here, measured now, and the rows say which.
    xt = torch.from_numpy(x)
    speed = {}
    for threads in (1, 2):
        torch.set_num_threads(threads)
        with torch.no_grad():
            lstm(xt)
            speed[threads], _ = timed(lambda: lstm(xt), (), 2, warmup=0)
    threads = min(speed, key=speed.get)
    torch.set_num_threads(threads)
    variants = {
        "PyTorch nn.LSTM": (
            lambda xv: lstm(xv)[0],
            lambda: [lstm.weight_ih_l0, lstm.weight_hh_l0, lstm.bias_ih_l0],
            lambda grads: [grads[0], grads[1].T, grads[2].T, grads[3]],
        ),
        "PyTorch torch.compile of the cell's loop": (
            lambda xv: compiled(xv, params["w"], params["u"], params["b"]),
            lambda: [params["w"], params["u"], params["b"]],
            lambda grads: grads,
        ),
    }
    rows = []
    for name, (run, weights, as_ours) in variants.items():

        def forward(xv):
            with torch.no_grad():
                return run(xv)

        def forward_backward(xv):
            xv = xv.detach().requires_grad_()
            loss = (run(xv) * gt).sum()
            return torch.autograd.grad(loss, [xv] + weights())

        start = time.perf_counter()
        hs = forward(xt).numpy()
        compile_f = time.perf_counter() - start
        start = time.perf_counter()
        grads = as_ours([v.detach().numpy() for v in forward_backward(xt)])
        compile_fb = time.perf_counter() - start
        try:
            err = check(f"{name} h", hs, ref_h)
            for gname, got, want in zip(["dx", "dw", "du", "db"], grads, ref_grads):
                err = max(err, check(f"{name} {gname}", got, want))
        except WrongResult as wrong:
            # (torch.compile's code held to AVX2 by ATEN_CPU_CAPABILITY gave NaN, 2026-12-07.)
            print(f"{wrong}: not timed")
            rows.append({"peer": name, "wrong": str(wrong)})
            continue
        f_best, f_med = timed(forward, (xt,), args.reps, warmup=1)
        fb_best, fb_med = timed(forward_backward, (xt,), args.reps, warmup=1)
        rows.append(
            {
                "peer": name,
                "threads": threads,
                "forward_ms": f_best * 1e3,
                "forward_median_ms": f_med * 1e3,
                "backward_ms": fb_best * 1e3,
                "backward_median_ms": fb_med * 1e3,
                "first_call_forward_s": compile_f,
                "first_call_backward_s": compile_fb,
                "max_rel_error": err,
            }
        )
    return rows


def report(out):
    def load(name):
        path = os.path.join(out, name)
        if not os.path.exists(path):
            return None
        with open(path) as f:
            return json.load(f)

    ovl = load("ovl.json")
    peers = [p for p in (load("tf.json"), load("jax.json"), load("torch.json")) if p]
    if ovl is None:
        raise SystemExit(f"{out}/ovl.json is missing: run the Rust side first")
    names = []
    for p in peers:
        for row in p["sizes"][0]["rows"] if p["sizes"] else []:
            names.append(row["peer"])
    header = "| T, B, H=I | ovl fwd / f+b (ms) | " + " | ".join(
        f"{n} fwd / f+b (ms)" for n in names
    ) + " | ovl / fastest peer, fwd / f+b | ovl compile fwd / f+b, cold (warm) (s) |"
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    for s in ovl["sizes"]:
        key = (s["t"], s["b"], s["h"])
        cells = [
            f"{key[0]}, {key[1]}, {key[2]}",
            f"{s['forward_ms']:.1f} / {s['backward_ms']:.1f}",
        ]
        best_f = best_b = None
        for p in peers:
            match = [r for r in p["sizes"] if (r["t"], r["b"], r["h"]) == key]
            for row in match[0]["rows"] if match else []:
                if "wrong" in row:
                    cells.append("wrong result")
                    continue
                cells.append(f"{row['forward_ms']:.1f} / {row['backward_ms']:.1f}")
                best_f = min(best_f or row["forward_ms"], row["forward_ms"])
                best_b = min(best_b or row["backward_ms"], row["backward_ms"])
        while len(cells) < 2 + len(names):
            cells.append("did not run")
        ratio = (
            f"{s['forward_ms'] / best_f:.2f}x / {s['backward_ms'] / best_b:.2f}x"
            if best_f
            else "no peer ran"
        )
        cells.append(ratio)
        cells.append(
            f"{s['compile_forward_cold_s']:.1f} ({s['compile_forward_warm_s']:.1f}) / "
            f"{s['compile_backward_cold_s']:.1f} ({s['compile_backward_warm_s']:.1f})"
        )
        lines.append("| " + " | ".join(cells) + " |")
    compile_lines = []
    for p in peers:
        for s in p["sizes"]:
            for row in s["rows"]:
                if "wrong" in row:
                    compile_lines.append(
                        f"- {row['peer']} at {s['t']}, {s['b']}, {s['h']}: {row['wrong']}: "
                        "not timed"
                    )
                    continue
                compile_lines.append(
                    f"- {row['peer']} at {s['t']}, {s['b']}, {s['h']}: first call (tracing and "
                    f"compiling) {row['first_call_forward_s']:.2f} s forward, "
                    f"{row['first_call_backward_s']:.2f} s forward + backward; max relative error "
                    f"against NumPy {row['max_rel_error']:.1e}"
                    + (f"; {row['threads']} thread(s)" if "threads" in row else "")
                )
    checked = [s for s in ovl["sizes"] if s.get("checked") is not None]
    text = (
        f"Machine: {ovl['machine']}. Best of {ovl['reps']} runs of each. ovl at opt_level "
        f"{ovl.get('opt_level', 1)}, compiled once (`ovl::compile`).\n\n"
        + "\n".join(lines)
        + "\n\n"
        + "\n".join(compile_lines)
        + ("\n" if compile_lines else "")
        + (
            f"- ovl's outputs checked against NumPy at {len(checked)} size(s), max relative "
            f"error {max(s['checked'] for s in checked):.1e}\n"
            if checked
            else ""
        )
    )
    path = os.path.join(out, "lstm_layer.md")
    with open(path, "w") as f:
        f.write(text)
    print(text)
    print(f"wrote {path}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--peer", choices=["tf", "jax", "torch"])
    parser.add_argument("--report", action="store_true")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default="target/lstm-layer-bench")
    args = parser.parse_args()
    if args.report:
        report(args.out)
        return
    if not args.peer:
        parser.error("--peer or --report")
    args.reps = 3 if args.quick else 7
    sizes = SIZES[:1] if args.quick else SIZES
    results = {"machine": machine(), "sizes": []}
    for size in sizes:
        ref_h, ref_grads = reference(*inputs(*size))
        if args.peer == "tf":
            # ovl's outputs first (TensorFlow's environment runs first in the script).
            err = check_ovl(args.out, size, ref_h, ref_grads)
            print(f"{size}: ovl against NumPy: " + ("absent" if err is None else f"{err:.1e}"))
            ovl_path = os.path.join(args.out, "ovl.json")
            if err is not None and os.path.exists(ovl_path):
                with open(ovl_path) as f:
                    ovl = json.load(f)
                for s in ovl["sizes"]:
                    if (s["t"], s["b"], s["h"]) == size:
                        s["checked"] = err
                with open(ovl_path, "w") as f:
                    json.dump(ovl, f, indent=2)
        run = {"tf": run_tf, "jax": run_jax, "torch": run_torch}[args.peer]
        rows = run(size, args, ref_h, ref_grads)
        for row in (r for r in rows if "wrong" not in r):
            print(
                f"{size}: {row['peer']}: forward {row['forward_ms']:.2f} ms, forward + backward "
                f"{row['backward_ms']:.2f} ms (first calls {row['first_call_forward_s']:.2f} s, "
                f"{row['first_call_backward_s']:.2f} s)"
            )
        t, b, h = size
        results["sizes"].append({"t": t, "b": b, "h": h, "rows": rows})
    with open(os.path.join(args.out, f"{args.peer}.json"), "w") as f:
        json.dump(results, f, indent=2)


if __name__ == "__main__":
    try:
        main()
    except WrongResult as wrong:
        # ovl's outputs, or a peer other than PyTorch's: the run ends, with the message.
        raise SystemExit(str(wrong))

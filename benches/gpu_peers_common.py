"""What the GPU peers of the benchmarks share (benches/lstm_gpu_peers.py and
benches/reductions_gpu_peers.py): loading PyTorch and JAX with a GPU, timing a call, and the
device-to-device copy bandwidth the results are compared with.

Two timings per call, both on inputs already on the GPU:
- wall: the host's clock around the call and a synchronization after it (PyTorch:
  torch.cuda.synchronize, JAX: block_until_ready), what a user's loop waits for; ovl's
  "call on device tensors" rows measure the same way (benches/common/mod.rs, device_calls);
- GPU (PyTorch only): CUDA events recorded before and after the call on its stream, the time
  the GPU spends from its first launch to its last, gaps between launches included.
"""

import statistics
import time


def load_torch():
    """(torch, None) with a CUDA GPU, else (None, why)."""
    try:
        import torch
    except ImportError as e:
        return None, f"PyTorch is not installed here ({e})"
    if not torch.cuda.is_available():
        return None, f"PyTorch {torch.__version__} sees no CUDA GPU"
    return torch, None


def load_jax():
    """(jax, None) when JAX's default backend is a GPU, else (None, why)."""
    try:
        import jax
    except ImportError as e:
        return None, f"JAX is not installed here ({e})"
    try:
        backend = jax.default_backend()
    except Exception as e:  # a broken plugin: say so, measure the rest
        return None, f"JAX {jax.__version__} has no usable backend ({e})"
    if backend != "gpu":
        return None, f"JAX {jax.__version__}'s default backend is {backend}, not a GPU"
    return jax, None


def start(reps=None):
    """Loads the peers, says which did not run and why, and measures the copy bandwidth (with
    PyTorch): (torch or None, jax or None, the JSON document's head with an empty "rows")."""
    torch, torch_why = load_torch()
    jax, jax_why = load_jax()
    skipped = {k: v for k, v in (("pytorch", torch_why), ("jax", jax_why)) if v}
    for peer, why in skipped.items():
        print(f"{peer.upper()} GPU PART DID NOT RUN: {why}")
    doc = {"skipped_peers": skipped, "rows": []}
    if reps is not None:
        doc["repetitions"] = reps
    if torch is not None:
        doc["torch"] = torch.__version__
        doc["device"] = torch.cuda.get_device_name(0)
        doc["copy_gb_per_s"] = copy_bandwidth(torch) / 1e9
        print(f"PyTorch {torch.__version__} on {doc['device']}: device-to-device copy "
              f"{doc['copy_gb_per_s']:.0f} GB/s")
    if jax is not None:
        doc["jax"] = jax.__version__
        doc.setdefault("device", str(jax.devices()[0]))
    return torch, jax, doc


def best_and_median(times):
    return min(times), statistics.median(times)


def time_torch(torch, fn, args, reps):
    """{"gpu": (best, median), "wall": (best, median)} in seconds, after 3 warm-up calls
    (compilation, autotuning, the caching allocator)."""
    for _ in range(3):
        fn(*args)
    gpu = event_times(torch, lambda: fn(*args), reps)
    wall = []
    for _ in range(reps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn(*args)
        torch.cuda.synchronize()
        wall.append(time.perf_counter() - start)
    return {"gpu": best_and_median(gpu), "wall": best_and_median(wall)}


def time_jax(jax, fn, args, reps):
    """{"wall": (best, median)} in seconds of a compiled JAX function (`jax.jit(f).lower(..)
    .compile()`: no tracing or compilation is timed), after 3 warm-up calls."""
    for _ in range(3):
        jax.block_until_ready(fn(*args))
    wall = []
    for _ in range(reps):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        wall.append(time.perf_counter() - start)
    return {"wall": best_and_median(wall)}


def event_times(torch, call, reps):
    """Seconds each of `reps` calls of `call` takes on the GPU, from CUDA events around it."""
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return times


def copy_bandwidth(torch):
    """Bytes per second of a 256 MiB device-to-device copy, each byte counted read and written."""
    n = 256 << 20
    src = torch.empty(n, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)  # warm-up
    return 2 * n / min(event_times(torch, lambda: dst.copy_(src), 20))


def row(variant, timings, nbytes, **case):
    """One JSON row: `best_us`/`median_us` are the GPU time where measured (PyTorch), else the
    wall time (JAX); `wall_best_us`/`wall_median_us` always the wall time."""
    main = timings.get("gpu") or timings["wall"]
    return {
        "variant": variant, **case,
        "best_us": main[0] * 1e6, "median_us": main[1] * 1e6,
        "wall_best_us": timings["wall"][0] * 1e6, "wall_median_us": timings["wall"][1] * 1e6,
        "timing": "CUDA events" if "gpu" in timings else "wall",
        "gb_per_s": nbytes / main[0] / 1e9,
    }


def describe(variant, timings, nbytes):
    """One printed line's timing part."""
    wall = timings["wall"]
    text = f"wall best {wall[0] * 1e6:9.1f} us  median {wall[1] * 1e6:9.1f} us"
    if "gpu" in timings:
        gpu = timings["gpu"]
        text = (f"GPU best {gpu[0] * 1e6:9.1f} us  median {gpu[1] * 1e6:9.1f} us  "
                f"({nbytes / gpu[0] / 1e9:7.1f} GB/s)  " + text)
    return f"{variant:<24} {text}"

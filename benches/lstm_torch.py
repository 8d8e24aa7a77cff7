"""The LSTM-cell benchmark, PyTorch side (GPU only): the cell's nonlinearity forward and
forward + backward in PyTorch eager and under torch.compile, on device tensors, timed with CUDA
events around each whole call, plus a device-to-device copy bandwidth measured in the same run.
Writes OUT/torch.json for benches/lstm_report.py.

    python benches/lstm_torch.py --out target/lstm-bench [--quick]

Without PyTorch, or without a GPU it can use, it writes why into OUT/torch.json and exits 0, so
that the benchmark's one command runs everywhere (the report then says this part did not run).
"""

import argparse
import json
import statistics
from pathlib import Path

FORGET_BIAS = 1.0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="target/lstm-bench")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        import torch
    except ImportError as e:
        return skip(out, f"PyTorch is not installed here ({e})")
    if not torch.cuda.is_available():
        return skip(out, f"PyTorch {torch.__version__} sees no CUDA GPU")

    sizes = [(20, 200), (20, 650), (1024, 4096)] if args.quick else [
        (20, 200), (20, 650), (20, 1500), (1024, 4096)]
    reps = 5 if args.quick else 20
    copy = copy_bandwidth(torch)
    print(f"PyTorch {torch.__version__} on {torch.cuda.get_device_name(0)}: "
          f"device-to-device copy {copy / 1e9:.0f} GB/s")
    rows = []
    for b, h in sizes:
        for backward in (False, True):
            rows += measure_size(torch, b, h, backward, reps)
    doc = {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0),
        "copy_gb_per_s": copy / 1e9,
        "timing": "CUDA events around each whole call on device tensors",
        "rows": rows,
    }
    (out / "torch.json").write_text(json.dumps(doc, indent=2))
    print(f"wrote {out / 'torch.json'}")


def skip(out, why):
    print(f"PYTORCH GPU PART DID NOT RUN: {why}")
    (out / "torch.json").write_text(json.dumps({"skipped": why}, indent=2))


def cell(torch, z, c):
    i, j, f, o = torch.chunk(z, 4, dim=1)
    new_c = c * torch.sigmoid(f + FORGET_BIAS) + torch.sigmoid(i) * torch.tanh(j)
    new_h = torch.tanh(new_c) * torch.sigmoid(o)
    return new_c, new_h


def make_step(torch, backward):
    def forward(z, c, dc, dh):
        return cell(torch, z, c)

    def forward_backward(z, c, dc, dh):
        z = z.detach().requires_grad_(True)
        c = c.detach().requires_grad_(True)
        new_c, new_h = cell(torch, z, c)
        dz, dcp = torch.autograd.grad((new_c, new_h), (z, c), (dc, dh))
        return new_c.detach(), new_h.detach(), dz, dcp

    return forward_backward if backward else forward


def measure_size(torch, b, h, backward, reps):
    gen = torch.Generator(device="cuda").manual_seed(0)
    args = [torch.rand(shape, device="cuda", generator=gen) * 4 - 2
            for shape in ((b, 4 * h), (b, h), (b, h), (b, h))]
    pass_name = "forward+backward" if backward else "forward"
    nbytes = b * h * (56 if backward else 28)
    step = make_step(torch, backward)
    variants = [("pytorch eager", step)]
    try:
        variants.append(("pytorch torch.compile", torch.compile(step)))
    except Exception as e:  # torch.compile missing or refused: say so, measure the rest
        print(f"torch.compile unavailable: {e}")
    rows = []
    for name, fn in variants:
        try:
            best, median = time_gpu(torch, fn, args, reps)
        except Exception as e:
            print(f"B={b} H={h} {pass_name} {name}: FAILED ({type(e).__name__}: {e})")
            continue
        gbps = nbytes / best / 1e9
        print(f"B={b:<5} H={h:<5} {pass_name:<17} {name:<24} best {best * 1e6:10.1f} us  "
              f"median {median * 1e6:10.1f} us  {gbps:7.1f} GB/s")
        rows.append({
            "variant": name, "batch": b, "hidden": h, "pass": pass_name, "kernels": None,
            "best_us": best * 1e6, "median_us": median * 1e6, "gb_per_s": gbps,
        })
    return rows


def time_gpu(torch, fn, args, reps):
    for _ in range(3):  # warm-up: compilation, autotuning, allocator
        fn(*args)
    times = event_times(torch, lambda: fn(*args), reps)
    return min(times), statistics.median(times)


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

if __name__ == "__main__":
    main()

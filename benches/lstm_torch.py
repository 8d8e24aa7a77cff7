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
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from torch_common import copy_bandwidth, time_gpu  # noqa: E402

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


if __name__ == "__main__":
    main()

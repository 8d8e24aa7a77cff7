"""What the PyTorch sides of the GPU benchmarks share (benches/lstm_torch.py and
benches/reductions_torch.py): timing a call on the GPU with CUDA events, and the
device-to-device copy bandwidth they are compared with."""

import statistics


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

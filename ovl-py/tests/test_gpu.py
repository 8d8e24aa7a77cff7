"""The package on a GPU: `ovl.torch.op` and `program(..)` on CUDA tensors (torch's current
stream, a non-default one included, a captured CUDA graph replayed with new inputs, a CPU and a
CUDA input together, a second GPU), `ovl.jax.op` and `program(..)` on GPU `jax.Array`s (XLA's
stream), a torch tensor handed to a JAX program through ovl; values and gradients against the
frameworks' own ops (the LSTM cell, layer norm).

Without a GPU every test prints that it did not run (and passes): these run in the GPU check
(`scripts/gpu-check.sh`), where PyTorch and JAX have CUDA."""

import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed: ovl's GPU tests untested")

import ovl  # noqa: E402
import ovl.torch  # noqa: E402


def did_not_run(test: str, why: str) -> None:
    print(f"{test}: did not run: {why}", flush=True)


def cuda(test: str) -> bool:
    """Whether torch has a CUDA GPU; prints that `test` did not run when not."""
    if torch.cuda.is_available():
        return True
    did_not_run(test, "no CUDA GPU for PyTorch")
    return False


@pytest.fixture(scope="module")
def op(bundle):
    return lambda name: ovl.torch.op(bundle(name))


def layernorm(x, eps=1e-5):
    return torch.nn.functional.layer_norm(x, x.shape[-1:], eps=eps)


def torch_lstm_cell(z, c):
    i, j, f, o = torch.chunk(z, 4, dim=1)
    new_c = c * torch.sigmoid(f + 1.0) + torch.sigmoid(i) * torch.tanh(j)
    return new_c, torch.tanh(new_c) * torch.sigmoid(o)


def test_torch_op_values_and_gradients_on_cuda(op):
    if not cuda("test_torch_op_values_and_gradients_on_cuda"):
        return
    dev = "cuda"
    torch.manual_seed(3)
    # Layer norm: values and the gradient program's gradients against torch's own.
    f = op("layernorm_grad")
    x = torch.randn(6, 33, device=dev, requires_grad=True)
    xr = x.detach().clone().requires_grad_()
    w = torch.randn(6, 33, device=dev)
    y = f(x)
    assert y.device == x.device and y.dtype == torch.float32
    torch.testing.assert_close(y, layernorm(xr), rtol=1e-4, atol=1e-5)
    (y * w).sum().backward()
    (layernorm(xr) * w).sum().backward()
    torch.testing.assert_close(x.grad, xr.grad, rtol=1e-4, atol=1e-5)
    # The LSTM cell: two outputs, gradients of both.
    g = op("lstm_cell")
    z = torch.randn(4, 32, device=dev, requires_grad=True)
    c = torch.randn(4, 8, device=dev, requires_grad=True)
    zr, cr = z.detach().clone().requires_grad_(), c.detach().clone().requires_grad_()
    got, want = g(z, c), torch_lstm_cell(zr, cr)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    v = torch.randn(4, 8, device=dev)
    ((got[0] * v).sum() + got[1].sum()).backward()
    ((want[0] * v).sum() + want[1].sum()).backward()
    torch.testing.assert_close(z.grad, zr.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(c.grad, cr.grad, rtol=1e-5, atol=1e-6)
    # Any batch of a polymorphic program.
    s = op("scale_rows_any_batch")
    for batch in (1, 7, 300):
        xs, ss = torch.randn(batch, 5, device=dev), torch.randn(batch, device=dev)
        y, sums = s(xs, ss)
        torch.testing.assert_close(y, xs * ss[:, None])
        torch.testing.assert_close(sums, (xs * ss[:, None]).sum(dim=1))


def test_torch_op_runs_on_the_current_stream(op):
    # A stream held up by a sleeping kernel, then the input written on it: a run on any other
    # stream would read the input before it is written.
    if not cuda("test_torch_op_runs_on_the_current_stream"):
        return
    f = op("scale_add")
    src_x, src_b = torch.randn(4, 5, device="cuda"), torch.randn(4, 5, device="cuda")
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        x, b = torch.zeros(4, 5, device="cuda"), torch.zeros(4, 5, device="cuda")
        torch.cuda._sleep(200_000_000)  # about 0.1 s of GPU time on this stream
        x.copy_(src_x)
        b.copy_(src_b)
        y = f(x, b)
        total = y.sum()
    side.synchronize()
    torch.testing.assert_close(y, 2 * src_x + src_b)
    torch.testing.assert_close(total, (2 * src_x + src_b).sum())


def test_torch_op_in_a_captured_cuda_graph(op):
    if not cuda("test_torch_op_in_a_captured_cuda_graph"):
        return
    f, g = op("scale_add"), op("lstm_cell")
    x, b = torch.randn(4, 5, device="cuda"), torch.randn(4, 5, device="cuda")
    z, c = torch.randn(4, 32, device="cuda"), torch.randn(4, 8, device="cuda")
    # Warm-up on a side stream (what torch.cuda.graph asks for): the programs' first calls on
    # the device upload their constants there, which a capture may not.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        f(x, b)
        g(z, c)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = f(x, b)
        new_c, new_h = g(z, c)
    for seed in range(3):
        torch.manual_seed(seed)
        x.copy_(torch.randn(4, 5, device="cuda"))
        b.copy_(torch.randn(4, 5, device="cuda"))
        z.copy_(torch.randn(4, 32, device="cuda"))
        c.copy_(torch.randn(4, 8, device="cuda"))
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(y, 2 * x + b)
        torch.testing.assert_close((new_c, new_h), torch_lstm_cell(z, c), rtol=1e-5, atol=1e-6)


def test_first_call_under_capture_says_to_warm_up(bundle_dir):
    # A program never run on the GPU (loaded afresh) called first while torch captures: the
    # runtime's error, before anything is queued; after a warm-up the capture works.
    if not cuda("test_first_call_under_capture_says_to_warm_up"):
        return
    f = ovl.load(bundle_dir / "scale_add.json")
    x, b = torch.randn(4, 5, device="cuda"), torch.randn(4, 5, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="captur"):
        with torch.cuda.graph(graph):
            f(x, b)
    torch.cuda.synchronize()
    torch.testing.assert_close(f(x, b), 2 * x + b)


def test_program_call_on_cuda_tensors_returns_cuda_tensors(bundle):
    if not cuda("test_program_call_on_cuda_tensors_returns_cuda_tensors"):
        return
    f = bundle("lstm_cell")
    z, c = torch.randn(4, 32, device="cuda"), torch.randn(4, 8, device="cuda")
    new_c, new_h = f(z, c)
    assert new_c.is_cuda and new_h.device == z.device
    torch.testing.assert_close((new_c, new_h), torch_lstm_cell(z, c), rtol=1e-5, atol=1e-6)


def test_cpu_and_cuda_inputs_together(op, bundle):
    if not cuda("test_cpu_and_cuda_inputs_together"):
        return
    x, b = torch.randn(4, 5), torch.randn(4, 5, device="cuda")
    for f in (op("scale_add"), bundle("scale_add")):
        with pytest.raises(ValueError, match=r"input 1 \(`b`\) is on device `cuda:0`, input 0 "
                           r"on `cpu`"):
            f(x, b)
        with pytest.raises(ValueError, match=r"input 1 \(`b`\) is on device `cpu`"):
            f(b, x)
        torch.testing.assert_close(f(x, x), 3 * x)


def test_torch_compile_on_cuda(op):
    if not cuda("test_torch_compile_on_cuda"):
        return
    f = op("layernorm_grad")
    step = torch.compile(lambda x: torch.relu(f(x * 1.5)), fullgraph=True)
    x = torch.randn(6, 33, device="cuda")
    torch.testing.assert_close(step(x), torch.relu(layernorm(x * 1.5)), rtol=1e-4, atol=1e-5)


def test_second_gpu(op):
    if not cuda("test_second_gpu"):
        return
    if torch.cuda.device_count() < 2:
        did_not_run("test_second_gpu", "one GPU only")
        return
    f = op("lstm_cell")
    with torch.cuda.device(0):  # the current device stays 0: the inputs decide
        z = torch.randn(4, 32, device="cuda:1", requires_grad=True)
        c = torch.randn(4, 8, device="cuda:1")
        new_c, new_h = f(z, c)
        assert new_h.device == z.device
        torch.testing.assert_close((new_c, new_h), torch_lstm_cell(z, c), rtol=1e-5, atol=1e-6)
        new_h.sum().backward()
        assert z.grad.device == z.device
        with pytest.raises(ValueError, match=r"input 1 \(`c`\) is on device `cuda:0`"):
            f(z, c.to("cuda:0"))


# --- JAX on the GPU, in a fresh process (this one may have set JAX to the CPU) -------------

JAX_GPU = textwrap.dedent(
    """
    import sys
    import numpy as np
    import jax, jax.numpy as jnp
    import ovl, ovl.jax

    if not any(d.platform == "gpu" for d in jax.devices()):
        print("jax on the GPU: did not run: JAX has no GPU here")
        sys.exit(0)
    bundles = sys.argv[1]
    gpu = [d for d in jax.devices() if d.platform == "gpu"][0]

    def jax_lstm_cell(z, c):
        i, j, f, o = jnp.split(z, 4, axis=1)
        new_c = c * jax.nn.sigmoid(f + 1.0) + jax.nn.sigmoid(i) * jnp.tanh(j)
        return new_c, jnp.tanh(new_c) * jax.nn.sigmoid(o)

    def close(a, b, tol=1e-5):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)

    program = ovl.load(f"{bundles}/lstm_cell.json")
    cell = ovl.jax.op(program)
    key = jax.random.PRNGKey(0)
    z = jax.device_put(jax.random.normal(key, (4, 32)), gpu)
    c = jax.device_put(jax.random.normal(jax.random.PRNGKey(1), (4, 8)), gpu)
    got = jax.jit(cell)(z, c)
    assert got[0].devices() == {gpu}, got[0].devices()
    close(got, jax_lstm_cell(z, c))
    loss = lambda f: (lambda z, c: (f(z, c)[0] * 2.0).sum() + f(z, c)[1].sum())
    close(jax.grad(loss(cell), (0, 1))(z, c), jax.grad(loss(jax_lstm_cell), (0, 1))(z, c))
    # program(..) on GPU jax.Arrays: JAX out, on the GPU.
    out = program(z, c)
    assert isinstance(out[0], jax.Array) and out[0].devices() == {gpu}
    close(out, jax_lstm_cell(z, c))
    # Layer norm, forward and gradient, against jax.
    ln = ovl.jax.op(ovl.load(f"{bundles}/layernorm_grad.json"))
    x = jax.device_put(jax.random.normal(key, (6, 33)), gpu)
    def jax_ln(x):
        m = x.mean(-1, keepdims=True)
        return (x - m) / jnp.sqrt(((x - m) ** 2).mean(-1, keepdims=True) + 1e-5)
    w = jax.random.normal(jax.random.PRNGKey(2), (6, 33))
    close(jax.jit(ln)(x), jax_ln(x), 1e-4)
    close(jax.grad(lambda x: (ln(x) * w).sum())(x), jax.grad(lambda x: (jax_ln(x) * w).sum())(x), 1e-4)
    # A CPU and a GPU array together: a ValueError naming the input.
    try:
        cell(z, jax.device_put(c, jax.devices("cpu")[0]))
    except ValueError as e:
        assert "input 1 (`c`)" in str(e), e
    else:
        raise AssertionError("a CPU and a GPU input were not refused")
    # A torch CUDA tensor handed to the JAX program through DLPack, the result back to torch.
    try:
        import torch
    except ImportError:
        print("torch to jax: did not run: no PyTorch")
    else:
        if torch.cuda.is_available():
            zt = torch.randn(4, 32, device="cuda")
            ct = torch.randn(4, 8, device="cuda")
            torch.cuda.synchronize()
            nc, nh = jax.jit(cell)(jnp.from_dlpack(zt), jnp.from_dlpack(ct))
            nh_t = torch.from_dlpack(nh)
            i, j, f, o = torch.chunk(zt, 4, dim=1)
            want_c = ct * torch.sigmoid(f + 1.0) + torch.sigmoid(i) * torch.tanh(j)
            torch.testing.assert_close(nh_t, torch.tanh(want_c) * torch.sigmoid(o), rtol=1e-5, atol=1e-6)
        else:
            print("torch to jax: did not run: PyTorch has no GPU")
    print("jax on the GPU: ran")
    """
)


def test_jax_op_on_the_gpu(bundle_dir, tmp_path):
    env = dict(os.environ)
    env.pop("JAX_PLATFORMS", None)
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    script = tmp_path / "jax_gpu.py"
    script.write_text(JAX_GPU)
    done = subprocess.run(
        [sys.executable, str(script), str(bundle_dir)], env=env, capture_output=True, text=True,
        timeout=600,
    )
    print(done.stdout, flush=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    assert "jax on the GPU: ran" in done.stdout or "did not run" in done.stdout

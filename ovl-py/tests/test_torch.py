"""`ovl.torch.op`: programs as PyTorch custom operators, checked against the same computations
written in torch ops: eager values, autograd from the bundles' gradient programs,
`torch.library.opcheck`, `torch.compile` (fullgraph, and dynamic without recompiling per batch),
and errors naming the input."""

import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed: ovl.torch untested")

import ovl  # noqa: E402
import ovl.torch  # noqa: E402

torch.manual_seed(11)


@pytest.fixture(scope="module")
def op(bundle):
    """`op("scale_add")`: the torch op of that bundle's program."""
    return lambda name: ovl.torch.op(bundle(name))


def layernorm(x, eps=1e-5):
    return torch.nn.functional.layer_norm(x, x.shape[-1:], eps=eps)


# --- eager values ------------------------------------------------------------------------


def test_eager_values_every_dtype(op):
    x, b = torch.randn(4, 5), torch.randn(4, 5)
    y = op("scale_add")(x, b)
    assert type(y) is torch.Tensor and y.dtype == torch.float32 and y.shape == (4, 5)
    torch.testing.assert_close(y, 2 * x + b)

    a, b = torch.randn(7), torch.randn(7)
    lo, hi = op("min_max")(a, b)
    torch.testing.assert_close(lo, torch.minimum(a, b))
    torch.testing.assert_close(hi, torch.maximum(a, b))

    x = torch.randn(9, dtype=torch.float64)
    torch.testing.assert_close(op("affine_f64")(x), x * 0.5 - 3.0)

    i = torch.randint(-1000, 1000, (9,), dtype=torch.int32)
    j = torch.randint(-1000, 1000, (9,), dtype=torch.int32)
    k = op("mul_add_i32")(i, j)
    assert k.dtype == torch.int32
    torch.testing.assert_close(k, i * j + 7)

    m = torch.tensor([True, False, True, True, False, False])
    v = torch.randn(6)
    y, flipped = op("masked_negate")(m, v)
    assert flipped.dtype == torch.bool
    torch.testing.assert_close(y, torch.where(m, v, -v))
    torch.testing.assert_close(flipped, ~m)

    x = torch.randn(3, 8)
    sums, soft = op("row_stats")(x)
    torch.testing.assert_close(sums, x.sum(dim=1))
    torch.testing.assert_close(soft, torch.softmax(x, dim=1))


@pytest.mark.parametrize("batch", [0, 1, 3, 17])
def test_polymorphic_batch(op, batch):
    x, s = torch.randn(batch, 5), torch.randn(batch)
    y, sums = op("scale_rows_any_batch")(x, s)
    assert y.shape == (batch, 5) and sums.shape == (batch,)
    torch.testing.assert_close(y, x * s[:, None])
    torch.testing.assert_close(sums, (x * s[:, None]).sum(dim=1))


def test_layouts_other_than_contiguous(op):
    f = op("scale_add")
    x, b = torch.randn(5, 4).t(), torch.randn(4, 10)[:, ::2]
    assert not x.is_contiguous() and not b.is_contiguous()
    torch.testing.assert_close(f(x, b), 2 * x + b)
    # f32 elements at an odd address (a NumPy view of a byte buffer): copied first.
    buf = np.zeros(4 * 20 + 1, np.uint8)
    odd = np.frombuffer(buf.data, dtype=np.float32, count=20, offset=1).reshape(4, 5)
    odd[...] = np.arange(20, dtype=np.float32).reshape(4, 5)
    x = torch.from_numpy(odd)
    assert x.data_ptr() % 4 == 1
    torch.testing.assert_close(f(x, b), 2 * x + b)
    # Bool bytes other than 0 and 1 read as true.
    m = torch.tensor([2, 0, 1, 255, 0, 7], dtype=torch.uint8).view(torch.bool)
    v = torch.randn(6)
    y, flipped = op("masked_negate")(m, v)
    want = torch.tensor([True, False, True, True, False, True])
    torch.testing.assert_close(y, torch.where(want, v, -v))
    torch.testing.assert_close(flipped, ~want)


def test_inputs_not_written_and_outputs_fresh(op):
    f = op("scale_add")
    x, b = torch.randn(4, 5), torch.randn(4, 5)
    saved = (x.clone(), b.clone())
    y1, y2 = f(x, b), f(x, b)
    assert y1.data_ptr() != y2.data_ptr()
    torch.testing.assert_close(x, saved[0])
    torch.testing.assert_close(b, saved[1])


def test_one_op_per_program(bundle_dir, op):
    first = ovl.torch.op(ovl.load(bundle_dir / "scale_add.json"))
    again = ovl.torch.op(ovl.load(bundle_dir / "scale_add.json"))
    assert first is again and first.overload is again.overload
    assert first.overload is getattr(torch.ops.ovl, first.name).default
    assert first.name.startswith("scale_add_")
    assert op("min_max").name != first.name
    # The gradient op is named after its program's op.
    g = op("layernorm_grad")
    assert g.gradient is getattr(torch.ops.ovl, g.name + "_grad").default
    assert op("scale_add").gradient is None


# --- gradients ---------------------------------------------------------------------------


@pytest.mark.parametrize("batch", [1, 4, 9])
def test_autograd_at_any_batch(op, batch):
    f = op("scale_rows_grad")
    x = torch.randn(batch, 5, requires_grad=True)
    s = torch.randn(batch, requires_grad=True)
    w = torch.randn(batch, 5)
    (f(x, s) * w).sum().backward()
    xr, sr = x.detach().clone().requires_grad_(), s.detach().clone().requires_grad_()
    (xr * sr[:, None] * w).sum().backward()
    torch.testing.assert_close(x.grad, xr.grad)
    torch.testing.assert_close(s.grad, sr.grad)


def test_layernorm_autograd_against_torch(op):
    f = op("layernorm_grad")
    x = torch.randn(6, 33, requires_grad=True)
    w = torch.randn(6, 33)
    y = f(x)
    torch.testing.assert_close(y, layernorm(x), rtol=1e-4, atol=1e-5)
    (y * w).sum().backward()
    xr = x.detach().clone().requires_grad_()
    (layernorm(xr) * w).sum().backward()
    torch.testing.assert_close(x.grad, xr.grad, rtol=1e-4, atol=1e-5)


def test_bool_input_gets_no_gradient(op):
    f = op("masked_double")
    m = torch.tensor([True, False, True, False, True])
    x = torch.randn(5, requires_grad=True)
    y = f(m, x)
    torch.testing.assert_close(y, torch.where(m, 2 * x, x))
    y.backward(torch.arange(5.0))
    torch.testing.assert_close(x.grad, torch.where(m, 2.0, 1.0) * torch.arange(5.0))
    # torch.autograd.grad over both inputs: the bool one has none.
    x.grad = None
    (gx,) = torch.autograd.grad(f(m, x).sum(), [x])
    torch.testing.assert_close(gx, torch.where(m, 2.0, 1.0))


def test_no_gradient_program_says_so(op):
    x = torch.randn(4, 5, requires_grad=True)
    y = op("scale_add")(x, torch.randn(4, 5))
    assert y.requires_grad
    with pytest.raises(RuntimeError, match=r"`scale_add` has no gradient program"):
        y.sum().backward()


# --- opcheck -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, make",
    [
        ("scale_add", lambda: (torch.randn(4, 5), torch.randn(4, 5))),
        ("mul_add_i32", lambda: (torch.randint(-9, 9, (9,), dtype=torch.int32),) * 2),
        ("masked_negate", lambda: (torch.rand(6) > 0.5, torch.randn(6))),
        ("scale_rows_any_batch", lambda: (torch.randn(6, 5), torch.randn(6))),
        ("layernorm_grad", lambda: (torch.randn(6, 33, requires_grad=True),)),
        ("scale_rows_grad", lambda: (torch.randn(3, 5, requires_grad=True),
                                     torch.randn(3, requires_grad=True))),
        ("masked_double", lambda: (torch.rand(7) > 0.5, torch.randn(7, requires_grad=True))),
    ],
)
def test_opcheck(op, name, make):
    f = op(name)
    result = torch.library.opcheck(f.overload, make())
    assert set(result.values()) == {"SUCCESS"}, result
    if f.gradient is not None:
        # The gradient op on its own (the inputs and one upstream gradient per output).
        args = [t.detach() for t in make()]
        outs = f.overload(*args)
        outs = outs if isinstance(outs, tuple) else (outs,)
        upstream = [torch.randn_like(o) for o in outs]
        result = torch.library.opcheck(f.gradient, (*args, *upstream))
        assert set(result.values()) == {"SUCCESS"}, result


# --- torch.compile -----------------------------------------------------------------------


class Counting:
    """A `torch.compile` backend that counts the graphs it is given and runs them eagerly."""

    def __init__(self):
        self.graphs = 0

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        return gm.forward


def test_compile_fullgraph_forward_and_backward(op):
    f = op("layernorm_grad")
    w = torch.randn(6, 33)

    def step(x):
        return (torch.relu(f(x * 1.5)) * w).sum()

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    x = torch.randn(6, 33, requires_grad=True)
    loss = compiled(x)
    loss.backward()
    xr = x.detach().clone().requires_grad_()
    want = (torch.relu(layernorm(xr * 1.5)) * w).sum()
    want.backward()
    torch.testing.assert_close(loss, want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(x.grad, xr.grad, rtol=1e-4, atol=1e-5)


def test_compile_inductor_fullgraph(op):
    f = op("scale_rows_any_batch")

    def g(x, s):
        y, sums = f(x.exp(), s)
        return y.sum(dim=1) - sums + 1

    compiled = torch.compile(g, fullgraph=True)
    x, s = torch.randn(6, 5), torch.randn(6)
    torch.testing.assert_close(compiled(x, s), torch.ones(6), rtol=1e-4, atol=1e-4)


def test_no_graph_break(op):
    f = op("scale_rows_grad")
    explained = torch._dynamo.explain(lambda x, s: f(x, s).relu())(
        torch.randn(3, 5), torch.randn(3)
    )
    assert explained.graph_break_count == 0 and explained.graph_count == 1


def test_compile_dynamic_compiles_once_for_every_batch(op):
    f = op("scale_rows_grad")
    backend = Counting()
    torch._dynamo.reset()

    def g(x, s):
        return f(x, s) * 2

    compiled = torch.compile(g, backend=backend, dynamic=True, fullgraph=True)
    for batch in (3, 5, 8, 17, 40):
        x, s = torch.randn(batch, 5), torch.randn(batch)
        torch.testing.assert_close(compiled(x, s), 2 * x * s[:, None])
    assert backend.graphs == 1


def test_compile_dynamic_backward_compiles_once(op):
    f = op("scale_rows_grad")
    backend = Counting()
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, s: f(x, s).sum(), backend="aot_eager", dynamic=True)
    counted = torch.compile(lambda x, s: f(x, s).sum(), backend=backend, dynamic=True)
    for batch in (3, 6, 11):
        x = torch.randn(batch, 5, requires_grad=True)
        s = torch.randn(batch, requires_grad=True)
        compiled(x, s).backward()
        torch.testing.assert_close(x.grad, s.detach()[:, None].expand(batch, 5))
        torch.testing.assert_close(s.grad, x.detach().sum(dim=1))
        counted(x.detach(), s.detach())
    assert backend.graphs == 1


# --- errors ------------------------------------------------------------------------------


def still_works(f):
    x, b = torch.randn(4, 5), torch.randn(4, 5)
    torch.testing.assert_close(f(x, b), 2 * x + b)


@pytest.mark.parametrize("count", [0, 1, 3])
def test_error_count(op, count):
    f = op("scale_add")
    with pytest.raises(TypeError, match=rf"`scale_add` takes 2 inputs \(x: float32\[4, 5\], "
                       rf"b: float32\[4, 5\]\), {count} given"):
        f(*[torch.randn(4, 5)] * count)
    still_works(f)


def test_error_not_a_tensor(op):
    f = op("scale_add")
    with pytest.raises(TypeError, match=r"input 1 \(`b`\) is a list, not a torch.Tensor"):
        f(torch.randn(4, 5), [[0.0] * 5] * 4)
    still_works(f)


@pytest.mark.parametrize("dtype", [torch.float64, torch.int32, torch.float16])
def test_error_dtype(op, dtype):
    f = op("scale_add")
    with pytest.raises(TypeError, match=rf"input 0 \(`x`\) is {dtype}\[4, 5\], the program "
                       rf"takes float32\[4, 5\]"):
        f(torch.zeros(4, 5, dtype=dtype), torch.randn(4, 5))
    still_works(f)


@pytest.mark.parametrize("shape", [(4, 6), (5, 5), (20,), (4, 5, 1), ()])
def test_error_shape(op, shape):
    f = op("scale_add")
    with pytest.raises(ValueError, match=rf"input 1 \(`b`\) has shape \[.*\], the program takes "
                       rf"float32\[4, 5\]"):
        f(torch.randn(4, 5), torch.randn(shape))
    still_works(f)


def test_error_batch_disagreement(op):
    f = op("scale_rows_grad")
    with pytest.raises(ValueError, match=r"input 1 \(`s`\).*batch"):
        f(torch.randn(3, 5), torch.randn(4))
    with pytest.raises(ValueError, match=r"input 0 \(`x`\) has shape \[3, 6\], the program "
                       r"takes float32\[batch, 5\]"):
        f(torch.randn(3, 6), torch.randn(3))
    x, s = torch.randn(2, 5), torch.randn(2)
    torch.testing.assert_close(f(x, s), x * s[:, None])


def test_error_gradient_op_names_the_upstream_gradient(op):
    g = op("scale_rows_grad").gradient
    with pytest.raises(ValueError, match=r"input 2 \(`dy`\).*batch"):
        g(torch.randn(2, 5), torch.randn(2), torch.randn(3, 5))


def test_error_neither_cpu_nor_cuda(op):
    # The meta device stands in for a device that is neither the CPU nor CUDA when the kernel
    # is called directly (CUDA tensors, and a CPU and a CUDA input together, are in
    # test_gpu.py).
    kernel = ovl._native.TorchKernel(
        op("scale_add").program._native, [torch.float32] * 2, [torch.float32], torch.empty
    )
    with pytest.raises(ValueError, match=r"input 0 \(`x`\) is on device `meta`: .*CPU and on CUDA"):
        kernel(torch.empty(4, 5, device="meta"), torch.randn(4, 5))
    with pytest.raises(ValueError, match=r"input 1 \(`b`\) is on device `meta`"):
        kernel(torch.randn(4, 5), torch.empty(4, 5, device="meta"))
    still_works(op("scale_add"))


def test_error_op_takes_a_program():
    with pytest.raises(TypeError, match="takes an ovl.Program"):
        ovl.torch.op("scale_add.json")


# --- the kernels -------------------------------------------------------------------------


def test_the_cpp_kernel_runs_here():
    # The project's environment has a C++ compiler: the ops get the C++ kernel (a fallback to
    # the Python kernel would warn; this says so instead of passing quietly).
    want = os.environ.get("OVL_TORCH_KERNEL", "auto").strip().lower()
    assert ovl.torch.kernel_kind() == ("python" if want == "python" else "c++")


def test_the_cpp_kernel_compiles_its_cuda_branch_where_it_can():
    # Where torch has CUDA and the CUDA runtime's headers are found (here: torch's CUDA wheel
    # and nvidia/cu13), the C++ kernel is compiled with its CUDA branch (the current stream
    # from c10_cuda); the CUDA tensors themselves run in the GPU check only (test_gpu.py).
    from ovl import _torch_cpp

    if ovl.torch.kernel_kind() != "c++":
        pytest.skip("the Python kernel was chosen")
    headers = _torch_cpp.cuda_headers()
    if torch.version.cuda is None or headers is None:
        print("the C++ kernel's CUDA branch: did not compile (torch without CUDA, or no CUDA "
              "runtime headers found)")
        assert not _torch_cpp.has_cuda()
        return
    assert (headers / "cuda_runtime_api.h").is_file()
    assert _torch_cpp.has_cuda()
    _torch_cpp.library()  # compiled (and cached) with it


PYTHON_KERNEL_CHECK = """
import sys, torch, ovl, ovl.torch
assert ovl.torch.kernel_kind() == "python"
d = sys.argv[1]
f = ovl.torch.op(ovl.load(d + "/scale_rows_grad.json"))
x, s = torch.randn(3, 5, requires_grad=True), torch.randn(3, requires_grad=True)
f(x, s).sum().backward()
torch.testing.assert_close(x.grad, s.detach()[:, None].expand(3, 5))
torch.testing.assert_close(s.grad, x.detach().sum(dim=1))
try:
    f(x.double(), s)
except TypeError as e:
    assert "input 0 (`x`) is torch.float64[3, 5]" in str(e), e
else:
    raise AssertionError("no TypeError")
print("ok")
"""


def test_the_python_kernel_when_chosen(bundle_dir):
    env = dict(os.environ, OVL_TORCH_KERNEL="python")
    done = subprocess.run([sys.executable, "-c", PYTHON_KERNEL_CHECK, str(bundle_dir)],
                          env=env, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
    env["OVL_TORCH_KERNEL"] = "fortran"
    done = subprocess.run(
        [sys.executable, "-c", "import torch, ovl, ovl.torch; ovl.torch.kernel_kind()"],
        env=env, capture_output=True, text=True,
    )
    assert done.returncode != 0 and "OVL_TORCH_KERNEL='fortran'" in done.stderr


def test_no_second_derivative_says_so(op):
    f = op("layernorm_grad")
    x = torch.randn(6, 33, requires_grad=True)
    (gx,) = torch.autograd.grad(f(x).pow(2).sum(), [x], create_graph=True)
    with pytest.raises(RuntimeError, match="cannot be differentiated twice"):
        gx.sum().backward()


def test_op_names_are_identifiers():
    from ovl.torch import _identifier

    assert _identifier("scale_add", "program") == "scale_add"
    assert _identifier("1st-op.v2", "program") == "program_1st_op_v2"
    assert _identifier("", "program") == "program"
    assert _identifier("lambda", "program") == "lambda_"
    assert _identifier("überop", "program") == "_berop"


def test_calls_from_several_threads(op):
    import threading

    f = op("scale_rows_any_batch")
    errors = []

    def work(seed):
        g = torch.Generator().manual_seed(seed)
        try:
            for batch in (1, 7, 64, 300):
                x, s = torch.randn(batch, 5, generator=g), torch.randn(batch, generator=g)
                y, sums = f(x, s)
                torch.testing.assert_close(y, x * s[:, None])
                torch.testing.assert_close(sums, (x * s[:, None]).sum(dim=1))
        except Exception as e:  # reported below, with the thread's seed
            errors.append((seed, e))

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def torch_lstm_cell(z, c):
    i, j, f, o = torch.chunk(z, 4, dim=1)
    new_c = c * torch.sigmoid(f + 1.0) + torch.sigmoid(i) * torch.tanh(j)
    return new_c, torch.tanh(new_c) * torch.sigmoid(o)


@pytest.mark.parametrize("use", ["both", "new_h only", "new_c only"])
def test_lstm_cell_two_outputs_one_unused(op, use):
    # An output that takes no part in the loss has no upstream gradient: zeros go in its place.
    f = op("lstm_cell")
    z = torch.randn(4, 32, requires_grad=True)
    c = torch.randn(4, 8, requires_grad=True)
    zr, cr = z.detach().clone().requires_grad_(), c.detach().clone().requires_grad_()
    w = torch.randn(4, 8)

    def loss(new_c, new_h):
        return {"both": (new_c * w).sum() + new_h.sum(), "new_h only": (new_h * w).sum(),
                "new_c only": (new_c * w).sum()}[use]

    got = f(z, c)
    want = torch_lstm_cell(zr, cr)
    torch.testing.assert_close(got, want)
    loss(*got).backward()
    loss(*want).backward()
    torch.testing.assert_close(z.grad, zr.grad)
    torch.testing.assert_close(c.grad, cr.grad)
    result = torch.library.opcheck(f.overload, (torch.randn(4, 32, requires_grad=True),
                                               torch.randn(4, 8, requires_grad=True)))
    assert set(result.values()) == {"SUCCESS"}, result

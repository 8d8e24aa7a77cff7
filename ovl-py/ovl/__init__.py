"""ovl: call operators written in Rust with ovl, exported as bundle files, on NumPy arrays and
any other array that speaks DLPack.

    import numpy as np
    import ovl

    f = ovl.load("scale_add.json")     # checks the program, compiles it for this CPU (cached)
    y = f(np.ones((4, 5), np.float32), np.zeros((4, 5), np.float32))

Bundle files are written in Rust by ``ovl::as_tensorflow(..).write(path)`` or, for a batch size
known only at run time, ``ovl::as_tensorflow_polymorphic(..).write(path)`` (the same files the
TensorFlow package ``ovl_tf`` loads).

What runs today: programs on the CPU, inputs from any object with ``__dlpack__`` in host memory
(NumPy arrays; PyTorch, JAX and CuPy arrays on the CPU through the same protocol), outputs in
the inputs' framework (NumPy in, NumPy out; JAX in, ``jax.Array`` out; PyTorch in,
``torch.Tensor`` out; mixed, NumPy out), and the bundle's gradient program (``program.gradient``).
JAX functions through the XLA FFI (``jit``, ``grad``, ``vmap``, sharding):
``ovl.jax.op(program)`` (``import ovl.jax``). PyTorch custom ops: ``ovl.torch.op(program)``
(``import ovl.torch``; see its docstring). GPU arrays: all inputs CUDA ``torch.Tensor``s (run
on torch's current stream, outputs from its allocator) or all GPU ``jax.Array``s (run through
``ovl.jax.op`` on XLA's stream); a CPU and a GPU input together are a ``ValueError``.

Errors:

- a file that cannot be read: ``OSError`` (``FileNotFoundError``, ...);
- a file that is not a usable bundle (not JSON, another format or version, a program modified
  or corrupted): ``ovl.BundleError``, a ``ValueError``;
- an operator that does not compile: ``RuntimeError`` with the compiler's message;
- a call with the wrong number of inputs, an input without ``__dlpack__`` or of the wrong
  dtype: ``TypeError``; a wrong shape (or inputs that disagree on the batch size), a DLPack
  capsule already consumed, inputs on two devices, a GPU array from another framework than
  PyTorch and JAX: ``ValueError``. Each message names the input by its position and its name
  in the program.
"""

from __future__ import annotations

import os
import sys
from typing import NamedTuple, Optional, Tuple, Union

from ._native import BundleError
from ._native import Program as _NativeProgram

__all__ = ["BundleError", "Program", "TensorSpec", "load"]
__version__ = "0.1.0"


class TensorSpec(NamedTuple):
    """An input or output of a program: its name (``None`` for outputs, which have none), its
    dtype as NumPy names it (``"float32"``, ``"int32"``, ``"bool"``, ...) and its shape, with
    ``None`` for a size known only at run time (the batch of a polymorphic bundle)."""

    name: Optional[str]
    dtype: str
    shape: Tuple[Optional[int], ...]


class Program:
    """A program loaded from a bundle file (see ``load``), callable on arrays."""

    def __init__(self, native: _NativeProgram, source: str):
        self._native = native
        self.source = source
        self.inputs: Tuple[TensorSpec, ...] = tuple(
            TensorSpec(n, d, tuple(s)) for n, d, s in native.inputs
        )
        self.outputs: Tuple[TensorSpec, ...] = tuple(
            TensorSpec(n, d, tuple(s)) for n, d, s in native.outputs
        )
        self._gradient: Optional[Program] = None
        self._torch_kernel = None  # for CUDA tensors (`_cuda_runner`)
        self._jax_op = None  # for GPU jax.Arrays

    @property
    def name(self) -> str:
        """The program's name (the Rust export's ``.name(..)``, or its operator's)."""
        return self._native.name

    @property
    def symbols(self) -> Tuple[str, ...]:
        """The names of the sizes known only at run time (``("batch",)``), empty for a program
        with fixed shapes."""
        return tuple(self._native.symbols)

    @property
    def has_gradient(self) -> bool:
        """Whether the bundle carries a gradient program (exported in Rust with
        ``TfExport::gradient``)."""
        return self._native.has_gradient

    @property
    def gradient(self) -> Optional["Program"]:
        """The bundle's gradient program, or ``None`` when it carries none. It is loaded
        (checked and compiled) on first use and kept. It takes the program's inputs followed by
        one gradient per output (each of its output's type, named as the Rust export named its
        placeholder, e.g. ``dy``) and
        returns one gradient per input, of the input's type (zeros for integer and bool
        inputs): the vector-Jacobian product, what ``torch.autograd`` and ``jax.vjp`` call."""
        if self._gradient is None and self._native.has_gradient:
            self._gradient = Program(self._native.gradient(), self.source)
        return self._gradient

    @property
    def kernel_count(self) -> int:
        """How many kernels (fused operators) a call runs."""
        return self._native.kernel_count

    def __call__(self, *arrays):
        """``program(*arrays)``: runs the program on the CPU and returns its output, or a tuple
        of outputs when it has several, as new arrays of the caller's framework.

        Each input is any object with ``__dlpack__`` in host memory: a NumPy array, or a
        PyTorch, JAX or CuPy array on the CPU. Its memory is read in place, without a copy,
        when it is contiguous row-major (C order) and aligned; any other layout (a transposed
        or sliced view, negative or zero strides) is copied into a contiguous buffer first,
        and gives the same values. Inputs are only read: they stay valid and unchanged.

        The inputs decide the outputs' framework: when every input comes from one framework,
        the outputs are that framework's arrays (``torch.Tensor`` for PyTorch inputs, a
        ``jax.Array`` for JAX inputs, on the CPU), handed over through DLPack without a copy;
        otherwise (NumPy inputs, inputs from several frameworks, from another DLPack
        producer, or no inputs) they are NumPy arrays. The framework is read from the
        inputs' types (``type(x).__module__``); nothing is imported that the caller has not
        imported.

        On a GPU: when every input is a ``torch.Tensor`` and one is on a CUDA device, the
        program runs there on torch's current stream of that device (the same kernel as
        ``ovl.torch.op``'s, outputs and scratch from torch's caching allocator, no host
        synchronization) and returns CUDA tensors; when every input is a ``jax.Array`` and one
        is on a GPU, it runs through ``ovl.jax.op(program)`` on XLA's stream and returns
        ``jax.Array``s there. The program is compiled for the GPU at its first GPU call. GPU
        arrays of other producers (CuPy) are a ``ValueError`` for now.

        Raises ``TypeError`` for a wrong number of inputs, an object without ``__dlpack__``
        or a wrong dtype, and ``ValueError`` for a wrong shape, inputs that disagree on a size
        known only at run time, a DLPack capsule already consumed, inputs on two devices (a CPU
        and a GPU one), or a GPU array of another framework; each message names the input (its
        position and its name).
        """
        runner = self._gpu_runner(arrays)
        if runner is not None:
            return runner(*arrays)
        exports = self._native.run(arrays)
        wrap = _consumer(_framework(arrays))
        outputs = tuple(wrap(e) for e in exports)
        return outputs[0] if len(outputs) == 1 else outputs

    def _gpu_runner(self, arrays):
        """What runs a call whose inputs are all PyTorch or all JAX arrays and one is on a GPU:
        the torch kernel (CUDA tensors) or the ``ovl.jax`` op; ``None`` for a CPU call."""
        framework = _framework(arrays)
        if framework == "torch":
            if not any(getattr(a, "is_cuda", False) for a in arrays):
                return None
            if self._torch_kernel is None:
                import torch

                from ._native import TorchKernel

                dtype = lambda name: getattr(torch, name)  # noqa: E731
                self._torch_kernel = TorchKernel(
                    self._native, [dtype(t.dtype) for t in self.inputs],
                    [dtype(t.dtype) for t in self.outputs], torch.empty,
                )
            return self._torch_kernel
        if framework == "jax":
            on_gpu = any(
                d.platform != "cpu" for a in arrays if hasattr(a, "devices") for d in a.devices()
            )
            if not on_gpu:
                return None
            if self._jax_op is None:
                from . import jax as ovl_jax

                self._jax_op = ovl_jax.op(self)
            return self._jax_op
        return None

    def __repr__(self) -> str:
        return repr(self._native)


# The frameworks whose arrays a call hands back, by the top package of their array types'
# modules (`type(x).__module__`: "torch", "jaxlib._jax", "cupy", "numpy").
_FRAMEWORKS = {
    "numpy": "numpy", "torch": "torch", "jax": "jax", "jaxlib": "jax", "cupy": "cupy",
    "tensorflow": "tensorflow",
}


def _framework(arrays) -> str:
    """The framework of the outputs: the inputs' when they all come from one known framework,
    else ``"numpy"``."""
    found = {_FRAMEWORKS.get(type(a).__module__.partition(".")[0]) for a in arrays}
    if len(found) == 1:
        (name,) = found
        if name is not None:
            return name
    return "numpy"


def _consumer(framework: str):
    """The DLPack consumer that wraps an output (an object with ``__dlpack__`` in host memory)
    as an array of ``framework``, taken from the modules the caller already imported; NumPy's
    for NumPy and whenever the framework's module is not there."""
    if framework == "torch":
        torch = sys.modules.get("torch")
        if torch is not None:
            return torch.from_dlpack
    elif framework == "jax":
        if "jax" in sys.modules:
            # Imported with `jax` itself; `jax.numpy.from_dlpack` takes an object with
            # `__dlpack__` (older versions' `jax.dlpack.from_dlpack` only took a capsule).
            import jax.numpy

            if hasattr(jax.numpy, "from_dlpack"):
                return jax.numpy.from_dlpack
            import jax.dlpack

            return lambda e: jax.dlpack.from_dlpack(e.__dlpack__())
    elif framework == "cupy":
        cupy = sys.modules.get("cupy")
        if cupy is not None:
            return cupy.from_dlpack
    elif framework == "tensorflow":
        tf = sys.modules.get("tensorflow")
        if tf is not None:
            # TensorFlow takes a legacy capsule (`to_dlpack`'s kind), not an object.
            return lambda e: tf.experimental.dlpack.from_dlpack(e.__dlpack__())
    import numpy

    return numpy.from_dlpack


def load(path: Union[str, os.PathLike]) -> Program:
    """Loads the program of a bundle file (written by ``ovl::as_tensorflow(..).write(path)``
    or ``ovl::as_tensorflow_polymorphic(..).write(path)``): reads it, checks the program's
    digest and structure, and compiles its operators for this CPU (or takes them from the
    operator cache, ``$OVL_CACHE_DIR``, or from the bundle when it embeds libraries built for
    this machine). A file that cannot be read is an ``OSError``, one that is not a usable
    bundle an ``ovl.BundleError``, an operator that does not compile a ``RuntimeError``."""
    source = os.fspath(path)
    with open(source, "rb") as f:
        text = f.read()
    return Program(_NativeProgram(text, str(source)), str(source))

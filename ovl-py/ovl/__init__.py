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
(NumPy arrays; PyTorch, JAX and CuPy arrays on the CPU through the same protocol), outputs as
NumPy arrays. Not yet: GPU inputs (a ``ValueError``), gradients, a PyTorch custom op, a JAX
FFI call.

Errors:

- a file that cannot be read: ``OSError`` (``FileNotFoundError``, ...);
- a file that is not a usable bundle (not JSON, another format or version, a program modified
  or corrupted): ``ovl.BundleError``, a ``ValueError``;
- an operator that does not compile: ``RuntimeError`` with the compiler's message;
- a call with the wrong number of inputs, an input without ``__dlpack__`` or of the wrong
  dtype: ``TypeError``; a wrong shape (or inputs that disagree on the batch size), a DLPack
  capsule already consumed, a GPU array: ``ValueError``. Each message names the input by its
  position and its name in the program.
"""

from __future__ import annotations

import os
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
    def kernel_count(self) -> int:
        """How many kernels (fused operators) a call runs."""
        return self._native.kernel_count

    def __call__(self, *arrays):
        """``program(*arrays)``: runs the program on the CPU and returns its output, or a tuple
        of outputs when it has several, as new NumPy arrays.

        Each input is any object with ``__dlpack__`` in host memory: a NumPy array, or a
        PyTorch, JAX or CuPy array on the CPU. Its memory is read in place, without a copy,
        when it is contiguous row-major (C order) and aligned; any other layout (a transposed
        or sliced view, negative or zero strides) is copied into a contiguous buffer first,
        and gives the same values. Inputs are only read: they stay valid and unchanged.

        Raises ``TypeError`` for a wrong number of inputs, an object without ``__dlpack__``
        or a wrong dtype, and ``ValueError`` for a wrong shape, inputs that disagree on a size
        known only at run time, a DLPack capsule already consumed, or an array on a GPU (not
        supported yet); each message names the input (its position and its name).
        """
        exports = self._native.run(arrays)
        import numpy

        outputs = tuple(numpy.from_dlpack(e) for e in exports)
        return outputs[0] if len(outputs) == 1 else outputs

    def __repr__(self) -> str:
        return repr(self._native)


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

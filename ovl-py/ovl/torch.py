"""ovl.torch: ovl programs as PyTorch custom operators (``torch.library``).

    import torch
    import ovl, ovl.torch

    f = ovl.torch.op(ovl.load("layernorm_grad.json"))
    y = f(x)                                    # eager: torch.Tensor in, torch.Tensor out
    y.sum().backward()                          # the bundle's gradient program
    g = torch.compile(lambda x: f(x) * 2, fullgraph=True)   # no graph break

``op(program)`` defines one operator per program in the namespace ``ovl``
(``torch.ops.ovl.<name>_<digest>``), named by the program's name and digest, so that the same
program loaded twice is one operator. It has:

- a CPU and CUDA kernel without Python in a call: ``_torch_kernel.cc``, compiled on first use
  against the installed torch's headers and cached (``_torch_cpp``), hands the tensors' data
  pointers to the native module (``ovl_torch_run``) and allocates the outputs with
  ``at::empty``; a non-contiguous input is copied by torch first. On CUDA tensors (all on one
  device) the program, compiled for the GPU at its first CUDA call, runs on torch's current
  stream of that device, its outputs and scratch from torch's caching allocator, nothing
  synchronizing the host, so that it can be captured (``torch.cuda.graph``; call it once
  before the capture: a first call on a device while capturing is an error saying so). Where
  it cannot be compiled, the native module's ``TorchKernel`` is registered as a Python kernel
  instead (``kernel_kind()``, ``$OVL_TORCH_KERNEL``), for the CPU and CUDA too;
- a fake (meta) implementation computing the outputs' shapes from the inputs', a polymorphic
  program's batch kept symbolic: ``torch.compile(dynamic=True)`` compiles once for every batch;
- autograd from the bundle's gradient program, itself a custom operator
  (``torch.ops.ovl.<name>_<digest>_grad``), so backward compiles without graph breaks; the
  inputs are saved for it; integer and bool inputs get no gradient (``None``). A bundle without
  a gradient program raises at ``backward()``, saying so.

Errors (eager): a wrong number of inputs, a non-tensor or a wrong dtype is a ``TypeError``, a
wrong shape, inputs that disagree on the batch, inputs on two devices or a tensor neither on
the CPU nor on CUDA a ``ValueError``; each names the input.
"""

from __future__ import annotations

import hashlib
import keyword
import os
import re
import threading
import warnings
from typing import Dict, List, Optional

import torch

from . import Program
from ._native import TorchKernel, symbolic_dims

__all__ = ["NAMESPACE", "Op", "kernel_kind", "op"]

#: The ``torch.library`` namespace of ovl's operators (``torch.ops.ovl``).
NAMESPACE = "ovl"

_lib = torch.library.Library(NAMESPACE, "FRAGMENT")
_ops: Dict[str, "Op"] = {}
_lock = threading.Lock()
_KINDS = ("auto", "c++", "python")
_is_compiling = torch.compiler.is_compiling
_kind: Optional[str] = None


def _dtype(name: str) -> torch.dtype:
    """The torch dtype of a NumPy dtype name (``"float32"``, ``"bool"``, ``"uint16"``, ...)."""
    found = getattr(torch, name, None)
    if not isinstance(found, torch.dtype):
        raise TypeError(f"ovl.torch: PyTorch has no dtype `{name}`")
    return found


def _identifier(text: str, fallback: str) -> str:
    """``text`` as an ASCII identifier (other characters as ``_``), ``fallback`` if empty."""
    ident = re.sub(r"[^A-Za-z0-9_]", "_", text)
    if not ident or not re.match(r"[A-Za-z_]", ident):
        ident = f"{fallback}_{ident}" if ident else fallback
    if keyword.iskeyword(ident):
        ident += "_"
    return ident


def _argument_names(program: Program) -> List[str]:
    """The schema's argument names: the program's input names where they are identifiers,
    unique and not Python keywords, else ``input<k>``."""
    names: List[str] = []
    for k, spec in enumerate(program.inputs):
        name = spec.name or ""
        ok = name.isidentifier() and name.isascii() and not keyword.iskeyword(name)
        names.append(name if ok and name not in names else f"input{k}")
    return names


def _schema(name: str, program: Program) -> str:
    args = ", ".join(f"Tensor {a}" for a in _argument_names(program))
    outs = len(program.outputs)
    ret = "Tensor" if outs == 1 else "(" + ", ".join(["Tensor"] * outs) + ")"
    return f"{name}({args}) -> {ret}"


def _what(program: Program, k: int) -> str:
    return f"ovl program `{program.name}`: input {k} (`{program.inputs[k].name}`)"


def _type_text(spec) -> str:
    return f"{spec.dtype}[{', '.join('?' if d is None else str(d) for d in spec.shape)}]"


class _Shapes:
    """The fake implementation of a program's operator: checks the inputs' dtypes and ranks,
    solves the program's symbols from the inputs' (possibly symbolic) sizes and returns empty
    outputs of the right shapes and dtypes."""

    def __init__(self, program: Program):
        self.program = program
        self.inputs, self.outputs = symbolic_dims(program._native)
        self.in_dtypes = [_dtype(t.dtype) for t in program.inputs]
        self.out_dtypes = [_dtype(t.dtype) for t in program.outputs]

    def __call__(self, *tensors):
        program = self.program
        if len(tensors) != len(self.inputs):
            raise TypeError(
                f"ovl program `{program.name}` takes {len(self.inputs)} inputs, "
                f"{len(tensors)} given"
            )
        symbols: Dict[str, object] = {}
        for k, (t, dims) in enumerate(zip(tensors, self.inputs)):
            if t.dtype != self.in_dtypes[k]:
                raise TypeError(
                    f"{_what(program, k)} is {t.dtype}, the program takes "
                    f"{_type_text(program.inputs[k])}"
                )
            if t.dim() != len(dims):
                raise ValueError(
                    f"{_what(program, k)} has shape {list(t.shape)}, the program takes "
                    f"{_type_text(program.inputs[k])}"
                )
            for size, d in zip(t.shape, dims):
                if isinstance(d, int):
                    if isinstance(size, int):
                        if size != d:
                            raise ValueError(
                                f"{_what(program, k)} has shape {list(t.shape)}, the program "
                                f"takes {_type_text(program.inputs[k])}"
                            )
                    else:
                        torch._check(
                            size == d, lambda k=k, d=d: f"{_what(program, k)}: size {d}"
                        )
                    continue
                symbol, scale, offset = d
                value = size if (scale, offset) == (1, 0) else (size - offset) // scale
                if symbol in symbols:
                    torch._check(
                        symbols[symbol] == value,
                        lambda k=k, s=symbol: f"{_what(program, k)} disagrees on `{s}`",
                    )
                else:
                    symbols[symbol] = value
        like = tensors[0] if tensors else torch.empty(0)
        outs = []
        for dims, dtype in zip(self.outputs, self.out_dtypes):
            shape = [
                d if isinstance(d, int) else d[1] * symbols[d[0]] + d[2] for d in dims
            ]
            outs.append(like.new_empty(shape, dtype=dtype))
        return outs[0] if len(outs) == 1 else tuple(outs)


def _kernel_kind() -> str:
    """Decides once per process which CPU kernel the ops get (see ``kernel_kind``)."""
    global _kind
    if _kind is None:
        given = os.environ.get("OVL_TORCH_KERNEL", "auto").strip().lower() or "auto"
        if given not in _KINDS:
            raise ValueError(
                f"OVL_TORCH_KERNEL={given!r}: expected one of {', '.join(_KINDS)} (the C++ "
                "kernel when it compiles, the C++ kernel or an error, or the Python one)"
            )
        if given == "python":
            _kind = "python"
        else:
            try:
                from . import _torch_cpp

                _torch_cpp.library()
                _kind = "c++"
            except (RuntimeError, OSError, AttributeError) as e:
                if given == "c++":
                    raise RuntimeError(f"OVL_TORCH_KERNEL=c++: {e}") from e
                warnings.warn(
                    f"ovl.torch: the ops run through their Python kernel (slower per call): {e}",
                    RuntimeWarning,
                    stacklevel=4,
                )
                _kind = "python"
    return _kind


def kernel_kind() -> str:
    """Which kernel (CPU and CUDA) this process's ops have: ``"c++"`` (``_torch_kernel.cc``, compiled
    against the installed torch's headers on first use and cached; no Python in a call) or
    ``"python"`` (the native module's kernel called by the dispatcher as a Python kernel).
    ``$OVL_TORCH_KERNEL`` chooses: ``auto`` (the default: C++, else Python with a warning
    saying why, e.g. no C++ compiler), ``c++`` (or an error) or ``python``."""
    return _kernel_kind()


def _define(name: str, program: Program):
    """Defines ``ovl::<name>`` for ``program``: schema, CPU kernel, fake implementation.
    Returns the op and its kernel (which must live as long as the process)."""
    _lib.define(_schema(name, program))
    shapes = _Shapes(program)
    kernel = TorchKernel(program._native, shapes.in_dtypes, shapes.out_dtypes, torch.empty)
    if _kernel_kind() == "c++":
        from . import _torch_cpp

        _torch_cpp.register(
            NAMESPACE, name, kernel,
            [t.dtype for t in program.inputs], [t.dtype for t in program.outputs],
        )
    else:
        _lib.impl(name, kernel, "CPU")
        # On torch's current stream of the tensors' device (`torch.cuda.current_stream`).
        _lib.impl(name, kernel, "CUDA")
    torch.library.register_fake(f"{NAMESPACE}::{name}", shapes, lib=_lib)
    return getattr(getattr(torch.ops, NAMESPACE), name).default, kernel


_NO_GRADIENT = (
    "ovl program `{}` has no gradient program: export the bundle with one (`.gradient(..)` "
    "in Rust) to differentiate through it"
)


def _no_autograd(name: str, program: Program, message: str) -> None:
    """The autograd kernel of an op without a gradient: calls that need none run at once; a
    backward through it raises ``RuntimeError(message)``."""
    if _kernel_kind() == "c++":
        from . import _torch_cpp

        _torch_cpp.register_autograd(
            NAMESPACE, name, None,
            [_dtype(t.dtype).is_floating_point for t in program.inputs],
            [_dtype(t.dtype).is_floating_point for t in program.outputs], message,
        )
        return

    def backward(ctx, *grads):
        raise RuntimeError(message)

    torch.library.register_autograd(f"{NAMESPACE}::{name}", backward, lib=_lib)


class Op:
    """A program's PyTorch operator: call it on ``torch.Tensor``s (see ``op``).

    ``overload`` is the ``torch.ops.ovl.<name>.default`` operator, ``gradient`` the gradient
    program's (``None`` when the bundle has none), ``program`` the ``ovl.Program``."""

    def __init__(self, name: str, program: Program):
        self.name = name
        self.program = program
        # What may fail (compiling the gradient program, the C++ kernel) comes before the
        # first registration: a failed `op()` registers nothing, and the next one starts over.
        grad_program = program.gradient
        _kernel_kind()
        self.overload, kernel = _define(name, program)
        self._kernels = [kernel]
        self.gradient: Optional[torch._ops.OpOverload] = None
        if grad_program is not None:
            self.gradient, kernel = _define(f"{name}_grad", grad_program)
            self._kernels.append(kernel)
            _no_autograd(
                f"{name}_grad", grad_program,
                f"ovl program `{program.name}` has a gradient program, but not a second one: "
                "it cannot be differentiated twice",
            )
        self._register_autograd(name)
        self._count = len(program.inputs)
        self._call = getattr(self.overload, "_op", self.overload)

    def _register_autograd(self, name: str) -> None:
        program = self.program
        floating = [_dtype(t.dtype).is_floating_point for t in program.inputs]
        out_dtypes = [_dtype(t.dtype) for t in program.outputs]
        if self.gradient is None:
            _no_autograd(name, program, _NO_GRADIENT.format(program.name))
            return
        if _kernel_kind() == "c++":
            from . import _torch_cpp

            _torch_cpp.register_autograd(
                NAMESPACE, name, f"{name}_grad", floating,
                [d.is_floating_point for d in out_dtypes], "",
            )
            return
        gradient = self.gradient

        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(*inputs)
            outs = output if isinstance(output, tuple) else (output,)
            ctx.out_shapes = [o.shape for o in outs]

        def backward(ctx, *grads):
            inputs = ctx.saved_tensors
            upstream = [
                g if g is not None else inputs[0].new_zeros(shape, dtype=dtype)
                for g, shape, dtype in zip(grads, ctx.out_shapes, out_dtypes)
            ]
            result = gradient(*inputs, *upstream)
            result = result if isinstance(result, tuple) else (result,)
            return tuple(g if f else None for g, f in zip(result, floating))

        torch.library.register_autograd(
            f"{NAMESPACE}::{name}", backward, setup_context=setup_context, lib=_lib
        )

    def __call__(self, *tensors):
        if len(tensors) != self._count:
            p = self.program
            raise TypeError(
                f"ovl program `{p.name}` takes {self._count} input"
                f"{'' if self._count == 1 else 's'} "
                f"({', '.join(f'{t.name}: {_type_text(t)}' for t in p.inputs)}), "
                f"{len(tensors)} given"
            )
        try:
            if _is_compiling():
                # What torch.compile traces: the op (its fake implementation, no graph break).
                return self.overload(*tensors)
            # Eagerly, the op's C++ entry point without `OpOverload.__call__`'s Python frame.
            return self._call(*tensors)
        except RuntimeError as e:
            # The dispatcher refuses a non-tensor before the kernel runs.
            for k, t in enumerate(tensors):
                if not isinstance(t, torch.Tensor):
                    raise TypeError(
                        f"{_what(self.program, k)} is a {type(t).__name__}, not a torch.Tensor"
                    ) from e
            raise

    def __repr__(self) -> str:
        return f"<ovl.torch.Op torch.ops.{NAMESPACE}.{self.name} for {self.program!r}>"


def _name(program: Program) -> str:
    digest = hashlib.sha256(
        f"{program._native.digest}:{program._native.gradient_digest or ''}".encode()
    ).hexdigest()[:16]
    base = _identifier(program.name, "program")[:48]
    return f"{base}_{digest}"


def op(program: Program) -> Op:
    """The PyTorch custom operator of ``program`` (an ``ovl.Program``, see ``ovl.load``),
    defined on first use: one per program (by name and digest), however often it is loaded.
    Loads (compiles) the bundle's gradient program too when it has one."""
    if not isinstance(program, Program):
        raise TypeError(f"ovl.torch.op takes an ovl.Program (ovl.load(path)), not a "
                        f"{type(program).__name__}")
    name = _name(program)
    with _lock:
        found = _ops.get(name)
        if found is None:
            found = _ops[name] = Op(name, program)
        return found

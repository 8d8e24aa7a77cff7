"""Call ovl programs exported from Rust as TensorFlow ops.

An ovl program is exported in Rust with ``ovl::as_tensorflow(inputs, outputs).write(path)``:
a JSON bundle holding the fused operator graph (``ovl.ir.Program``), the names, dtypes and
shapes of its inputs and outputs, and optionally a gradient program. ``load(path)`` returns a
callable that runs it as TensorFlow's ``DynamicLib`` op, eagerly or inside ``tf.function``,
with static output shapes; ``tf.GradientTape`` differentiates through it when the bundle has a
gradient. The op carries the program, so a SavedModel that uses it runs in any process that
has loaded the bridge library (the program is compiled into that process's operator cache on
first use).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import threading
from pathlib import Path
from typing import Optional, Sequence

import tensorflow as tf

__all__ = [
    "BUNDLE_FORMAT",
    "BundleError",
    "Program",
    "dynamic_lib",
    "library_path",
    "load",
    "load_library",
]

BUNDLE_FORMAT = "ovl-tensorflow-bundle"
_BUNDLE_VERSION = 2
# A sealed program: this header, the SHA-256 digest of the protobuf bytes, those bytes (the same
# constant as ovl::export::SEALED_PROGRAM_HEADER in Rust).
_SEALED_PROGRAM_HEADER = b"ovl.ir.Program sha256 v1\n"
_DIGEST_BYTES = 32
_LIBRARY_NAME = "libovl_tf_bridge.so"

_lock = threading.Lock()
_module = None


def library_path() -> Path:
    """Where the bridge library is: ``$OVL_TF_LIBRARY``, else next to this package, else the
    repository's ``target/release`` or ``target/debug`` (for an editable install)."""
    env = os.environ.get("OVL_TF_LIBRARY")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parent
    candidates = [here / _LIBRARY_NAME]
    for parent in here.parents:
        if (parent / "Cargo.toml").is_file() and (parent / "target").is_dir():
            candidates += [
                parent / "target" / "release" / _LIBRARY_NAME,
                parent / "target" / "debug" / _LIBRARY_NAME,
            ]
            break
    for c in candidates:
        if c.is_file():
            return c
    raise FileNotFoundError(
        "the ovl TensorFlow bridge library was not found (looked in: "
        + ", ".join(str(c) for c in candidates)
        + "); build it with `cargo build --release -p ovl-tf-bridge` or set OVL_TF_LIBRARY"
    )


def load_library(path: Optional[os.PathLike] = None):
    """Loads the bridge library (once per process) with ``tf.load_op_library``, which
    registers the ``DynamicLib`` op and its kernel, and registers the op's gradient. Returns the
    op module (its ``dynamic_lib`` function is the raw op)."""
    global _module
    with _lock:
        if _module is None:
            _module = tf.load_op_library(str(path or library_path()))
            _register_gradient()
        return _module


def dynamic_lib(
    inputs: Sequence,
    program: bytes,
    out_types: Sequence,
    out_shapes: Sequence,
    gradient: bytes = b"",
    name: Optional[str] = None,
):
    """The raw ``DynamicLib`` op: runs the sealed ``program`` on ``inputs`` and returns the
    list of outputs, with the static shapes ``out_shapes`` set. No checks beyond the kernel's."""
    return _call_op(
        list(inputs),
        program,
        [tf.as_dtype(t) for t in out_types],
        [tf.TensorShape(s) for s in out_shapes],
        gradient,
        name,
    )


def _call_op(inputs, program, out_types, out_shapes, gradient, name):
    module = _module or load_library()
    outputs = list(
        module.dynamic_lib(
            inputs=inputs,
            out_types=out_types,
            out_shapes=out_shapes,
            program=program,
            gradient=gradient,
            name=name,
        )
    )
    if not tf.executing_eagerly():
        # The C shape function cannot read `out_shapes`: set the static shapes here.
        for t, s in zip(outputs, out_shapes):
            t.set_shape(s)
    return outputs


class BundleError(ValueError):
    """A bundle file whose contents cannot be used (see the package documentation)."""


def _sealed_problem(sealed: bytes) -> Optional[str]:
    """Why sealed program bytes are not intact (header and SHA-256 digest, checked before
    anything decodes them), or None."""
    if not sealed.startswith(_SEALED_PROGRAM_HEADER):
        return (
            "it does not start with the header of a sealed ovl program (or an older ovl "
            "exported it)"
        )
    rest = sealed[len(_SEALED_PROGRAM_HEADER) :]
    if len(rest) < _DIGEST_BYTES:
        return f"it is truncated ({len(sealed)} bytes, shorter than its header and digest)"
    if hashlib.sha256(rest[_DIGEST_BYTES:]).digest() != rest[:_DIGEST_BYTES]:
        return "its SHA-256 digest does not match its contents"
    return None


class Program:
    """An exported ovl program, callable on tensors (see ``load``)."""

    def __init__(self, bundle: dict, source: str = "<bundle>"):
        if bundle.get("format") != BUNDLE_FORMAT:
            raise ValueError(f"{source} is not an ovl TensorFlow bundle")
        if bundle.get("version") != _BUNDLE_VERSION:
            raise ValueError(
                f"{source} has bundle version {bundle.get('version')}, "
                f"this ovl_tf reads version {_BUNDLE_VERSION}"
            )
        try:
            self.name: str = bundle["name"]
            self.inputs = [
                (i["name"], tf.as_dtype(i["dtype"]), tf.TensorShape(i["shape"]))
                for i in bundle["inputs"]
            ]
            self.outputs = [
                (tf.as_dtype(o["dtype"]), tf.TensorShape(o["shape"])) for o in bundle["outputs"]
            ]
            self.kernels: int = bundle.get("kernels", 0)
            self.program: bytes = base64.b64decode(bundle["program"], validate=True)
            grad = bundle.get("gradient")
            self.gradient: bytes = base64.b64decode(grad, validate=True) if grad else b""
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{source} is not a valid ovl bundle: {e!r}") from e
        for what, sealed in (("program", self.program), ("gradient program", self.gradient)):
            problem = sealed and _sealed_problem(sealed)
            if problem:
                raise BundleError(
                    f"bundle \"{source}\": the {what} was modified or corrupted: {problem}; "
                    "export it again"
                )
        self._out_types = [d for d, _ in self.outputs]
        self._out_shapes = [s.as_list() if s.rank is not None else None for _, s in self.outputs]
        self._op_name = _op_name(self.name)

    @property
    def has_gradient(self) -> bool:
        return bool(self.gradient)

    def __repr__(self) -> str:
        ins = ", ".join(f"{n}: {d.name}{s}" for n, d, s in self.inputs)
        outs = ", ".join(f"{d.name}{s}" for d, s in self.outputs)
        return f"<ovl_tf.Program {self.name}({ins}) -> ({outs})>"

    def _convert(self, k: int, x):
        name, dtype, shape = self.inputs[k]
        if isinstance(x, tf.Tensor) and x.dtype == dtype and x.shape == shape:
            return x  # the common case, checked cheaply
        if isinstance(x, (tf.Tensor, tf.Variable)) or hasattr(x, "dtype") and hasattr(
            x, "shape"
        ) and not isinstance(x, (list, tuple)):
            t = tf.convert_to_tensor(x)
            if t.dtype != dtype:
                raise TypeError(
                    f"ovl program `{self.name}`: input {k} (`{name}`) has dtype "
                    f"{t.dtype.name}, the program was exported for {dtype.name}"
                )
        else:
            t = tf.convert_to_tensor(x, dtype=dtype)
        if not t.shape.is_compatible_with(shape):
            raise ValueError(
                f"ovl program `{self.name}`: input {k} (`{name}`) has shape {t.shape}, "
                f"the program was exported for {shape}"
            )
        return t

    def __call__(self, *args, name: Optional[str] = None):
        """Runs the program. Returns one tensor, or a list when it has several outputs."""
        if len(args) != len(self.inputs):
            names = ", ".join(n for n, _, _ in self.inputs)
            raise TypeError(
                f"ovl program `{self.name}` takes {len(self.inputs)} inputs ({names}), "
                f"{len(args)} given"
            )
        inputs = [self._convert(k, x) for k, x in enumerate(args)]
        outputs = _call_op(
            inputs,
            self.program,
            self._out_types,
            self._out_shapes,
            self.gradient,
            name or self._op_name,
        )
        return outputs[0] if len(outputs) == 1 else outputs


def _op_name(name: str) -> str:
    """A valid TensorFlow op name made from a program's name."""
    name = re.sub(r"[^A-Za-z0-9_.\-]", "_", name)
    return name if re.match(r"[A-Za-z0-9.]", name) else "ovl_" + name


def load(path: os.PathLike) -> Program:
    """Reads a bundle file written by ``ovl::as_tensorflow(..).write(path)``, and loads the
    bridge library if it is not loaded yet."""
    with open(path, "r", encoding="utf-8") as f:
        try:
            bundle = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path} is not an ovl bundle (not JSON: {e})") from e
    program = Program(bundle, str(path))
    load_library()
    return program


def _register_gradient():
    try:
        tf.RegisterGradient("DynamicLib")(_dynamic_lib_gradient)
    except KeyError:
        pass  # registered before (the module was reloaded)


def _dynamic_lib_gradient(op, *grads):
    """The gradient of ``DynamicLib``: another ``DynamicLib`` running the gradient program on
    the forward inputs followed by the gradients flowing into each output (zeros where none
    flows). It returns one gradient per forward input; integer and bool inputs get ``None``."""
    gradient = op.get_attr("gradient")
    if not gradient:
        raise LookupError(
            "DynamicLib: this ovl program has no gradient; export it with "
            "`TfExport::gradient` to differentiate through it"
        )
    problem = _sealed_problem(gradient)
    if problem:
        raise tf.errors.InvalidArgumentError(
            None,
            None,
            f"DynamicLib: the `gradient` attribute: the program was modified or corrupted: "
            f"{problem}; export it again",
        )
    upstream = [
        tf.zeros_like(out) if g is None else tf.convert_to_tensor(g)
        for g, out in zip(grads, op.outputs)
    ]
    inputs = list(op.inputs)
    results = dynamic_lib(
        inputs + upstream,
        gradient,
        [x.dtype for x in inputs],
        [x.shape for x in inputs],
    )
    return [g if x.dtype.is_floating else None for g, x in zip(results, inputs)]

"""Call ovl programs exported from Rust as TensorFlow ops.

An ovl program is exported in Rust with ``ovl::as_tensorflow(inputs, outputs).write(path)``:
a JSON bundle holding the fused operator graph (``ovl.ir.Program``), the names, dtypes and
shapes of its inputs and outputs, and optionally a gradient program. ``load(path)`` returns a
callable that runs it as TensorFlow's ``DynamicLib`` op, eagerly or inside ``tf.function``,
with static output shapes; ``tf.GradientTape`` differentiates through it when the bundle has a
gradient. The op carries the program, so a SavedModel that uses it runs in any process that
has loaded the bridge library (the program is compiled into that process's operator cache on
first use). The programs are sealed with a SHA-256 digest, checked before anything decodes them
(here when a bundle is loaded, in the kernel when the op is built): an edited or corrupted
program is an error, never another program.

A bundle exported with ``TfExport::embed_libraries(true)`` also carries the compiled library of
each operator for the exporting machine (inside the sealed program): a machine with the same
target, CPU features and ovl version runs it without a C++ compiler; any other compiles the
program as usual.

``tf.vectorized_map`` (also with ``fallback_to_while_loop=False``) and
``GradientTape.jacobian``/``batch_jacobian`` vectorize the op: importing ``ovl_tf`` registers a
pfor converter that runs one ``DynamicLib`` on the program batched over the loop (see
``ovl_tf._pfor``; a loop length known only at run time works too).

``ovl_tf.Layer`` wraps a bundle as a Keras 3 layer (some inputs can be its trainable weights);
a ``.keras`` file saved from a model that uses it embeds the bundle and reloads in any process
that has imported ``ovl_tf``. The op's gradient is registered when ``ovl_tf`` is imported, so it
is there however the bridge library is loaded afterwards. The bridge library is looked for
inside this package first (a wheel or ``pip install ./ovl-tf-bridge/python`` puts it there),
then at ``$OVL_TF_LIBRARY``, then in the repository's ``target/`` (see ``library_path``).

Errors
------
``ovl_tf`` raises these, always with a message that names the bundle file or the program and
the input concerned:

- ``ovl_tf.BundleError`` (a subclass of ``ValueError``), from ``load`` and ``Program``: the
  bundle file's contents cannot be used. It is not UTF-8 text (a binary file), not JSON, JSON
  that is not an object (an array, a number), another format or bundle version, a missing field
  or one of the wrong type (``name``, ``inputs``, ``outputs``, their ``name``/``dtype``/``shape``,
  ``program``, ``gradient``), invalid base64, or a program or gradient program that was modified
  or corrupted (its digest does not match). The message starts with ``bundle "<path>":``.
- ``OSError`` (``FileNotFoundError``, ``IsADirectoryError``, ...), from ``load``: the file
  cannot be read; also when the bridge library is not found.
- Calling a ``Program``: ``TypeError`` when the number of arguments is wrong, or an argument has
  another dtype than the input it is passed for (or cannot be converted to it); ``ValueError``
  when an argument has the right dtype but a static shape that does not fit the input. This
  follows Python's convention (``TypeError``: the wrong kind or number of arguments;
  ``ValueError``: the right kind with a wrong value) and is the same eagerly and while
  ``tf.function`` traces.
- ``tf.errors.InvalidArgumentError``, from the op when it runs: a shape known only at run time
  that does not fit (inside ``tf.function`` with unknown dimensions), an index out of bounds in
  the program, or a ``program``/``gradient`` attribute that was modified or corrupted;
  ``tf.errors.FailedPreconditionError`` when the program cannot be compiled (no C++ compiler),
  also when it carries compiled libraries for another machine (the message says both).
- ``LookupError``, from ``tf.GradientTape.gradient``: the program was exported without a
  gradient ("ovl program `X` has no gradient; ..."), or a nested tape differentiates it twice
  ("the gradient program of `X` has no gradient; ..."): ovl exports first derivatives only.
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
    "Layer",
    "Program",
    "dynamic_lib",
    "library_path",
    "load",
    "load_library",
]

# These three mirror ovl::export::{BUNDLE_FORMAT, BUNDLE_VERSION} and
# ovl::program::SEALED_PROGRAM_HEADER, the source of truth; ovl-tf-bridge/tests/python_constants.rs checks that they agree.
BUNDLE_FORMAT = "ovl-tensorflow-bundle"
_BUNDLE_VERSION = 2
# A sealed program: this header, the SHA-256 digest of the protobuf bytes, those bytes.
_SEALED_PROGRAM_HEADER = b"ovl.ir.Program sha256 v1\n"
_DIGEST_BYTES = 32
_LIBRARY_NAME = "libovl_tf_bridge.so"

_lock = threading.Lock()
_module = None
_module_path: Optional[str] = None


def _packaged_library() -> Optional[Path]:
    """The bridge library installed inside this package (a wheel or ``pip install`` builds it
    as ``_bridge.<python tag>.so``; a ``libovl_tf_bridge.so`` copied next to the package also
    counts), or None."""
    here = Path(__file__).resolve().parent
    found = sorted(here.glob("_bridge*.so")) + [here / _LIBRARY_NAME]
    return next((p for p in found if p.is_file()), None)


def library_path() -> Path:
    """Where the bridge library is, in this order: inside the installed package (a wheel, or
    ``pip install ./ovl-tf-bridge/python``), else ``$OVL_TF_LIBRARY``, else the repository's
    ``target/release`` or ``target/debug`` (a checkout used through ``PYTHONPATH`` or an
    editable install that did not build it). ``FileNotFoundError`` names every place looked
    at when none has it."""
    packaged = _packaged_library()
    if packaged is not None:
        return packaged
    env = os.environ.get("OVL_TF_LIBRARY")
    if env:
        if not Path(env).is_file():
            raise FileNotFoundError(
                f"the ovl TensorFlow bridge library named by OVL_TF_LIBRARY ({env}) does not "
                "exist; build it with `cargo build --release -p ovl-tf-bridge` or install the "
                "package with `pip install ./ovl-tf-bridge/python`"
            )
        return Path(env)
    here = Path(__file__).resolve().parent
    candidates = [here / "_bridge*.so", here / _LIBRARY_NAME]
    for parent in here.parents:
        if (parent / "Cargo.toml").is_file() and (parent / "target").is_dir():
            candidates += [
                parent / "target" / "release" / _LIBRARY_NAME,
                parent / "target" / "debug" / _LIBRARY_NAME,
            ]
            break
    for c in candidates[2:]:
        if c.is_file():
            return c
    raise FileNotFoundError(
        "the ovl TensorFlow bridge library was not found (looked in: "
        + ", ".join(str(c) for c in candidates)
        + ", and OVL_TF_LIBRARY is not set); install the package with `pip install "
        "./ovl-tf-bridge/python` (it builds the library with cargo), or build it with "
        "`cargo build --release -p ovl-tf-bridge` and set OVL_TF_LIBRARY"
    )


def load_library(path: Optional[os.PathLike] = None):
    """Loads the bridge library (once per process) with ``tf.load_op_library``, which
    registers the ``DynamicLib`` op and its kernel, and registers the op's gradient. Returns the
    op module (its ``dynamic_lib`` function is the raw op)."""
    global _module, _module_path
    with _lock:
        if _module is None:
            file = str(path or library_path())
            _module = tf.load_op_library(file)
            _module_path = file
            _register_gradient()
        return _module


def _library_file() -> str:
    """The file ``load_library`` loaded (call it first)."""
    load_library()
    return _module_path


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


def _call_op(inputs, program, out_types, out_shapes, gradient, name, static_shapes=None):
    """Calls the op with the ``out_shapes`` attribute (``None`` for a size known only at run
    time) and sets ``static_shapes`` (default: ``out_shapes``) on the outputs in a graph."""
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
        for t, s in zip(outputs, out_shapes if static_shapes is None else static_shapes):
            t.set_shape(s)
    return outputs


class BundleError(ValueError):
    """A bundle file whose contents cannot be used (see the package documentation). The
    message starts with ``bundle "<path>":``."""


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


def _json_kind(value) -> str:
    """What a JSON value is, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


class _BundleReader:
    """Reads the fields of a parsed bundle, raising ``BundleError`` for anything missing or of
    the wrong type."""

    def __init__(self, bundle, source: str):
        # Per tensor path ("inputs[0]"), its run-time sizes (see `symbolic`).
        self.symbolic_dims = {}
        self.source = source
        if not isinstance(bundle, dict):
            raise self.error(
                f"the file holds {_json_kind(bundle)}, not an object: it is not an ovl "
                "TensorFlow bundle"
            )
        self.bundle = bundle

    def error(self, message: str) -> BundleError:
        return BundleError(f'bundle "{self.source}": {message}')

    def get(self, obj: dict, key: str, path: str, kinds, kind: str, required: bool = True):
        if key not in obj:
            if required:
                raise self.error(f'the field "{path}" is missing')
            return None
        value = obj[key]
        if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
            raise self.error(f'the field "{path}" must be {kind}, not {_json_kind(value)}')
        return value

    def tensor(self, value, path: str, named: bool):
        if not isinstance(value, dict):
            raise self.error(f'the field "{path}" must be an object, not {_json_kind(value)}')
        name = self.get(value, "name", f"{path}.name", (str,), "a string") if named else None
        dtype_name = self.get(value, "dtype", f"{path}.dtype", (str,), "a string")
        try:
            dtype = tf.as_dtype(dtype_name)
        except TypeError:
            raise self.error(
                f'the field "{path}.dtype" is {dtype_name!r}, not a TensorFlow dtype'
            ) from None
        shape = self.get(value, "shape", f"{path}.shape", (list,), "an array of sizes")
        if not all(
            d is None or isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
        ):
            raise self.error(
                f'the field "{path}.shape" must hold sizes (integers >= 0, or null for a size '
                f"known only at run time), not {shape!r}"
            )
        symbolic = self.symbolic(value, path, shape)
        self.symbolic_dims[path] = symbolic
        shape = tf.TensorShape(shape)
        return (name, dtype, shape) if named else (dtype, shape)

    def symbolic(self, value: dict, path: str, shape: list):
        """The run-time sizes of a tensor: ``[(dim, symbol, scale, offset)]``, one per ``null``
        in its shape."""
        dims = self.get(
            value, "symbolic", f"{path}.symbolic", (list,), "an array", required=False
        ) or []
        out = []
        for k, d in enumerate(dims):
            where = f"{path}.symbolic[{k}]"
            if not isinstance(d, dict):
                raise self.error(f'the field "{where}" must be an object')
            fields = [
                self.get(d, f, f"{where}.{f}", (int,), "an integer")
                for f in ("dim", "symbol", "scale", "offset")
            ]
            dim, symbol, scale, _ = fields
            if not 0 <= dim < len(shape) or shape[dim] is not None or scale < 1 or symbol < 0:
                raise self.error(f'the field "{where}" does not fit the shape {shape!r}')
            out.append(tuple(fields))
        if sorted(d for d, *_ in out) != [k for k, d in enumerate(shape) if d is None]:
            raise self.error(
                f'the field "{path}.shape" has a null size that "{path}.symbolic" does not '
                "describe (or the other way round)"
            )
        return out

    def tensors(self, key: str, named: bool):
        values = self.get(self.bundle, key, key, (list,), "an array")
        return [self.tensor(v, f"{key}[{k}]", named) for k, v in enumerate(values)]

    def sealed(self, key: str, what: str, required: bool) -> bytes:
        text = self.get(
            self.bundle, key, key, (str, type(None)), "a base64 string", required=required
        )
        if text is None:
            if required:
                raise self.error(f'the field "{key}" must be a base64 string, not null')
            return b""
        try:
            data = base64.b64decode(text, validate=True)
        except ValueError as e:
            raise self.error(f'the field "{key}" is not valid base64 ({e})') from None
        problem = _sealed_problem(data)
        if problem:
            raise self.error(
                f"the {what} was modified or corrupted: {problem}; export it again"
            )
        return data


class Program:
    """An exported ovl program, callable on tensors (see ``load``). ``bundle`` is the parsed
    bundle file (``source`` names it in errors); anything wrong with it is a ``BundleError``."""

    def __init__(self, bundle: dict, source: str = "<bundle>"):
        r = _BundleReader(bundle, source)
        self.bundle: dict = bundle
        fmt = bundle.get("format")
        if fmt != BUNDLE_FORMAT:
            raise r.error(
                f'it is not an ovl TensorFlow bundle (its "format" is {fmt!r}, not '
                f"{BUNDLE_FORMAT!r})"
            )
        version = bundle.get("version")
        if version != _BUNDLE_VERSION:
            raise r.error(
                f"it has bundle version {version!r}, this ovl_tf reads version "
                f"{_BUNDLE_VERSION}: export it again with this version of ovl"
            )
        self.name: str = r.get(bundle, "name", "name", (str,), "a string")
        self.inputs = r.tensors("inputs", named=True)
        self.outputs = r.tensors("outputs", named=False)
        if not self.outputs:
            raise r.error('the field "outputs" is empty: a program has at least one output')
        self.kernels: int = r.get(
            bundle, "kernels", "kernels", (int,), "an integer", required=False
        ) or 0
        self.program: bytes = r.sealed("program", "program", required=True)
        self.gradient: bytes = r.sealed("gradient", "gradient program", required=False)
        if self.gradient:
            _gradient_of[_digest(self.gradient)] = self.name
        self._out_types = [d for d, _ in self.outputs]
        self._out_shapes = [s.as_list() if s.rank is not None else None for _, s in self.outputs]
        self._op_name = _op_name(self.name)
        # Sizes known only at run time (e.g. the batch): per input and output, its
        # [(dim, symbol, scale, offset)]; `symbols` names them.
        self.symbols: list = r.get(bundle, "symbols", "symbols", (list,), "an array",
                                   required=False) or []
        self._in_symbolic = [r.symbolic_dims[f"inputs[{k}]"] for k in range(len(self.inputs))]
        self._out_symbolic = [
            r.symbolic_dims[f"outputs[{k}]"] for k in range(len(self.outputs))
        ]

    @property
    def has_gradient(self) -> bool:
        return bool(self.gradient)

    def __repr__(self) -> str:
        ins = ", ".join(f"{n}: {d.name}{s}" for n, d, s in self.inputs)
        outs = ", ".join(f"{d.name}{s}" for d, s in self.outputs)
        return f"<ovl_tf.Program {self.name}({ins}) -> ({outs})>"

    def _convert(self, k: int, x):
        """Argument ``k`` as a tensor of input ``k``'s dtype: ``TypeError`` for another dtype
        (or a value that does not convert), ``ValueError`` for a static shape that does not
        fit (see the package documentation)."""
        name, dtype, shape = self.inputs[k]
        if isinstance(x, tf.Tensor) and x.dtype == dtype and x.shape == shape:
            return x  # the common case, checked cheaply
        where = f"ovl program `{self.name}`: input {k} (`{name}`)"
        if isinstance(x, (tf.Tensor, tf.Variable)) or hasattr(x, "dtype") and hasattr(
            x, "shape"
        ) and not isinstance(x, (list, tuple)):
            try:
                t = tf.convert_to_tensor(x)
            except (TypeError, ValueError) as e:
                raise TypeError(f"{where}: cannot be converted to a tensor: {e}") from None
            if t.dtype != dtype:
                raise TypeError(
                    f"{where} has dtype {t.dtype.name}, the program was exported for "
                    f"{dtype.name}"
                )
        else:
            try:
                t = tf.convert_to_tensor(x, dtype=dtype)
            except (TypeError, ValueError) as e:
                raise TypeError(
                    f"{where}: {type(x).__name__} value cannot be converted to a {dtype.name} "
                    f"tensor: {e}"
                ) from None
        if not t.shape.is_compatible_with(shape):
            raise ValueError(
                f"ovl program `{self.name}`: input {k} (`{name}`) has shape {t.shape}, "
                f"the program was exported for {shape}"
            )
        return t

    def _static_out_shapes(self, inputs):
        """The outputs' static shapes for these inputs: a size known only at run time is taken
        from an input's static shape when one determines it, else left unknown (``None``)."""
        if not self.symbols:
            return self._out_shapes
        values = {}
        for x, dims in zip(inputs, self._in_symbolic):
            static = x.shape.as_list() if x.shape.rank is not None else None
            for dim, symbol, scale, offset in dims:
                n = static[dim] if static is not None else None
                if n is not None and (n - offset) % scale == 0 and n >= offset:
                    values.setdefault(symbol, (n - offset) // scale)
        shapes = []
        for shape, dims in zip(self._out_shapes, self._out_symbolic):
            shape = list(shape)
            for dim, symbol, scale, offset in dims:
                v = values.get(symbol)
                shape[dim] = None if v is None else scale * v + offset
            shapes.append(shape)
        return shapes

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
            static_shapes=self._static_out_shapes(inputs),
        )
        return outputs[0] if len(outputs) == 1 else outputs


def _op_name(name: str) -> str:
    """A valid TensorFlow op name made from a program's name."""
    name = re.sub(r"[^A-Za-z0-9_.\-]", "_", name)
    return name if re.match(r"[A-Za-z0-9.]", name) else "ovl_" + name


def load(path: os.PathLike) -> Program:
    """Reads a bundle file written by ``ovl::as_tensorflow(..).write(path)``, and loads the
    bridge library if it is not loaded yet. A file that cannot be read is an ``OSError``, one
    whose contents are not a usable bundle a ``BundleError`` (see the package documentation)."""
    source = os.fspath(path)
    with open(path, "rb") as f:
        data = f.read()

    def error(message: str) -> BundleError:
        return BundleError(
            f'bundle "{source}": {message}: it is not an ovl TensorFlow bundle (a JSON file)'
        )

    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(
            f"not text (byte {e.start} is 0x{data[e.start]:02x}, invalid in UTF-8; a binary "
            "file?)"
        ) from None
    try:
        bundle = json.loads(text)
    except json.JSONDecodeError as e:
        raise error(f"not JSON ({e})") from None
    program = Program(bundle, source)
    load_library()
    return program


def _register_gradient():
    try:
        tf.RegisterGradient("DynamicLib")(_dynamic_lib_gradient)
    except KeyError:
        pass  # registered before (the module was reloaded)


# The digest of each gradient program seen in this process (loaded with a bundle, or run by
# `_dynamic_lib_gradient`) -> the name of the program it differentiates: a nested tape that
# differentiates a gradient op is told so.
_gradient_of: dict = {}

# Gradient programs (their sealed bytes) whose digest `_dynamic_lib_gradient` checked already in
# this process: a backward pass under `tf.GradientTape` checks each one once, not at every call.
# Emptied when it reaches `_VERIFIED_GRADIENTS_MAX` programs.
_verified_gradients: set = set()
_VERIFIED_GRADIENTS_MAX = 256


def _digest(sealed: bytes) -> bytes:
    """The digest inside a sealed program (empty for bytes too short to hold one)."""
    return sealed[len(_SEALED_PROGRAM_HEADER) : len(_SEALED_PROGRAM_HEADER) + _DIGEST_BYTES]


def _program_name(sealed: bytes) -> Optional[str]:
    """The `name` field (2) of the ovl.ir.Program inside a sealed program, read without a
    protobuf library; None when it cannot be read."""
    data = sealed[len(_SEALED_PROGRAM_HEADER) + _DIGEST_BYTES :]
    pos = 0

    def varint():
        nonlocal pos
        value, shift = 0, 0
        while pos < len(data) and shift < 64:
            b = data[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value
            shift += 7
        raise ValueError("truncated varint")

    try:
        while pos < len(data):
            tag = varint()
            field, wire = tag >> 3, tag & 7
            if wire == 0:
                varint()
            elif wire == 2:
                n = varint()
                if field == 2:
                    return data[pos : pos + n].decode("utf-8", "replace")
                pos += n
            elif wire in (1, 5):
                pos += 8 if wire == 1 else 4
            else:
                return None
    except ValueError:
        return None
    return None


def _dynamic_lib_gradient(op, *grads):
    """The gradient of ``DynamicLib``: another ``DynamicLib`` running the gradient program on
    the forward inputs followed by the gradients flowing into each output (zeros where none
    flows). It returns one gradient per forward input; integer and bool inputs get ``None``."""
    program = op.get_attr("program")
    gradient = op.get_attr("gradient")
    if not gradient:
        of = _gradient_of.get(_digest(program))
        if of is not None:
            raise LookupError(
                f"DynamicLib: the gradient program of `{of}` has no gradient; ovl exports "
                f"first derivatives only, so a nested tf.GradientTape cannot differentiate "
                f"`{of}` twice"
            )
        raise LookupError(
            f"DynamicLib: ovl program `{_program_name(program) or '?'}` has no gradient; "
            "export it with `TfExport::gradient` to differentiate through it"
        )
    if gradient not in _verified_gradients:
        problem = _sealed_problem(gradient)
        if problem:
            raise tf.errors.InvalidArgumentError(
                None,
                None,
                f"DynamicLib: the `gradient` attribute: the program was modified or corrupted: "
                f"{problem}; export it again",
            )
        _gradient_of[_digest(gradient)] = _program_name(program) or "?"
        if len(_verified_gradients) >= _VERIFIED_GRADIENTS_MAX:
            _verified_gradients.clear()
        _verified_gradients.add(gradient)
    upstream = [
        tf.zeros_like(out) if g is None else tf.convert_to_tensor(g)
        for g, out in zip(grads, op.outputs)
    ]
    inputs = list(op.inputs)
    # The inputs' dtypes and shapes are TensorFlow's own already: no conversion needed.
    results = _call_op(
        inputs + upstream,
        gradient,
        [x.dtype for x in inputs],
        [x.shape for x in inputs],
        b"",
        None,
    )
    return [g if x.dtype.is_floating else None for g, x in zip(results, inputs)]


# The gradient is registered when the package is imported (TensorFlow keys gradients by op type,
# not by library), so it is there however the bridge library is loaded afterwards: `load`,
# `load_library`, a `Layer` rebuilt from a `.keras` file, or `tf.load_op_library` in serving
# code that imported ovl_tf.
_register_gradient()

# The pfor converter (tf.vectorized_map, jacobians), registered on import like the gradient.
from . import _pfor  # noqa: E402

_pfor.register()

try:
    import keras as _keras

    _KERAS3 = _keras.__version__.split(".")[0] >= "3"
except ImportError:  # pragma: no cover - TensorFlow 2.16+ always brings Keras 3
    _keras = None
    _KERAS3 = False

if _KERAS3:
    from ._keras import Layer  # noqa: E402  (registered as "ovl_tf>Layer" on import)
else:  # pragma: no cover

    def __getattr__(name):
        if name == "Layer":
            raise ImportError("ovl_tf.Layer needs Keras 3 (`pip install keras>=3`)")
        raise AttributeError(f"module 'ovl_tf' has no attribute {name!r}")

"""Bundle files (the JSON that ``ovl::as_tensorflow(..).write(path)`` writes): their schema,
read with a ``BundleError`` for anything that cannot be used, and ``Program``, the callable a
bundle becomes."""

from __future__ import annotations

import base64
import json
import os
import re
from typing import Optional

import tensorflow as tf

from ._gradient import _gradient_of
from ._library import _call_op, load_library
from ._sealed import _digest, _sealed_problem

# These two mirror ovl::export::{BUNDLE_FORMAT, BUNDLE_VERSION}, the source of truth;
# ovl-tf-bridge/tests/python_constants.rs checks that they agree.
BUNDLE_FORMAT = "ovl-tensorflow-bundle"
_BUNDLE_VERSION = 2


class BundleError(ValueError):
    """A bundle file whose contents cannot be used (see the package documentation). The
    message starts with ``bundle "<path>":``."""


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

    def __call__(self, *args, **kwargs):
        """``program(*inputs, name=None)``: runs the program. Returns one tensor, or a list when
        it has several outputs. (``name`` is read from ``**kwargs``: ``tf.function`` of an object
        whose ``__call__`` has a keyword with a default binds it at every call, about 50 µs.)"""
        name: Optional[str] = kwargs.pop("name", None)
        if kwargs:
            raise TypeError(
                f"ovl program `{self.name}` takes the keyword argument `name` only, not "
                f"{', '.join(map(repr, kwargs))}"
            )
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

"""Finding and loading the bridge library (``tf.load_op_library``), and the raw op.

The bottom of the package: it imports none of the other ``ovl_tf`` modules. Two of them add to
what it does, connected by ``ovl_tf/__init__`` (``_connect``) when the package is imported:
``_kernel`` enables the C++ kernel once the library is loaded, and ``_xla`` checks each op built
into a graph (an XLA cluster needs ``enable_xla``)."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Optional, Sequence

import tensorflow as tf

_LIBRARY_NAME = "libovl_tf_bridge.so"

_lock = threading.Lock()
_module = None
_module_path: Optional[str] = None


def _nothing(_) -> None:
    pass


# Set by `_connect`: `_after_load` is called with the library's file once it is loaded (under the
# lock, before `load_library` returns; an exception leaves the library unloaded),
# `_check_graph_op` with the program of each op built into a graph.
_after_load = _nothing
_check_graph_op = _nothing


def _connect(after_load, check_graph_op) -> None:
    """Connects the modules above this one (see the module documentation)."""
    global _after_load, _check_graph_op
    _after_load = after_load
    _check_graph_op = check_graph_op


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
    registers the ``DynamicLib`` op and its C-API kernel, then the C++ kernel that replaces it
    when it compiles (``_kernel``, ``$OVL_TF_KERNEL``). Returns the op module (its
    ``dynamic_lib`` function is the raw op). The op's gradient is registered when ``ovl_tf`` is
    imported, before any load."""
    global _module, _module_path
    with _lock:
        if _module is None:
            file = str(path or library_path())
            module = tf.load_op_library(file)
            _after_load(file)
            _module = module
            _module_path = file
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
    if not tf.executing_eagerly():
        _check_graph_op(program)
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

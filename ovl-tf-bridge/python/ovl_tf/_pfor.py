"""The pfor converter of ``DynamicLib``: ``tf.vectorized_map`` and ``GradientTape.jacobian`` /
``batch_jacobian`` (``experimental_use_pfor=True``, the default) vectorize an ovl program
instead of running it once per example in a ``tf.while_loop``.

TensorFlow's pfor calls the converter for a ``DynamicLib`` op inside the loop body when some of
its inputs vary from one iteration to the next (are *stacked*: a leading axis of the loop
length). The converter asks the bridge library (``ovl_tf_batch_program``, through ``ctypes``)
for the program batched over that axis, ``ovl::program_batch::batch_sealed``: the stacked inputs gain
the leading axis, the loop-invariant ones stay shared, every operator that depends on a stacked
input runs once over the whole batch, the others once. It emits one ``DynamicLib`` op running
the batched program, with the batched gradient program as its gradient (so a gradient through
``tf.vectorized_map`` works). An output that depends on no stacked input is returned loop
invariant.

Batched programs are cached in the process per (sealed program, sealed gradient program,
stacked inputs, loop length).

A loop length known only at run time (``tf.vectorized_map`` inside a ``tf.function`` whose
input signature has a ``None`` batch, the usual per-example-gradient setup) is vectorized too:
the program is batched over a length known at run time (the symbol ``pfor``; its outputs have a
``None`` leading dimension), which the op determines from the stacked inputs when it runs. The
program may itself be exported for any batch size (``ovl::as_tensorflow_polymorphic``).

A program the library cannot batch raises pfor's ``ConversionNotImplementedError``, so that
pfor falls back to a while loop when it may (``fallback_to_while_loop=True``) and raises
``ValueError`` with the library's message otherwise.
"""

from __future__ import annotations

import ctypes
import threading

import tensorflow as tf
from tensorflow.python.framework import tensor_util
from tensorflow.python.ops.parallel_for import pfor as _pfor_lib

_OP_TYPE = "DynamicLib"


class _Batch(ctypes.Structure):
    """``OvlTfBatch`` in ``ovl-tf-bridge/src/batch.rs``."""

    _fields_ = [
        ("error", ctypes.c_char_p),
        ("program", ctypes.POINTER(ctypes.c_uint8)),
        ("program_len", ctypes.c_size_t),
        ("gradient", ctypes.POINTER(ctypes.c_uint8)),
        ("gradient_len", ctypes.c_size_t),
        ("batched_outputs", ctypes.POINTER(ctypes.c_uint8)),
        ("outputs", ctypes.c_size_t),
    ]


# The loop length ``ovl_tf_batch_program`` reads as "known only at run time"
# (``RUN_TIME_LENGTH`` in ``ovl-tf-bridge/src/batch.rs``).
RUN_TIME = 2**64 - 1

_lock = threading.Lock()
_functions = None
# (program, gradient program, stacked inputs, n) -> (program, gradient, batched outputs).
_cache: dict = {}
_CACHE_MAX = 256


def _library_functions(path: str):
    """``ovl_tf_batch_program`` and ``ovl_tf_free_batch`` of the bridge library at ``path``
    (already loaded by ``tf.load_op_library``: ``ctypes`` gets the same handle)."""
    global _functions
    with _lock:
        if _functions is None:
            lib = ctypes.CDLL(path)
            batch = lib.ovl_tf_batch_program
            batch.restype = ctypes.POINTER(_Batch)
            batch.argtypes = [
                ctypes.c_char_p,
                ctypes.c_size_t,
                ctypes.c_char_p,
                ctypes.c_size_t,
                ctypes.c_char_p,
                ctypes.c_size_t,
                ctypes.c_uint64,
            ]
            free = lib.ovl_tf_free_batch
            free.restype = None
            free.argtypes = [ctypes.POINTER(_Batch)]
            _functions = (batch, free)
        return _functions


def _bytes(ptr, length: int) -> bytes:
    return ctypes.string_at(ptr, length) if length else b""


def batch_program(program: bytes, gradient: bytes, stacked, n: int, library: str):
    """The sealed ``program`` and ``gradient`` (``b""``: none) batched over ``n`` examples
    (``None``: a number known only at run time), ``stacked[k]`` saying whether input ``k`` has
    the leading axis. Returns ``(program,
    gradient, batched_outputs)``; raises ``ValueError`` with the library's message when the
    program cannot be batched. Cached per process."""
    # Keyed by the whole sealed bytes, not their digest: a program whose bytes were altered
    # (its digest then does not match) must reach the library's check, not a cached result.
    n = RUN_TIME if n is None else int(n)
    key = (program, gradient, tuple(bool(s) for s in stacked), n)
    hit = _cache.get(key)
    if hit is not None:
        return hit
    batch, free = _library_functions(library)
    mask = bytes(1 if s else 0 for s in stacked)
    result = batch(program, len(program), gradient, len(gradient), mask, len(mask), n)
    try:
        r = result.contents
        if r.error is not None:
            raise ValueError(r.error.decode("utf-8", "replace"))
        value = (
            _bytes(r.program, r.program_len),
            _bytes(r.gradient, r.gradient_len),
            [bool(r.batched_outputs[k]) for k in range(r.outputs)],
        )
    finally:
        free(result)
    with _lock:
        if len(_cache) >= _CACHE_MAX:
            _cache.clear()
        _cache[key] = value
    return value


def _convert_dynamic_lib(pfor_input):
    """The pfor converter of ``DynamicLib`` (see the module documentation)."""
    from ._gradient import _gradient_of
    from ._library import _call_op, _library_file, load_library
    from ._sealed import _digest, _program_name

    op = pfor_input.op
    program = pfor_input.get_attr("program")
    gradient = pfor_input.get_attr("gradient")
    what = f"DynamicLib `{op.name}` (ovl program `{_program_name(program) or '?'}`)"
    n = tensor_util.constant_value(pfor_input.pfor.loop_len_vector)
    # None: the loop length is known only at run time.
    n = None if n is None else int(n[0])
    inputs = pfor_input.inputs
    if any(x.is_sparse_stacked for x in inputs):
        raise _pfor_lib.ConversionNotImplementedError(
            f"{what}: an input is a sparse tensor stacked by pfor; ovl programs take dense "
            "tensors"
        )
    stacked = [x.is_stacked for x in inputs]
    load_library()
    try:
        batched, batched_gradient, out_batched = batch_program(
            program, gradient, stacked, n, _library_file()
        )
    except ValueError as e:
        raise _pfor_lib.ConversionNotImplementedError(f"{what}: {e}") from None
    if batched_gradient:
        # A nested tape that differentiates the batched gradient op is told what it is.
        _gradient_of[_digest(batched_gradient)] = _program_name(batched) or "?"
    out_types = [t.dtype for t in op.outputs]
    out_shapes = [
        tf.TensorShape([n]).concatenate(tf.TensorShape(s)) if b else tf.TensorShape(s)
        for s, b in zip(pfor_input.get_attr("out_shapes"), out_batched)
    ]
    # The static shapes: the loop body's op's outputs (which may know sizes the attribute
    # leaves unknown) behind the loop length.
    static_shapes = [
        tf.TensorShape([n]).concatenate(t.shape) if b else t.shape
        for t, b in zip(op.outputs, out_batched)
    ]
    outputs = _call_op(
        [x.t for x in inputs],
        batched,
        out_types,
        out_shapes,
        batched_gradient,
        None,
        static_shapes=static_shapes,
    )
    return [_pfor_lib.wrap(t, b) for t, b in zip(outputs, out_batched)]


def register():
    """Registers the converter with pfor (once per process; a reloaded ``ovl_tf`` keeps the
    first registration, which calls the same functions)."""
    if _OP_TYPE not in _pfor_lib._pfor_converter_registry:
        _pfor_lib.RegisterPFor(_OP_TYPE)(_convert_dynamic_lib)

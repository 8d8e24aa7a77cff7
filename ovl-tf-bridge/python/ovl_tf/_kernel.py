"""The C++ CPU kernel of ``DynamicLib``, the fast path of every call.

The bridge library registers ``DynamicLib`` and a CPU kernel through TensorFlow's C API, which
wraps every input and output of every call in a heap-allocated ``TF_Tensor`` and cannot tell
TensorFlow's executor that a call is cheap: for a small program that costs more than the
program. ``load_library`` therefore also compiles ``kernel/dynamic_lib_kernel.cc`` against
TensorFlow's own headers (``tf.sysconfig``), once per TensorFlow version and compiler, into the
operator cache (``$OVL_CACHE_DIR``, else ``~/.cache/ovl``, under ``tf-kernel/``), loads it and
connects it to the bridge: a C++ ``OpKernel`` registered at a higher priority than the C-API
one, which hands TensorFlow's buffers and dimensions to the bridge directly and reports a
program with fixed shapes and no large kernel as cheap (``OpKernel::IsExpensive``), so that
TensorFlow runs it inline like its own elementwise ops.

``$OVL_TF_KERNEL`` chooses: ``auto`` (the default: the C++ kernel, else the C-API kernel with a
warning saying why, e.g. no C++ compiler), ``c++`` (the C++ kernel or an error) or ``c-api``
(the C-API kernel only). ``kernel_kind()`` says which one this process runs.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import warnings
from pathlib import Path
from typing import Optional

import tensorflow as tf

from ._library import _library_file, load_library
from ._xla import _build, _cache_root, _compiler

_HERE = Path(__file__).resolve().parent / "kernel"
_SOURCE = _HERE / "dynamic_lib_kernel.cc"
_CHOICES = ("auto", "c++", "c-api")

_kind: Optional[str] = None
_keep = []  # the ctypes handles, alive as long as the process


def kernel_kind() -> str:
    """Which CPU kernel of ``DynamicLib`` this process runs: ``"c++"`` (compiled against
    TensorFlow's headers by ``load_library``) or ``"c-api"`` (the bridge's own). Loads the
    bridge library first if needed."""
    load_library()
    return _kind or "c-api"


def _choice() -> str:
    given = os.environ.get("OVL_TF_KERNEL", "auto").strip().lower() or "auto"
    if given not in _CHOICES:
        raise ValueError(
            f"OVL_TF_KERNEL={given!r}: expected one of {', '.join(_CHOICES)} (the CPU kernel "
            "of DynamicLib: the C++ one when it compiles, the C++ one or an error, or the "
            "C-API one)"
        )
    return given


def _load(bridge_file: str) -> Path:
    """Compiles (once, cached) and loads the C++ kernel, and connects it to the bridge."""
    compiler = _compiler("ovl_tf: the C++ kernel of DynamicLib")
    flags = tf.sysconfig.get_compile_flags() + tf.sysconfig.get_link_flags()
    key = hashlib.sha256()
    for part in [tf.__version__, compiler, " ".join(flags)]:
        key.update(part.encode() + b"\0")
    key.update(_SOURCE.read_bytes())
    out = _cache_root() / "tf-kernel" / key.hexdigest()[:32] / "libovl_tf_kernel.so"
    if not out.is_file():
        _build(out, compiler, _SOURCE, flags, "compiling the C++ kernel of DynamicLib")
    bridge = ctypes.CDLL(bridge_file)
    entries = [bridge.ovl_tf_kernel_new, bridge.ovl_tf_kernel_compute, bridge.ovl_tf_kernel_delete]
    # Connected before TensorFlow loads it: no node can be constructed unconnected.
    shim = ctypes.CDLL(str(out))
    shim.ovl_tf_kernel_connect(*(ctypes.cast(f, ctypes.c_void_p) for f in entries))
    tf.load_op_library(str(out))
    _keep.extend([shim, bridge])
    return out


def _enable(bridge_file: str) -> None:
    """Called once by ``load_library`` after the bridge library is loaded (``ovl_tf/__init__``
    connects it)."""
    global _kind
    choice = _choice()
    if choice == "c-api":
        _kind = "c-api"
        return
    try:
        _load(bridge_file)
    except (RuntimeError, OSError, AttributeError, tf.errors.OpError) as e:
        if choice == "c++":
            raise RuntimeError(f"OVL_TF_KERNEL=c++: {e}") from e
        warnings.warn(
            f"ovl_tf: DynamicLib runs through its C-API kernel (slower per call): {e}",
            RuntimeWarning,
            stacklevel=3,
        )
        _kind = "c-api"
        return
    _kind = "c++"


def program_stats() -> dict:
    """This process's counts from the bridge's program sharing (ovl-tf-bridge/src/programs.rs):
    ``loads`` (programs a ``DynamicLib`` kernel loaded), ``reuses`` (kernels that took the
    program another live kernel loaded: the nodes of an unrolled cell, the gradient nodes of
    one program) and ``fixed_bindings`` (fixed-shape bindings made, once per loaded program)."""
    bridge = ctypes.CDLL(_library_file())
    out = (ctypes.c_uint64 * 3)()
    bridge.ovl_tf_program_stats(out)
    return {"loads": out[0], "reuses": out[1], "fixed_bindings": out[2]}

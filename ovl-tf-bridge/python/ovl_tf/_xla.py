"""``DynamicLib`` inside XLA clusters (``tf.function(jit_compile=True)``) on the CPU.

TensorFlow compiles an XLA cluster op by op through "XLA kernels" registered in C++; the C API
that the bridge library uses cannot register one. ``enable_xla`` therefore compiles a small C++
library against TensorFlow's own headers (``tf.sysconfig``; ``xla/dynamic_lib_xla.cc`` in this
package): an XLA kernel that lowers each ``DynamicLib`` to an XLA custom call, and the custom
call's target, which runs the op's program through the bridge library on XLA's buffers. The
library is built once per TensorFlow version and compiler into the operator cache
(``$OVL_CACHE_DIR``, else ``~/.cache/ovl``, under ``tf-xla/``) and loaded.

TensorFlow's pip package lacks two third-party headers that XLA's headers include
(highwayhash's and farmhash's); ``xla/stubs`` declares what those headers need from them
(nothing the library calls).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Optional

import tensorflow as tf

from ._library import _library_file, load_library

_lock = threading.Lock()
_enabled: Optional[Path] = None
_keep = []  # the ctypes handles, alive as long as the process

_HERE = Path(__file__).resolve().parent / "xla"


def xla_enabled() -> bool:
    """Whether ``enable_xla`` has loaded the XLA kernel of ``DynamicLib`` in this process."""
    return _enabled is not None


def _cache_root() -> Path:
    given = os.environ.get("OVL_CACHE_DIR")
    return Path(given) if given else Path.home() / ".cache" / "ovl"


def _compiler(what: str = "ovl_tf.enable_xla: the XLA kernel of DynamicLib") -> str:
    """The C++ compiler (``$CXX``, else ``c++``, ``g++``, ``clang++``) that builds ``what``."""
    for name in [os.environ.get("CXX"), "c++", "g++", "clang++"]:
        if name and shutil.which(name):
            return shutil.which(name)
    raise RuntimeError(
        f"{what}: no C++ compiler found (set CXX, or install g++ or clang++); it is compiled "
        "once per TensorFlow version"
    )


def _sources():
    files = [_HERE / "dynamic_lib_xla.cc"] + sorted((_HERE / "stubs").rglob("*.h"))
    return files


def _build(out: Path, compiler: str, source: Path, flags: list, what: str) -> None:
    """Compiles the C++ `source` against TensorFlow's headers (`flags`) into the shared library
    `out`, atomically (a temporary file renamed); `what` begins the error ("compiling ...")."""
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
    os.close(fd)
    command = [compiler, "-shared", "-fPIC", "-O2", "-w", "-o", tmp, str(source)] + flags
    try:
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(
                f"{what} against TensorFlow "
                f"{tf.__version__}'s headers failed ({' '.join(command)}):\n"
                + done.stderr[-4000:]
            )
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def enable_xla() -> Path:
    """Lets ``DynamicLib`` run inside ``tf.function(jit_compile=True)`` on the CPU: compiles
    (once, cached) and loads the XLA kernel of ``DynamicLib``, and returns its path.

    Call it before the process's first XLA compilation (TensorFlow registers XLA kernels
    once); calling it again does nothing. Inside an XLA cluster every input's shape must be
    static (XLA's own rule); a program with sizes given at run time is specialized to the
    cluster's shapes. Without a C++ compiler, or when TensorFlow's headers do not compile, it
    raises ``RuntimeError`` saying why."""
    global _enabled
    with _lock:
        if _enabled is not None:
            return _enabled
        load_library()
        compiler = _compiler()
        flags = (
            [f"-I{_HERE / 'stubs'}"]
            + tf.sysconfig.get_compile_flags()
            + tf.sysconfig.get_link_flags()
            + ["-l:libtensorflow_cc.so.2"]
        )
        key = hashlib.sha256()
        for part in [tf.__version__, compiler, " ".join(flags)]:
            key.update(part.encode() + b"\0")
        for f in _sources():
            key.update(f.read_bytes() + b"\0")
        out = _cache_root() / "tf-xla" / key.hexdigest()[:32] / "libovl_tf_xla.so"
        if not out.is_file():
            _build(
                out,
                compiler,
                _HERE / "dynamic_lib_xla.cc",
                flags,
                "ovl_tf.enable_xla: compiling the XLA kernel of DynamicLib",
            )
        tf.load_op_library(str(out))
        shim = ctypes.CDLL(str(out))
        bridge = ctypes.CDLL(_library_file())

        def address(fn):
            return ctypes.cast(fn, ctypes.c_void_p)

        shim.ovl_tf_xla_connect(
            address(bridge.ovl_tf_xla_prepare),
            address(bridge.ovl_tf_xla_free),
            address(bridge.ovl_tf_xla_output),
            address(bridge.ovl_tf_xla_run),
        )
        _keep.extend([shim, bridge])
        _enabled = out
        return out


def _in_xla_context() -> bool:
    """Whether the op being built goes into an XLA cluster (``jit_compile=True``)."""
    if tf.executing_eagerly():
        return False
    try:
        from tensorflow.python.framework import ops
        from tensorflow.python.ops import control_flow_util
    except ImportError:  # a TensorFlow without these internals: let XLA report it
        return False
    return control_flow_util.GraphOrParentsInXlaContext(ops.get_default_graph())


def _check_xla(program: bytes) -> None:
    """Raises a clear error for a ``DynamicLib`` built into an XLA cluster while the XLA kernel
    is not loaded."""
    if _enabled is None and _in_xla_context():
        from ._sealed import _program_name

        raise NotImplementedError(
            f"ovl program `{_program_name(program) or '?'}` inside tf.function(jit_compile=True): DynamicLib "
            "runs in XLA clusters only after ovl_tf.enable_xla() (call it once, before the "
            "process's first XLA compilation); or leave jit_compile off for the function that "
            "calls it"
        )

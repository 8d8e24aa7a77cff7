"""The C++ kernel of ovl's PyTorch ops (``_torch_kernel.cc``), compiled at run time.

A kernel registered from Python (``torch.library.Library.impl``) costs a trip through the
interpreter on every call: the dispatcher calls into Python, which calls the native module,
which calls back into torch for each attribute and for ``torch.empty``. The C++ kernel is a
boxed ``c10::OperatorKernel`` registered per op for the CPU and CUDA: it hands the inputs' data
pointers and shapes to the native module's ``ovl_torch_run`` (a C function, given by address)
and allocates the outputs with ``at::empty``. No Python runs in a call. Its CUDA branch (the
current stream, ``c10::cuda::getCurrentCUDAStream``) is compiled when torch was built with CUDA
and the CUDA runtime's headers are found (``cuda_headers()``: ``$CUDA_HOME``, the NVIDIA wheels
torch depends on, ``/usr/local/cuda``); without them a CUDA tensor is an error that says so.

It is compiled against the installed torch's headers (``torch.utils.cpp_extension``'s include
and library paths), once per torch version, compiler and source, into the operator cache
(``$OVL_CACHE_DIR``, else ``~/.cache/ovl``, under ``torch-kernel/``), and loaded with ctypes.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import List, Optional

import torch

from ._native import torch_kernel_address, torch_run_address

_SOURCE = Path(__file__).resolve().with_name("_torch_kernel.cc")
_library: Optional[ctypes.CDLL] = None


def _cache_root() -> Path:
    given = os.environ.get("OVL_CACHE_DIR")
    return Path(given) if given else Path.home() / ".cache" / "ovl"


def _compiler() -> str:
    for name in [os.environ.get("CXX"), "c++", "g++", "clang++"]:
        if name and shutil.which(name):
            return shutil.which(name)
    raise RuntimeError("no C++ compiler found (set CXX, or install g++ or clang++)")


def cuda_headers() -> Optional[Path]:
    """The directory holding the CUDA runtime's headers (``cuda_runtime_api.h``) for the C++
    kernel's CUDA branch, or ``None`` when torch has no CUDA or none is found."""
    if torch.version.cuda is None:
        return None
    candidates = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")]
    try:
        import nvidia  # the CUDA wheels torch depends on (nvidia/cu13, nvidia/cuda_runtime, ...)

        for root in list(getattr(nvidia, "__path__", [])):
            candidates += [str(p.parent) for p in Path(root).glob("*/include")]
    except ImportError:
        pass
    candidates.append("/usr/local/cuda")
    for c in candidates:
        if not c:
            continue
        for include in (Path(c) / "include", Path(c)):
            if (include / "cuda_runtime_api.h").is_file():
                return include
    return None


def _flags() -> List[str]:
    from torch.utils import cpp_extension

    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    flags = ["-std=c++20", f"-D_GLIBCXX_USE_CXX11_ABI={abi}"]
    flags += [f"-I{p}" for p in cpp_extension.include_paths()]
    libs = ["-lc10", "-ltorch_cpu"]
    cuda = cuda_headers()
    torch_lib = Path(torch.__file__).resolve().parent / "lib"
    if cuda is not None and (torch_lib / "libc10_cuda.so").is_file():
        flags += ["-DOVL_TORCH_CUDA", f"-I{cuda}"]
        libs.append("-lc10_cuda")
    for lib in cpp_extension.library_paths():
        flags += [f"-L{lib}", f"-Wl,-rpath,{lib}"]
    return flags + libs


def has_cuda() -> bool:
    """Whether the compiled kernel runs CUDA tensors (its CUDA branch was compiled)."""
    return "-DOVL_TORCH_CUDA" in _flags()


def _build(out: Path, compiler: str, flags: List[str]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
    os.close(fd)
    command = [compiler, "-shared", "-fPIC", "-O2", "-w", "-o", tmp, str(_SOURCE)] + flags
    try:
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(
                f"compiling ovl's C++ kernel for PyTorch {torch.__version__} failed "
                f"({' '.join(command)}):\n" + done.stderr[-4000:]
            )
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def library() -> ctypes.CDLL:
    """The compiled kernel library, built on first use (seconds to a minute) and cached."""
    global _library
    if _library is None:
        compiler = _compiler()
        flags = _flags()
        key = hashlib.sha256()
        for part in [torch.__version__, compiler, " ".join(flags)]:
            key.update(part.encode() + b"\0")
        key.update(_SOURCE.read_bytes())
        out = _cache_root() / "torch-kernel" / key.hexdigest()[:32] / "libovl_torch_kernel.so"
        if not out.is_file():
            _build(out, compiler, flags)
        lib = ctypes.CDLL(str(out))
        lib.ovl_torch_register.restype = ctypes.c_int
        lib.ovl_torch_register.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_void_p] * 2 + [
            ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t
        ]
        lib.ovl_torch_register_autograd.restype = ctypes.c_int
        lib.ovl_torch_register_autograd.argtypes = [ctypes.c_char_p] * 7 + [ctypes.c_size_t]
        _library = lib
    return _library


def register(namespace: str, name: str, kernel, input_dtypes, output_dtypes) -> None:
    """Registers ``kernel`` (a ``TorchKernel``, kept alive by the caller for the process) as
    the CPU and CUDA kernel of ``namespace::name`` through the C++ kernel."""
    lib = library()
    error = ctypes.create_string_buffer(4096)
    for key in ("CPU", "CUDA"):
        rc = lib.ovl_torch_register(
            namespace.encode(), name.encode(), key.encode(),
            torch_kernel_address(kernel), torch_run_address(),
            ",".join(input_dtypes).encode(), ",".join(output_dtypes).encode(),
            error, len(error),
        )
        if rc != 0:
            raise RuntimeError(f"registering ovl's C++ kernel of {namespace}::{name} "
                               f"for {key}: {error.value.decode(errors='replace')}")


def register_autograd(namespace: str, name: str, gradient: Optional[str], floating,
                      output_floating, no_gradient: str) -> None:
    """Registers the C++ autograd kernel of ``namespace::name``: below autograd when no input
    needs a gradient, else an autograd function whose backward calls ``namespace::gradient``
    (``None``: backward raises ``no_gradient``); ``floating`` and ``output_floating`` say which
    inputs and outputs are floating point (the others have no gradient)."""
    lib = library()
    error = ctypes.create_string_buffer(4096)
    bits = lambda flags: "".join("1" if f else "0" for f in flags).encode()  # noqa: E731
    rc = lib.ovl_torch_register_autograd(
        namespace.encode(), name.encode(), (gradient or "").encode(), bits(floating),
        bits(output_floating), no_gradient.encode(), error, len(error),
    )
    if rc != 0:
        raise RuntimeError(f"registering ovl's C++ autograd kernel of {namespace}::{name}: "
                           f"{error.value.decode(errors='replace')}")

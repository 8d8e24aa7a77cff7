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

Loading the bridge library also compiles (once per TensorFlow version and compiler, into the
operator cache) and loads a C++ CPU kernel of ``DynamicLib`` that TensorFlow picks over the
bridge's C-API kernel, because it costs less per call (see ``ovl_tf._kernel``); without a C++
compiler the C-API kernel runs, with a ``RuntimeWarning``. ``$OVL_TF_KERNEL`` (``auto``,
``c++``, ``c-api``) chooses, ``ovl_tf.kernel_kind()`` says which one runs; a bad value is a
``ValueError``, and ``c++`` without a working compiler a ``RuntimeError``.

``ovl_tf.enable_xla()`` lets the op run inside ``tf.function(jit_compile=True)`` on the CPU: it
compiles (once per TensorFlow version, into the operator cache) and loads an XLA kernel that
lowers ``DynamicLib`` to an XLA custom call (see ``ovl_tf._xla``). Without it, a ``DynamicLib``
traced into an XLA cluster raises ``NotImplementedError`` naming the program and the remedy.

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

__all__ = [
    "BUNDLE_FORMAT",
    "BundleError",
    "Layer",
    "Program",
    "dynamic_lib",
    "enable_xla",
    "kernel_kind",
    "library_path",
    "load",
    "load_library",
    "xla_enabled",
]

# The package by concern: `_library` (finding and loading the bridge library, the raw op),
# `_bundle` (the bundle schema, `Program`, `load`), `_sealed` (the sealed program format),
# `_kernel` (the C++ CPU kernel), `_gradient` (the op's gradient), `_pfor` (its pfor
# converter), `_keras` (`Layer`).
# Imports flow one way: `_library` imports none of the others, and what `_kernel` and `_xla` add
# to it (the C++ kernel after a load, the XLA check of an op in a graph) is connected here.
from ._bundle import BUNDLE_FORMAT, BundleError, Program, load  # noqa: E402
from ._gradient import _register_gradient  # noqa: E402
from ._library import _connect, _library_file, dynamic_lib, library_path, load_library  # noqa: E402
from ._kernel import _enable as _enable_kernel, kernel_kind  # noqa: E402
from ._xla import _check_xla, enable_xla, xla_enabled  # noqa: E402

_connect(after_load=_enable_kernel, check_graph_op=_check_xla)
del _connect, _enable_kernel, _check_xla

# The public names say they are the package's, as before it was split (tracebacks, pickling,
# help()).
for _public in (BundleError, Program, load, load_library, library_path, dynamic_lib):
    _public.__module__ = __name__
del _public


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

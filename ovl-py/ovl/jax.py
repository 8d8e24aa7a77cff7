"""ovl programs as JAX functions, through the XLA FFI: ``ovl.jax.op(program)``.

    import jax, ovl, ovl.jax

    cell = ovl.jax.op(ovl.load("lstm.json"))
    new_c, new_h = jax.jit(cell)(z, c)            # a custom call inside the compiled function
    dz = jax.grad(lambda z, c: cell(z, c)[1].sum())(z, c)   # the bundle's gradient program

The call is an XLA custom call (``jax.ffi.ffi_call``) to a typed-FFI handler in ovl's native
module, registered for the CPU and CUDA platforms: inside ``jit`` no Python runs per call. On
a GPU the program (compiled for it at its first GPU call) runs on XLA's stream of the call,
its outputs XLA's buffers, its scratch one block from XLA's allocator; the handler is not
marked safe for command buffers (it allocates from XLA's allocator per call), so XLA runs it
as its own step outside a captured command buffer. The custom
call's ``program`` attribute names the program in a registry of the process (a small integer);
output shapes come from the program's types, a polymorphic program's batch bound from the
inputs' shapes at trace time.

- ``grad``/``vjp``: a ``jax.custom_vjp`` whose backward pass calls the bundle's gradient program
  (another custom call); integer and bool inputs get zero (``float0``) cotangents. A bundle
  without a gradient program raises ``TypeError`` when differentiated. Forward mode (``jvp``,
  ``jacfwd``) is not supported (custom_vjp).
- ``vmap``: see ``op``'s ``vmap`` argument: a polymorphic program folds the mapped axis into
  its batch; otherwise ovl batches the program over the mapped axis (one call).
- sharding: ``shard(op, mesh, axis)`` runs the op with ``jax.shard_map`` on each device's rows.
- errors at trace time: a wrong number of inputs or a wrong dtype is a ``TypeError``, a wrong
  shape a ``ValueError``, each naming the input; concrete arrays on two platforms (CPU and
  GPU) a ``ValueError``. A
  failure while the program runs (an index out of bounds) is raised by JAX with ovl's message
  (``jax.errors.JaxRuntimeError`` on a jitted function's first call, a ``ValueError`` from
  ``jit``'s fast path later, in jax 0.10); the next call works.
"""

from __future__ import annotations

import threading
from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from . import Program
from . import _native

__all__ = ["Op", "op", "shard", "TARGET"]

#: The name of the FFI target (the handler) in XLA's registry.
TARGET = "ovl_program"

_lock = threading.Lock()
_registered = False


def _register_target() -> None:
    """Registers the handlers with JAX once per process, for the CPU and CUDA platforms."""
    global _registered
    with _lock:
        if _registered:
            return
        cpu, cuda = _native._xla_handlers()
        jax.ffi.register_ffi_target(TARGET, cpu, platform="cpu", api_version=1)
        # With a CPU-only jaxlib the CUDA registration waits for a plugin that never comes.
        jax.ffi.register_ffi_target(TARGET, cuda, platform="CUDA", api_version=1)
        _registered = True


def _type_text(dtype: str, shape) -> str:
    return f"{dtype}[{', '.join('?' if d is None else str(d) for d in shape)}]"


class Op:
    """An ovl program as a JAX function (made by ``op``). Call it on JAX arrays (or anything
    ``jnp.asarray`` takes), inside or outside ``jit``; it returns an array, or a tuple for
    several outputs."""

    def __init__(self, program: Program, vmap: Optional[str] = None):
        if not isinstance(program, Program):
            raise TypeError(f"ovl.jax.op takes an ovl.Program (ovl.load(path)), not {program!r}")
        _register_target()
        self.program = program
        self.name = program.name
        self._id = _native._xla_register(program._native)
        self._foldable = _foldable(program)
        if vmap is None:
            vmap = "fold" if self._foldable else "batch"
        if vmap not in ("fold", "batch", "sequential"):
            raise ValueError(f"vmap must be 'fold', 'batch' or 'sequential', not {vmap!r}")
        if vmap == "fold" and not self._foldable:
            raise ValueError(
                f"ovl program `{program.name}` cannot fold a vmapped axis into its batch: "
                "every output and at least one input must have the program's only symbol "
                "as their leading dimension (a polymorphic bundle's batch)"
            )
        self.vmap = vmap
        self._gradient: Optional[Op] = None
        # Programs batched by ovl for vmap, per (mapped inputs, axis size): (Op, batched
        # outputs), or None where ovl cannot batch the program.
        self._batched = {}
        self._fn = self._build()
        # Called through jit, also eagerly: an eager call is then one compiled custom call
        # (JAX caches it per shape) instead of a trace of the custom_vjp and custom_vmap rules.
        self._jit = jax.jit(self._fn)

    # -- trace-time checks and the custom call -------------------------------------------

    def _check(self, args):
        program = self.program
        n = len(program.inputs)
        if len(args) != n:
            sig = ", ".join(f"{t.name}: {_type_text(t.dtype, t.shape)}" for t in program.inputs)
            raise TypeError(
                f"ovl program `{program.name}` takes {n} input{'' if n == 1 else 's'} ({sig}), "
                f"{len(args)} given"
            )
        out = []
        first = None  # input 0's platform, the others must be on it
        for k, (a, spec) in enumerate(zip(args, program.inputs)):
            what = f"ovl program `{program.name}`: input {k} (`{spec.name}`)"
            if not hasattr(a, "dtype") or not hasattr(a, "shape"):
                try:
                    a = jnp.asarray(a)
                except TypeError as e:
                    raise TypeError(f"{what} is not an array: {e}") from None
            if isinstance(a, jax.Array) and not isinstance(a, jax.core.Tracer):
                platforms = {d.platform for d in a.devices()}
                unknown = platforms - {"cpu", "gpu", "cuda"}
                if unknown:
                    raise ValueError(
                        f"{what} is on {', '.join(sorted(unknown))}: ovl programs run on the "
                        "CPU and on CUDA GPUs; put it there first (jax.device_put)"
                    )
                if first is None:
                    first = (k, platforms)
                elif platforms != first[1]:
                    raise ValueError(
                        f"{what} is on {', '.join(sorted(platforms))}, input {first[0]} on "
                        f"{', '.join(sorted(first[1]))}: all inputs must be on one platform "
                        "(jax.device_put)"
                    )
            given = np.dtype(a.dtype).name
            if given != spec.dtype:
                raise TypeError(
                    f"{what} is {_type_text(given, a.shape)}, the program takes "
                    f"{_type_text(spec.dtype, spec.shape)}: convert it first "
                    f'(`x.astype("{spec.dtype}")`)'
                )
            out.append(a)
        return out

    def _out_types(self, args):
        try:
            shapes = [tuple(int(d) for d in a.shape) for a in args]
        except Exception as e:  # a symbolic dimension (jax.export's shape polymorphism)
            raise ValueError(
                f"ovl program `{self.name}`: its inputs' shapes must be known when JAX traces "
                f"the call (symbolic shapes, as jax.export makes them, are not supported): {e}"
            ) from None
        return _native._xla_output_types(self._id, shapes)

    def _call(self, *args):
        """The custom call on checked inputs (no transformation rules): a tuple of outputs."""
        types = self._out_types(args)
        call = jax.ffi.ffi_call(
            TARGET,
            tuple(jax.ShapeDtypeStruct(tuple(s), np.dtype(d)) for d, s in types),
            vmap_method="sequential",
        )
        return tuple(call(*args, program=np.int64(self._id)))

    # -- transformations ------------------------------------------------------------------

    def _build(self):
        batched_call = jax.custom_batching.custom_vmap(self._call)

        @batched_call.def_vmap
        def rule(axis_size, in_batched, *args):
            every = (True,) * len(self.program.outputs)
            if self.vmap == "fold" and self._fold_applies(in_batched):
                return self._fold(axis_size, in_batched, args), every
            if self.vmap in ("fold", "batch"):
                batched = self._batched_op(axis_size, tuple(bool(b) for b in in_batched))
                if batched is not None:
                    op, out_batched = batched
                    return op._fn(*args), out_batched
            return _sequential(batched_call, axis_size, in_batched, args), every

        @jax.custom_vjp
        def fn(*args):
            return batched_call(*args)

        def fwd(*args):
            return batched_call(*args), args

        def bwd(args, cotangents):
            return self._backward(args, cotangents)

        fn.defvjp(fwd, bwd)
        return fn

    def _fold_applies(self, in_batched) -> bool:
        """Folding needs every batched input to carry the batch as its leading dimension."""
        return all(
            not b or spec.shape[:1] == (None,) for b, spec in zip(in_batched, self.program.inputs)
        )

    def _fold(self, axis_size, in_batched, args):
        """``vmap`` of a polymorphic program: examples ``[B, n, ...]`` become one call at batch
        ``B * n`` (row-major, so a reshape, no copy), the outputs ``[B * n, ...]`` reshaped to
        ``[B, n, ...]``. An input that carries the batch but is not mapped is broadcast to every
        example; an input without the batch is not mapped and stays shared."""
        flat, rows = [], 0
        for a, b, spec in zip(args, in_batched, self.program.inputs):
            if spec.shape[:1] == (None,):
                if not b:
                    a = jnp.broadcast_to(a, (axis_size,) + tuple(a.shape))
                rows = a.shape[1]
                a = a.reshape((axis_size * a.shape[1],) + tuple(a.shape[2:]))
            flat.append(a)
        outs = self._fn_unchecked(flat)
        return tuple(o.reshape((axis_size, rows) + tuple(o.shape[1:])) for o in outs)

    def _batched_op(self, axis_size, in_batched):
        """The program batched by ovl over ``axis_size`` examples of the mapped inputs
        (``ovl::program_batch``, as the TensorFlow bridge does for ``tf.vectorized_map``):
        one call for the whole batch, the unmapped inputs shared, exact for any program; with
        its batched outputs. ``None`` when ovl cannot batch the program (then ``vmap`` runs it
        once per example)."""
        key = (in_batched, int(axis_size))
        if key not in self._batched:
            try:
                native, out_batched = _native._xla_batch(
                    self.program._native, list(in_batched), int(axis_size)
                )
            except ValueError:
                self._batched[key] = None
            else:
                op = Op(Program(native, self.program.source), vmap=self.vmap_inner)
                self._batched[key] = (op, tuple(out_batched))
        return self._batched[key]

    @property
    def vmap_inner(self) -> Optional[str]:
        """The vmap of a batched program (a vmap inside a vmap): the same, except that
        ``"fold"`` leaves the choice to the batched program."""
        return None if self.vmap == "fold" else self.vmap

    def _fn_unchecked(self, args):
        return self._fn(*args)

    def _backward(self, args, cotangents):
        grad = self.gradient_op()
        if grad is None:
            raise TypeError(
                f"ovl program `{self.name}` has no gradient program: export its bundle with "
                "`.gradient(..)` in Rust to differentiate it"
            )
        upstream = [
            ct if np.dtype(ct.dtype) == np.dtype(spec.dtype) else jnp.zeros(o_shape, spec.dtype)
            for ct, spec, o_shape in zip(
                cotangents, self.program.outputs, [c.shape for c in cotangents]
            )
        ]
        grads = grad._fn(*args, *upstream)
        out = []
        for g, a in zip(grads, args):
            if jnp.issubdtype(a.dtype, jnp.inexact):
                out.append(g)
            else:
                out.append(np.zeros(a.shape, dtype=jax.dtypes.float0))
        return tuple(out)

    def gradient_op(self) -> Optional["Op"]:
        """The bundle's gradient program as an ``Op`` (loaded on first use), or ``None``."""
        if self._gradient is None and self.program.gradient is not None:
            self._gradient = Op(self.program.gradient)
        return self._gradient

    def __call__(self, *args):
        args = self._check(args)
        outs = self._jit(*args)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def __repr__(self) -> str:
        return f"<ovl.jax.Op {self.program!r} vmap={self.vmap!r}>"


def _foldable(program: Program) -> bool:
    """Whether ``vmap`` may fold the mapped axis into the program's batch: one symbol, every
    output's leading dimension the symbol itself (not a multiple), no other symbolic
    dimension, and some input led by it."""
    if len(program.symbols) != 1:
        return False
    led = [t.shape[:1] == (None,) and None not in t.shape[1:] for t in program.outputs]
    inputs_ok = all(None not in t.shape[1:] for t in program.inputs)
    return all(led) and inputs_ok and any(t.shape[:1] == (None,) for t in program.inputs)


def _sequential(fn, axis_size, in_batched, args):
    """``vmap`` by running ``fn`` once per example (``lax.map``), shared inputs closed over."""
    mapped = [a for a, b in zip(args, in_batched) if b]

    def one(xs):
        it = iter(xs)
        return fn(*[next(it) if b else a for a, b in zip(args, in_batched)])

    return jax.lax.map(one, mapped)


def op(program: Program, *, vmap: Optional[str] = None) -> Op:
    """The program as a JAX function (an ``Op``), usable eagerly and under ``jit``, ``grad``
    and ``vmap``; see the module's documentation.

    ``vmap``: how ``jax.vmap`` runs the program over a mapped axis.

    - ``"fold"`` (the default for a polymorphic program whose outputs all lead with its
      batch) folds the mapped axis into the program's batch and runs one call: it assumes that
      the program treats its batch rows independently (row ``b`` of each output depends on row
      ``b`` of the batched inputs and on the inputs without the batch), as programs written per
      row do (an LSTM cell, a layer norm over rows). A program that mixes rows of its batch (a
      sum or a scan over the batch) must use ``"batch"``. Where a mapped input has no batch to
      fold into (a mapped weight), ``"batch"`` applies.
    - ``"batch"`` (the default otherwise) runs the program batched by ovl over the mapped axis
      (``ovl::program_batch``): one call, exact for any program, compiled once per mapped
      inputs and axis size; where ovl cannot batch the program, ``"sequential"`` applies.
    - ``"sequential"`` runs the program once per example (``lax.map``)."""
    return Op(program, vmap=vmap)


def shard(fn: Op, mesh, axis: str):
    """``fn`` under ``jax.shard_map`` with the batch split over the mesh axis ``axis``: inputs
    and outputs that lead with the program's batch are split along it (``P(axis)``), the other
    inputs replicated (``P()``); each device runs the program on its rows, and under ``grad``
    the replicated inputs' gradients are summed over the devices. It makes the same assumption
    about rows as ``vmap="fold"``, and needs every output to lead with the batch."""
    from jax.sharding import PartitionSpec as P

    if not isinstance(fn, Op):
        raise TypeError(f"ovl.jax.shard takes an ovl.jax.Op, not {fn!r}")
    if not fn._foldable:
        raise ValueError(
            f"ovl program `{fn.name}` cannot be sharded along its batch: every output must "
            "lead with the program's batch (a polymorphic bundle's only symbol)"
        )
    in_specs = tuple(P(axis) if t.shape[:1] == (None,) else P() for t in fn.program.inputs)
    out_specs = tuple(P(axis) for _ in fn.program.outputs)
    single = len(fn.program.outputs) == 1

    def body(*args):
        outs = fn._fn(*fn._check(args))
        return tuple(outs)

    mapped = _shard_map(body, mesh, in_specs, out_specs)

    def call(*args):
        outs = mapped(*args)
        return outs[0] if single else outs

    return call


def _shard_map(body, mesh, in_specs, out_specs):
    """``jax.shard_map`` without its check of varying manual axes: ``ffi_call``'s abstract
    evaluation (jax 0.10) neither propagates them to its results nor accepts inputs that
    differ in them (a split input next to a replicated weight), and JAX's own message for that
    is to pass ``check_vma=False``. Under ``grad`` the cotangents of replicated inputs are then
    summed over the devices by shard_map's transpose."""
    shard_map = getattr(jax, "shard_map", None)
    if shard_map is not None:
        return shard_map(
            body, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False
        )
    from jax.experimental.shard_map import shard_map  # JAX before 0.6

    return shard_map(body, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_rep=False)

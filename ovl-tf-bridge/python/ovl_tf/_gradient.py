"""The gradient of the ``DynamicLib`` op: another ``DynamicLib`` running the bundle's gradient
program, registered with TensorFlow when ``ovl_tf`` is imported."""

from __future__ import annotations

import tensorflow as tf

from ._library import _call_op
from ._sealed import _digest, _program_name, _sealed_problem


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

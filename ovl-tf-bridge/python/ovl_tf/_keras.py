"""``ovl_tf.Layer``: a Keras 3 layer around an ovl program (see its docstring)."""

from __future__ import annotations

import os
from typing import Mapping, Optional, Union

import keras

from ._bundle import Program, load
from ._library import load_library


@keras.saving.register_keras_serializable(package="ovl_tf", name="Layer")
class Layer(keras.layers.Layer):
    """A Keras 3 layer that runs an exported ovl program (the ``DynamicLib`` op).

    ``bundle`` is a bundle file's path, an ``ovl_tf.Program`` or a parsed bundle (a dict).
    ``trainable_inputs`` maps program inputs, by name, to Keras initializers (``"zeros"``,
    ``"glorot_uniform"``, an initializer object): each becomes a trainable weight of the layer,
    of that input's dtype and shape; the other inputs are the layer's call arguments, in the
    program's order (one tensor, or a list when there are several). The layer returns the
    program's output (a list when it has several). Training differentiates through the
    program's gradient program (a bundle exported without one trains nothing and raises
    ``LookupError`` when a gradient is asked for). Keras names it ``layer``, ``layer_1``...
    unless ``name`` is given.

    Shapes are the exported ones. A bundle exported with ``ovl::as_tensorflow_polymorphic``
    takes any batch size (``keras.Input(shape)``; ``fit`` with a partial last batch works); one
    exported with ``ovl::as_tensorflow`` takes batches of the exported size only (build the
    model with ``keras.Input(shape, batch_size=...)``).

    ``get_config`` embeds the whole bundle (the sealed programs, not a path), so a ``.keras``
    file holds everything it needs: ``keras.saving.load_model(path)`` in a process that has only
    imported ``ovl_tf`` rebuilds the layer (registered as ``"ovl_tf>Layer"``), loads the bridge
    library and restores the weights. Inputs are not autocast to the layer's dtype policy.
    """

    def __init__(
        self,
        bundle: Union[str, os.PathLike, Program, Mapping],
        trainable_inputs: Optional[Mapping[str, object]] = None,
        **kwargs,
    ):
        kwargs.setdefault("autocast", False)
        if isinstance(bundle, Program):
            program = bundle
        elif isinstance(bundle, Mapping):
            program = Program(dict(bundle), source="<ovl_tf.Layer config>")
        else:
            program = load(bundle)
        super().__init__(**kwargs)
        load_library()
        self.program = program
        names = [n for n, _, _ in program.inputs]
        trainable_inputs = dict(trainable_inputs or {})
        unknown = sorted(set(trainable_inputs) - set(names))
        if unknown:
            raise ValueError(
                f"ovl_tf.Layer: the program `{program.name}` has no input named "
                f"{', '.join(map(repr, unknown))} (its inputs: {', '.join(names)})"
            )
        self._initializers = {
            n: keras.initializers.get(i) for n, i in trainable_inputs.items()
        }
        # Per program input: the layer's weight for it, or None (a call argument).
        self._slots = []
        for name, dtype, shape in program.inputs:
            if name not in self._initializers:
                self._slots.append(None)
                continue
            if not shape.is_fully_defined():
                raise ValueError(
                    f"ovl_tf.Layer: input `{name}` of `{program.name}` has shape {shape}, "
                    "sized at run time; a trainable weight needs a fixed shape"
                )
            if not dtype.is_floating:
                raise ValueError(
                    f"ovl_tf.Layer: input `{name}` of `{program.name}` has dtype {dtype.name}; "
                    "only floating-point inputs can be trainable weights"
                )
            self._slots.append(
                self.add_weight(
                    name=name,
                    shape=tuple(shape.as_list()),
                    dtype=dtype.name,
                    initializer=self._initializers[name],
                    trainable=True,
                )
            )
        self._fed = [(n, d, s) for (n, d, s), w in zip(program.inputs, self._slots) if w is None]
        self.built = True

    def _arguments(self, inputs):
        inputs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        if len(inputs) != len(self._fed):
            raise TypeError(
                f"ovl_tf.Layer `{self.name}` takes {len(self._fed)} input(s) "
                f"({', '.join(n for n, _, _ in self._fed)}), {len(inputs)} given"
            )
        feed = iter(inputs)
        return [next(feed) if w is None else w.value for w in self._slots]

    def call(self, inputs):
        return self.program(*self._arguments(inputs))

    def compute_output_spec(self, inputs):
        self._arguments(inputs)  # the count of inputs
        specs = [keras.KerasTensor(s.as_list(), dtype=d.name) for d, s in self.program.outputs]
        return specs[0] if len(specs) == 1 else specs

    def get_config(self):
        config = super().get_config()
        config.update(
            bundle=self.program.bundle,
            trainable_inputs={
                n: keras.initializers.serialize(i) for n, i in self._initializers.items()
            },
        )
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["trainable_inputs"] = {
            n: keras.initializers.deserialize(i)
            for n, i in (config.get("trainable_inputs") or {}).items()
        }
        return cls(**config)


__all__ = ["Layer"]

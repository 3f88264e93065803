"""Keras models built the three ways users build them, for the Keras tests (either Keras).

- ``"input"``: ``keras.Sequential([keras.Input(shape), *layers])``, built at once;
- ``"deferred"``: ``keras.Sequential(layers)``, built at its first call (the style of most
  Horovod examples);
- ``"subclassed"``: a ``keras.Model`` subclass that calls the layers in order, built at its
  first call.

``fit`` creates the weights of the last two inside its first traced step, which is where
lazily built models used to break kerashvd (the optimizer built on no variables). Tests that
touch building (broadcast, checkpoints, saving, optimizer state, local layers, sync batch
norm, mixed precision, tapes) take a ``style``; the weights come from seeded initializers,
so a model holds the same weights whichever style and whenever it is built.
"""

from kerashvd.training.keras_compat import keras

STYLES = ("input", "deferred", "subclassed")


def seeded(seed, low=-1.0, high=1.0):
    """A uniform initializer that gives the same values at every call (and in both Kerases)."""
    return keras.initializers.RandomUniform(low, high, seed=seed)


def dense(units, seed, low=-1.0, high=1.0, **kwargs):
    """A ``Dense`` layer whose kernel and bias come from :func:`seeded` initializers."""
    return keras.layers.Dense(units, kernel_initializer=seeded(seed, low, high),
                              bias_initializer=seeded(seed + 1, low, high), **kwargs)


@keras.saving.register_keras_serializable(package="kerashvd_tests")
class Stack(keras.Model):
    """A subclassed model: calls its layers in order (saved and loaded by config)."""

    def __init__(self, stack, **kwargs):
        super().__init__(**kwargs)
        self.stack = list(stack)

    def call(self, inputs, training=None):
        for layer in self.stack:
            inputs = layer(inputs, training=training)
        return inputs

    def get_config(self):
        return {"name": self.name, "stack": [keras.layers.serialize(layer) for layer in self.stack]}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        config["stack"] = [keras.layers.deserialize(layer, custom_objects=custom_objects)
                           for layer in config["stack"]]
        return cls(**config)


def sequential(style, input_shape, layers, input_dtype=None):
    """``layers`` in a model of ``style`` (one of :data:`STYLES`) taking ``input_shape``."""
    if style == "input":
        return keras.Sequential([keras.Input(input_shape, dtype=input_dtype), *layers])
    if style == "deferred":
        return keras.Sequential(layers)
    if style == "subclassed":
        return Stack(layers)
    raise ValueError(f"style must be one of {STYLES}; received style={style!r}")

"""The one place that chooses which DistributedOptimizer class wraps an optimizer.

Keras 3 (``keras``) and Keras 2 (``tf_keras``) are separate class hierarchies, so each has
its own ``DistributedOptimizer`` (``keras3.py``, ``keras2.py``), and neither knows the other.
``kerashvd.DistributedOptimizer`` is the class of the Keras that ``tf.keras`` uses
(:func:`selected`), so ``isinstance(model.optimizer, hvd.DistributedOptimizer)`` holds for the
usual case. Given an optimizer of the other Keras, that class's constructor asks
:func:`class_for` and returns an instance of the other class, with the same arguments; only
then is the other Keras' implementation imported.
"""

import importlib
import sys

from .._keras_choice import keras_module_name

# Keras package -> module of its DistributedOptimizer.
_IMPLEMENTATIONS = {"keras": "kerashvd.training.optimizer.keras3",
                    "tf_keras": "kerashvd.training.optimizer.keras2"}


def keras_of(optimizer):
    """``"keras"`` or ``"tf_keras"``: whose optimizer ``optimizer`` is, or None for neither.

    Looks only at Keras packages already imported (an optimizer of one implies its import).
    """
    for name in _IMPLEMENTATIONS:
        optimizers = getattr(sys.modules.get(name), "optimizers", None)
        base = getattr(optimizers, "Optimizer", None)
        if base is not None and isinstance(optimizer, base):
            return name
    return None


def implementation(keras_name):
    """The module holding the DistributedOptimizer of ``keras_name`` (imports that Keras)."""
    return importlib.import_module(_IMPLEMENTATIONS[keras_name])


def selected():
    """The module of the DistributedOptimizer for the Keras that ``tf.keras`` uses."""
    return implementation(keras_module_name())


def class_for(optimizer, default):
    """The DistributedOptimizer class that wraps ``optimizer``.

    Args:
        optimizer: what the user passed to ``DistributedOptimizer(...)``.
        default: the class that was called; kept for an optimizer of its own Keras or of
            neither (its constructor then raises the TypeError that names what it wraps).
    """
    owner = keras_of(optimizer)
    if owner is None or _IMPLEMENTATIONS[owner] == default.__module__:
        return default
    return implementation(owner).DistributedOptimizer

"""Distributed optimizers: gradients reduced across ranks before they are applied.

- ``base``: what the two DistributedOptimizers share (construction, the step, delegation,
  serialization); each Keras' class below adds only what differs.
- ``keras3``: :class:`DistributedOptimizer` for Keras 3 (and its loss-scaling variant).
- ``keras2``: the same for ``tf_keras`` (Keras 2, ``TF_USE_LEGACY_KERAS=1``).
- ``select``: which of the two wraps a given optimizer (the only module that knows both).
- ``chain``: walking ``inner_optimizer`` chains; the settings both classes share.
- ``reduction``: the gradient reduction protocol shared with ``DistributedGradientTape``.
- ``aggregation``: local accumulation for ``backward_passes_per_step``.

``kerashvd.DistributedOptimizer`` is the class of the Keras that ``tf.keras`` uses (see
``kerashvd.training.keras_compat``), so ``isinstance(model.optimizer,
hvd.DistributedOptimizer)`` holds for either. Given an optimizer of the other Keras, it returns
the other class (``select``), so wrapping a ``tf_keras`` optimizer under Keras 3 (or the
reverse) works too; only the other Keras is imported then. The classes are looked up on first
use, so importing this package's light modules (``chain``, ``select``) imports no Keras.
"""

from . import select

__all__ = ["DistributedLossScaleOptimizer", "DistributedOptimizer"]


def __getattr__(name):
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(select.selected(), name)
    globals()[name] = value
    return value

"""Distributed optimizers: gradients reduced across ranks before they are applied.

- ``keras3``: :class:`DistributedOptimizer` for Keras 3 (and its loss-scaling variant).
- ``keras2``: the same for ``tf_keras`` (Keras 2, ``TF_USE_LEGACY_KERAS=1``).
- ``reduction``: the gradient reduction protocol shared with ``DistributedGradientTape``.
- ``aggregation``: local accumulation for ``backward_passes_per_step``.

``kerashvd.DistributedOptimizer`` is the class of the Keras that ``tf.keras`` uses (see
``kerashvd.keras_compat``), so ``isinstance(model.optimizer, hvd.DistributedOptimizer)`` holds
for either. Each class hands an optimizer of the other Keras to the other class, so wrapping
a ``tf_keras`` optimizer under Keras 3 (or the reverse) works too; only the other Keras is
imported then.
"""

from ..keras_compat import USES_TF_KERAS

if USES_TF_KERAS:
    from .keras2 import DistributedLossScaleOptimizer, DistributedOptimizer
else:
    from .keras3 import DistributedLossScaleOptimizer, DistributedOptimizer

__all__ = ["DistributedLossScaleOptimizer", "DistributedOptimizer"]

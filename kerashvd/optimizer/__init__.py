"""Distributed optimizers: gradients reduced across ranks before they are applied.

- ``keras3``: :class:`DistributedOptimizer` for Keras 3 (and its loss-scaling variant).
- ``keras2``: the adapter for ``tf_keras`` optimizers (imported only when one is wrapped).
- ``reduction``: the gradient reduction protocol shared with ``DistributedGradientTape``.
- ``aggregation``: local accumulation for ``backward_passes_per_step``.
"""

from .keras3 import DistributedLossScaleOptimizer, DistributedOptimizer

__all__ = ["DistributedLossScaleOptimizer", "DistributedOptimizer"]

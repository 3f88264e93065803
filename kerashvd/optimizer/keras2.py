"""DistributedOptimizer for Keras 2 (``tf_keras``, ``TF_USE_LEGACY_KERAS=1``).

A thin adapter with the same arguments and the same reduction and local aggregation as the
Keras 3 class: a ``tf_keras.optimizers.Optimizer`` that holds the user's optimizer and
overrides ``build`` and ``apply_gradients``. tf_keras' ``Model.fit`` calls
``optimizer.minimize(loss, vars, tape)``, which computes the gradients with the base class and
reaches :meth:`DistributedOptimizer.apply_gradients`. Users get it from
``kerashvd.DistributedOptimizer(tf_keras_optimizer)``; importing this module imports tf_keras.

Not covered here: tf_keras' legacy optimizers (``tf_keras.optimizers.legacy``) and mixed
precision (tf_keras' ``compile()`` wraps a ``LossScaleOptimizer`` around this one, outside the
allreduce).
"""

import tensorflow as tf
import tf_keras

from ..compression import Compression
from ..reduce_ops import Average
from .aggregation import LocalAggregator
from .reduction import GradientReducer, check_not_xla


@tf_keras.saving.register_keras_serializable(package="kerashvd", name="DistributedOptimizerKeras2")
class DistributedOptimizer(tf_keras.optimizers.Optimizer):
    """Averages gradients over all ranks, then applies them with the wrapped tf_keras optimizer.

    Args: as :class:`kerashvd.DistributedOptimizer`; ``optimizer`` is a
    ``tf_keras.optimizers.Optimizer``.

    Raises:
        TypeError: when ``optimizer`` is not a (non-legacy) tf_keras optimizer.
        ValueError: for an invalid argument.

    Example:

    >>> import tf_keras, kerashvd as hvd
    >>> opt = hvd.DistributedOptimizer(tf_keras.optimizers.SGD(0.01 * hvd.size()))
    """

    def __init__(self, optimizer, name=None, device_dense="", device_sparse="",
                 compression=Compression.none, sparse_as_dense=False, backward_passes_per_step=1,
                 op=Average, gradient_predivide_factor=1.0, average_aggregated_gradients=False,
                 num_groups=0, groups=None):
        if not isinstance(optimizer, tf_keras.optimizers.Optimizer):
            raise TypeError("The Keras 2 DistributedOptimizer wraps a tf_keras.optimizers."
                            f"Optimizer; received {type(optimizer).__name__}")
        if (not isinstance(backward_passes_per_step, int) or isinstance(backward_passes_per_step, bool)
                or backward_passes_per_step < 1):
            raise ValueError("backward_passes_per_step must be an int >= 1; received "
                             f"backward_passes_per_step={backward_passes_per_step!r}")
        if name is None:
            name = "Distributed" + type(optimizer).__name__
        super().__init__(name=name, jit_compile=False)
        self._optimizer = optimizer
        self.device_dense = device_dense
        self.device_sparse = device_sparse
        self.backward_passes_per_step = backward_passes_per_step
        self.average_aggregated_gradients = bool(average_aggregated_gradients)
        self._reducer = self._no_dependency(GradientReducer(
            name, compression, sparse_as_dense, op, gradient_predivide_factor, num_groups, groups))
        self._aggregator = self._no_dependency(
            LocalAggregator(backward_passes_per_step, average_aggregated_gradients)
            if backward_passes_per_step > 1 else None)

    @property
    def inner_optimizer(self):
        return self._optimizer

    def build(self, var_list):
        """Builds the inner optimizer and the local accumulators (once)."""
        var_list = list(var_list)
        self._optimizer.build(var_list)
        if self._aggregator is not None:
            self._aggregator.build(var_list)
        super().build(var_list)
        self._built = True

    @tf.autograph.experimental.do_not_convert
    def apply_gradients(self, grads_and_vars, name=None, skip_gradients_aggregation=False,
                        **kwargs):
        """Reduces the gradients across ranks and applies them with the inner optimizer.

        Returns:
            The inner optimizer's ``iterations``.

        Raises:
            ValueError: inside an XLA-compiled function.
        """
        check_not_xla("kerashvd.DistributedOptimizer")
        grads_and_vars = list(grads_and_vars)
        if not grads_and_vars:
            return self.iterations
        grads, variables = (list(x) for x in zip(*grads_and_vars))
        with tf.init_scope():
            self.build(variables)

        def reduce_and_apply(local_grads):
            reduced = self._reducer.reduce(local_grads, variables)
            pairs = [(g, v) for g, v in zip(reduced, variables) if g is not None]
            if pairs:
                self._optimizer.apply_gradients(pairs)

        if self._aggregator is None:
            reduce_and_apply(grads)
        else:
            self._aggregator(grads, reduce_and_apply)
        return self.iterations

    @property
    def iterations(self):
        return self._optimizer.iterations

    @iterations.setter
    def iterations(self, variable):
        # The base constructor sets its own counter; the inner optimizer's is the one used.
        self._iterations = variable

    @property
    def learning_rate(self):
        return self._optimizer.learning_rate

    @learning_rate.setter
    def learning_rate(self, learning_rate):
        self._optimizer.learning_rate = learning_rate

    @property
    def variables(self):
        return self._variables + list(self._optimizer.variables)

    def finalize_variable_values(self, var_list):
        self._optimizer.finalize_variable_values(var_list)

    def get_config(self):
        from .keras3 import _COMPRESSION_NAMES
        return {
            "name": self.name,
            "optimizer": tf_keras.optimizers.serialize(self._optimizer),
            "compression": _COMPRESSION_NAMES[self._reducer.compression],
            "sparse_as_dense": self._reducer.sparse_as_dense,
            "backward_passes_per_step": self.backward_passes_per_step,
            "op": self._reducer.op,
            "gradient_predivide_factor": self._reducer.gradient_predivide_factor,
            "average_aggregated_gradients": self.average_aggregated_gradients,
            "num_groups": self._reducer.num_groups,
        }

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        inner = tf_keras.optimizers.deserialize(config.pop("optimizer"),
                                                custom_objects=custom_objects)
        config["compression"] = getattr(Compression, config.pop("compression", "none"))
        return cls(inner, **config)

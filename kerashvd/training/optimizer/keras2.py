"""DistributedOptimizer for Keras 2 (``tf_keras``, ``TF_USE_LEGACY_KERAS=1``).

A thin adapter with the same arguments and the same reduction and local aggregation as the
Keras 3 class: a ``tf_keras.optimizers.Optimizer`` that holds the user's optimizer and
overrides ``build``, ``compute_gradients`` and ``apply_gradients``. tf_keras' ``Model.fit``
calls ``optimizer.minimize(loss, vars, tape)``, which reaches
:meth:`DistributedOptimizer.compute_gradients` (the inner optimizer's, so a
``LossScaleOptimizer`` inside scales the loss and unscales the gradients) and then
:meth:`DistributedOptimizer.apply_gradients` (reduce across ranks, then the inner optimizer's
``apply_gradients``). Under ``TF_USE_LEGACY_KERAS=1`` this class is
``kerashvd.DistributedOptimizer``; importing this module imports tf_keras.

Mixed precision, for the reason given in ``keras3``: the allreduce must come before the
finiteness check, so that every rank skips the same steps. ``DistributedOptimizer(
tf_keras.mixed_precision.LossScaleOptimizer(opt))`` gives that order: the inner loss-scale
optimizer unscales the gradients in ``compute_gradients``, they are reduced (an inf on one
rank becomes an inf everywhere), and its ``apply_gradients`` decides. The wrapper is then a
:class:`DistributedLossScaleOptimizer`, which tf_keras' ``compile()`` recognizes as loss
scaling and does not wrap again; a plain ``DistributedOptimizer`` that ``compile()`` wraps in
a ``LossScaleOptimizer`` is refused at the first step. tf_keras' loss-scale optimizer counts
a skipped step in ``iterations``; Keras 3's does not.

Not covered: tf_keras' legacy optimizers (``tf_keras.optimizers.legacy``); the constructor
refuses them, naming the non-legacy class to use.
"""

import tensorflow as tf
import tf_keras
# tf_keras.mixed_precision.LossScaleOptimizer is the base class compile() tests for; calling it
# builds the subclass that matches the inner optimizer.
from tf_keras.mixed_precision import LossScaleOptimizer

from ... import _private_api
from .base import DistributedOptimizerBase, WrapperClasses
from .reduction import check_not_xla


class _CallableList(list):
    """A list that also answers ``()``, as tf_keras' ``optimizer.variables`` does."""

    def __call__(self):
        return self


@tf_keras.saving.register_keras_serializable(package="kerashvd", name="DistributedOptimizerKeras2")
class DistributedOptimizer(DistributedOptimizerBase, tf_keras.optimizers.Optimizer):
    """Averages gradients over all ranks, then applies them with the wrapped tf_keras optimizer.

    Args: as the Keras 3 ``kerashvd.training.optimizer.keras3.DistributedOptimizer``;
    ``optimizer`` is a ``tf_keras.optimizers.Optimizer`` (or a
    ``tf_keras.mixed_precision.LossScaleOptimizer`` of one). Given a Keras 3 optimizer, returns
    the Keras 3 class instead (``kerashvd/training/optimizer/select.py``). Saving and loading:
    as the Keras 3 class.

    Raises:
        TypeError: when ``optimizer`` is not a (non-legacy) tf_keras optimizer.
        ValueError: for an invalid argument; at the first step inside an XLA-compiled
            function, or when a ``LossScaleOptimizer`` wraps this optimizer.

    Example:

    >>> import tf_keras, kerashvd as hvd
    >>> opt = hvd.DistributedOptimizer(tf_keras.optimizers.SGD(0.01 * hvd.size()))
    """

    _HIDDEN_FROM_DIR = ("inner_optimizer", "_optimizer")
    _LOSS_SCALE_NAME = "tf_keras.mixed_precision.LossScaleOptimizer"

    def _check_inner(self, optimizer):
        if isinstance(optimizer, tf_keras.optimizers.legacy.Optimizer):
            raise TypeError(
                "kerashvd.DistributedOptimizer does not wrap tf_keras' legacy optimizers "
                f"(received tf_keras.optimizers.legacy.{type(optimizer).__name__}); use "
                f"tf_keras.optimizers.{type(optimizer).__name__} instead.")
        if not isinstance(optimizer, tf_keras.optimizers.Optimizer):
            raise TypeError("The Keras 2 DistributedOptimizer wraps a tf_keras.optimizers."
                            f"Optimizer; received optimizer={optimizer!r} of type "
                            f"{type(optimizer).__name__}")

    def _become_optimizer(self, optimizer, name):
        tf_keras.optimizers.Optimizer.__init__(self, name=name, jit_compile=False)
        self._optimizer = optimizer  # as tf_keras' LossScaleOptimizer holds its inner one

    @property
    def inner_optimizer(self):
        return self._optimizer

    # -- the optimizer protocol -----------------------------------------------------------
    def build(self, var_list):
        """Builds the inner optimizer and the local accumulators (once; later calls return)."""
        if _private_api.tf_keras_optimizer_built(self):
            return
        var_list = list(var_list)
        self._optimizer.build(var_list)
        if self._aggregator is not None:
            self._aggregator.build(var_list)
        super().build(var_list)
        self._built = True

    def compute_gradients(self, loss, var_list, tape=None):
        """The inner optimizer's gradients (a loss-scale optimizer scales and unscales)."""
        return self._optimizer.compute_gradients(loss, var_list, tape=tape)

    @tf.autograph.experimental.do_not_convert
    def apply_gradients(self, grads_and_vars, name=None, skip_gradients_aggregation=False,
                        **kwargs):
        """Reduces the gradients across ranks and applies them with the inner optimizer.

        Returns:
            The inner optimizer's ``iterations``.

        Raises:
            ValueError: inside an XLA-compiled function, or under a ``LossScaleOptimizer``.
        """
        check_not_xla("kerashvd.DistributedOptimizer")
        self._check_not_wrapped_by_loss_scaling()
        grads_and_vars = list(grads_and_vars)
        if not grads_and_vars:
            return self.iterations
        grads, variables = (list(x) for x in zip(*grads_and_vars))
        with tf.init_scope():
            self.build(variables)
        self._reduce_and_apply(grads, variables)
        return self.iterations

    def _apply_reduced(self, grads, variables):
        pairs = [(g, v) for g, v in zip(grads, variables) if g is not None]
        if pairs:
            self._optimizer.apply_gradients(pairs)

    # -- delegation to the inner optimizer ------------------------------------------------
    @DistributedOptimizerBase.iterations.setter
    def iterations(self, variable):
        # tf_keras' model cloning sets a counter here; kept aside unused, where tf_keras' own
        # optimizer keeps its counter.
        self._iterations = variable

    @property
    def variables(self):
        # The inner optimizer's variables are the wrapper's whole state: the base class's own
        # step counter is unused (the inner optimizer counts). A checkpoint then holds what
        # the plain optimizer would save, under the same names (unique, as HDF5 needs).
        return _CallableList(self._optimizer.variables)

    def load_own_variables(self, store):
        """Loads the inner optimizer's state (``.keras`` files; see :meth:`__dir__`)."""
        self._optimizer.load_own_variables(store)

    def set_weights(self, weights):
        """Assigns ``weights`` to :attr:`variables`, in order (tf_keras' HDF5 loader calls it)."""
        variables = self.variables
        if len(weights) != len(variables):
            raise ValueError(f"{self.name} has {len(variables)} variables; received "
                             f"{len(weights)} weights")
        for variable, weight in zip(variables, weights):
            variable.assign(weight)

    # -- serialization of the inner optimizer (get_config, from_config: the base's) -------
    _serialize_inner = staticmethod(tf_keras.optimizers.serialize)
    _deserialize_inner = staticmethod(tf_keras.optimizers.deserialize)


@tf_keras.saving.register_keras_serializable(package="kerashvd",
                                             name="DistributedLossScaleOptimizerKeras2")
class DistributedLossScaleOptimizer(DistributedOptimizer, LossScaleOptimizer):
    """The Keras 2 :class:`DistributedOptimizer` of a ``LossScaleOptimizer``; never built directly.

    Behaves exactly as a ``DistributedOptimizer`` and is also a tf_keras loss-scale optimizer,
    only so that ``compile()`` under ``mixed_float16`` does not add a second one outside the
    allreduce. The loss-scaling state lives in the inner optimizer; what tf_keras and users
    read on a loss-scale optimizer is forwarded to it.
    """

    dynamic = property(lambda self: self._optimizer.dynamic)
    loss_scale = property(lambda self: self._optimizer.loss_scale)
    dynamic_counter = property(lambda self: self._optimizer.dynamic_counter)
    initial_scale = property(lambda self: self._optimizer.initial_scale)
    dynamic_growth_steps = property(lambda self: self._optimizer.dynamic_growth_steps)

    def get_scaled_loss(self, loss):
        return self._optimizer.get_scaled_loss(loss)

    def get_unscaled_gradients(self, grads):
        return self._optimizer.get_unscaled_gradients(grads)


DistributedOptimizer._classes = WrapperClasses(DistributedOptimizer, LossScaleOptimizer,
                                               DistributedLossScaleOptimizer)

"""DistributedOptimizer for Keras 3: averages gradients across ranks, then applies them.

Built by composition, the way Keras' own ``LossScaleOptimizer`` is: the wrapper is a
``keras.optimizers.Optimizer`` that holds the user's optimizer (``inner_optimizer``),
overrides ``build`` and ``apply``, and delegates ``learning_rate``, ``iterations``,
``variables``, ``scale_loss`` and serialization to it. ``Model.fit`` calls
``optimizer.apply_gradients(zip(grads, vars))`` inside its compiled train function, which
reaches :meth:`DistributedOptimizer.apply`: reduce across ranks (see ``reduction``), then
``inner_optimizer.apply``.

Mixed precision, and why the order matters: a ``LossScaleOptimizer`` skips a step when its
gradients are not finite. If it sat outside the allreduce, a rank with an inf would skip the
step, and with it the collective the other ranks are waiting in. So the allreduce must come
first, on the scaled gradients: an inf or NaN on any rank becomes an inf or NaN in the sum on
every rank, and every rank takes the same decision. ``DistributedOptimizer(
LossScaleOptimizer(opt))`` gives that order; the wrapper is then itself an instance of
``LossScaleOptimizer`` (see :class:`DistributedLossScaleOptimizer`), so ``compile()`` under a
``mixed_float16`` policy does not wrap it a second time. The other order, which ``compile()``
builds when given a plain ``DistributedOptimizer`` under ``mixed_float16``, is detected at
the first step and refused with an error that shows the fix.
"""

import types

import keras
import tensorflow as tf
from keras.optimizers import LossScaleOptimizer

from .base import DistributedOptimizerBase, WrapperClasses
from .chain import optimizer_chain
from .reduction import check_not_xla
from .._xla import install_auto_resolution

_KerasOptimizer = keras.optimizers.Optimizer
# The base class's own iterations and learning_rate, which earlier versions saved first.
_EARLIER_PLACEHOLDERS = 2


def _accumulation_steps(optimizer):
    for link in optimizer_chain(optimizer):
        if getattr(link, "gradient_accumulation_steps", None):
            return link.gradient_accumulation_steps
    return None


@keras.saving.register_keras_serializable(package="kerashvd", name="DistributedOptimizer")
class DistributedOptimizer(DistributedOptimizerBase, _KerasOptimizer):
    """An optimizer that averages gradients over all ranks before applying them.

    Wraps a Keras 3 optimizer (or, given a ``tf_keras`` optimizer, returns the Keras 2 adapter
    with the same arguments: see ``kerashvd/training/optimizer/select.py``). Every rank
    must call it with the same variables in the same order, once per batch.

    Args:
        optimizer: the ``keras.optimizers.Optimizer`` to wrap. Wrap a
            ``keras.optimizers.LossScaleOptimizer`` for mixed precision (see below).
        name: name of the wrapper and prefix of its collectives' names (which ranks match
            them by). Default: ``"Distributed" + type(optimizer).__name__``. Give distinct
            names to optimizers that step at the same time (e.g. a GAN's two).
        device_dense: accepted for Horovod compatibility; unused.
        device_sparse: the same.
        compression: ``kerashvd.Compression.none`` (default), ``.fp16`` or ``.bf16``, applied
            to dense gradients on the wire.
        sparse_as_dense: densify ``tf.IndexedSlices`` gradients (embeddings) and allreduce
            them, instead of allgathering their rows.
        backward_passes_per_step: k >= 1. Gradients of k consecutive calls are summed locally
            and communicated and applied on every k-th call only (k-1 of k calls issue no
            collective). The inner optimizer's ``iterations`` advance once per applied update.
            Accumulation is dense: sparse gradients are densified and allreduced. The
            accumulators are local and transient (not saved, zero after a reload).
        op: ``kerashvd.Average`` (default) or ``kerashvd.Sum``.
        gradient_predivide_factor: with ``op=Average``, gradients are divided by this before
            the sum and by ``size() / factor`` after it (Horovod's semantics).
        average_aggregated_gradients: with ``backward_passes_per_step > 1``, divide the
            local sum of the k gradients by k (default False: the sum, as in Horovod).
        num_groups: cut the dense gradients into this many groups, one fused collective per
            group and dtype (1: one collective per dtype). Default 0: buckets of at most
            ``bucket_cap_mb`` (below).
        groups: an int (as ``num_groups``) or a list of lists of variables, each list one
            group; variables in no list form a group each. Not serialized by ``get_config``.
        scale_local_gradients: divide the gradients of variables registered with
            :meth:`register_local_var` by ``size()`` (default True, as in Horovod).
        process_set: reduce among these ranks only (a registered ``kerashvd.ProcessSet``;
            default all). Ranks outside it apply their own gradients unreduced, as in
            Horovod. Not serialized by ``get_config``.
        bucket_cap_mb: without ``num_groups``/``groups``, the dense gradients are reduced in
            buckets of consecutive gradients of at most this many MiB, in the order
            backprop produces them; each bucket's collective starts as soon as its gradients
            exist, while backprop computes the rest (PyTorch DDP's ``bucket_cap_mb``). 0:
            one collective per dtype, after the last gradient. Default None:
            ``KERASHVD_BUCKET_CAP_MB`` (``kerashvdrun --bucket-cap-mb``), else 1. The
            results are the same bits whatever the buckets.

    Raises:
        TypeError: when ``optimizer`` is not a Keras optimizer.
        ValueError: for an invalid argument, or an inner optimizer with
            ``gradient_accumulation_steps`` (use ``backward_passes_per_step`` instead: Keras'
            accumulation would still communicate on every step).

    Example:

    >>> import keras, kerashvd as hvd
    >>> hvd.init()
    >>> opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.01 * hvd.size()))
    >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    >>> model.compile(optimizer=opt, loss="mse")  # jit_compile="auto" resolves to False

    Mixed precision (``keras.mixed_precision.set_global_policy("mixed_float16")``): pass
    ``hvd.DistributedOptimizer(keras.optimizers.LossScaleOptimizer(opt))``. Gradients are
    reduced while still scaled, so every rank sees the same inf/NaN and skips the same steps.
    Keras' automatic wrapping of a plain ``DistributedOptimizer`` would put the check first;
    that order raises ``ValueError`` at the first step.

    XLA: kerashvd's collectives have no XLA kernel. ``compile()``'s default
    ``jit_compile="auto"`` resolves to False for a model with this optimizer (Keras would turn
    XLA on where a GPU is visible), with a one-line notice; an explicit ``jit_compile=True``
    is turned off by kerashvd's callbacks, and otherwise ``apply`` raises ``ValueError``
    telling you to pass ``jit_compile=False`` when traced inside an XLA-compiled function.

    Saving and loading: ``model.save("m.keras")`` stores the wrapper (``kerashvd>
    DistributedOptimizer``) and the inner optimizer's state in the plain optimizer's layout.
    A fresh process loads it with ``hvd.load_model("m.keras")``, which registers kerashvd's
    classes with Keras first (``import kerashvd`` alone does not); ``keras.saving.
    load_model`` works once they are registered (after ``hvd.init()`` in a process that
    imported Keras first, or any use of ``hvd.DistributedOptimizer``).
    """

    _LOSS_SCALE_NAME = "keras.optimizers.LossScaleOptimizer"

    def _check_inner(self, optimizer):
        if not isinstance(optimizer, _KerasOptimizer):
            raise TypeError("DistributedOptimizer wraps a keras.optimizers.Optimizer (Keras 3) "
                            "or a tf_keras.optimizers.Optimizer (Keras 2); received "
                            f"optimizer={optimizer!r} of type {type(optimizer).__name__}")
        steps = _accumulation_steps(optimizer)
        if steps:
            raise ValueError(
                "DistributedOptimizer does not support an inner optimizer with Keras' "
                f"gradient_accumulation_steps (received gradient_accumulation_steps={steps}): "
                "it would communicate on every step. Create the optimizer without it and pass "
                f"backward_passes_per_step={steps}, average_aggregated_gradients=True to "
                "DistributedOptimizer instead.")

    def _become_optimizer(self, optimizer, name):
        # Not super().__init__: for DistributedLossScaleOptimizer the next class in the MRO is
        # LossScaleOptimizer, whose constructor builds a second loss-scaling state.
        _KerasOptimizer.__init__(self, learning_rate=0.0, name=name)
        self.inner_optimizer = optimizer

    # -- the optimizer protocol -----------------------------------------------------------
    def build(self, var_list):
        """Builds the inner optimizer (unless built) and the local accumulators."""
        var_list = list(var_list)
        if not self.inner_optimizer.built:
            self.inner_optimizer.build(var_list)
        if self._aggregator is not None:
            self._aggregator.build(var_list)
        _KerasOptimizer.build(self, var_list)
        # apply() without variables uses these. Held outside Keras' attribute tracking, which
        # would otherwise take the model's variables for the optimizer's own.
        self._applied_to = types.SimpleNamespace(variables=var_list)

    @tf.autograph.experimental.do_not_convert
    def apply(self, grads, trainable_variables=None):
        """Reduces ``grads`` across ranks and applies them with the inner optimizer.

        Args:
            grads: gradients (tensors, ``tf.IndexedSlices`` or None), one per variable.
            trainable_variables: the variables; may be omitted once built.

        Raises:
            ValueError: inside an XLA-compiled function, or when a ``LossScaleOptimizer``
                wraps this optimizer (see the class docstring).
        """
        check_not_xla("kerashvd.DistributedOptimizer")
        self._check_not_wrapped_by_loss_scaling()
        grads = list(grads)
        if not grads:
            return
        if trainable_variables is None:
            if not self.built:
                raise ValueError("DistributedOptimizer.apply() without variables needs a built "
                                 "optimizer: call optimizer.build(variables) first")
            trainable_variables = self._applied_to.variables
        trainable_variables = list(trainable_variables)
        if len(grads) != len(trainable_variables):
            raise ValueError(f"Received {len(grads)} gradients for {len(trainable_variables)} "
                             "variables; pass one gradient (or None) per variable")
        if not self.built:
            with keras.name_scope(self.name, caller=self):
                self.build(trainable_variables)
            self.built = True
        self._reduce_and_apply(grads, trainable_variables)

    def _apply_reduced(self, grads, variables):
        self.inner_optimizer.apply(grads, variables)

    @tf.autograph.experimental.do_not_convert
    def apply_gradients(self, grads_and_vars):
        """Same as ``apply(grads, vars)``. Returns the inner optimizer's ``iterations``."""
        grads_and_vars = list(grads_and_vars)
        if grads_and_vars:
            grads, variables = zip(*grads_and_vars)
            self.apply(grads, variables)
        return self.iterations

    def stateless_apply(self, optimizer_variables, grads, trainable_variables):
        """Not supported: raises NotImplementedError (the JAX backend's path; use ``apply``)."""
        raise NotImplementedError("DistributedOptimizer runs on the TensorFlow backend, which "
                                  "has no stateless_apply; use apply()")

    # -- delegation to the inner optimizer ------------------------------------------------
    @property
    def variables(self):
        """The inner optimizer's variables: the wrapper's whole state.

        The base class's own ``iterations`` and ``learning_rate`` are never read (both are
        delegated), so they are left out: a checkpoint then holds exactly what the inner
        optimizer alone would save, under the same names (see :meth:`__dir__`).
        """
        return self.inner_optimizer.variables

    def load_own_variables(self, store):
        """Loads the inner optimizer's state from a checkpoint of this or a plain optimizer.

        Checkpoints of earlier kerashvd versions put the base class's two placeholders
        first; they are skipped, so those checkpoints keep loading with their state.
        """
        expected = len(self.inner_optimizer.variables)
        extra = len(store.keys()) - expected
        if expected and extra == _EARLIER_PLACEHOLDERS:
            store = {str(i): store[str(i + extra)] for i in range(expected)}
        self.inner_optimizer.load_own_variables(store)

    def scale_loss(self, loss):
        """Scales the loss as the inner optimizer does (loss scaling), before gradients."""
        return self.inner_optimizer.scale_loss(loss)

    # -- serialization of the inner optimizer (get_config, from_config: the base's) -------
    _serialize_inner = staticmethod(keras.saving.serialize_keras_object)
    _deserialize_inner = staticmethod(keras.saving.deserialize_keras_object)


@keras.saving.register_keras_serializable(package="kerashvd",
                                          name="DistributedLossScaleOptimizer")
class DistributedLossScaleOptimizer(DistributedOptimizer, LossScaleOptimizer):
    """The :class:`DistributedOptimizer` of a ``LossScaleOptimizer``; never built directly.

    ``hvd.DistributedOptimizer(keras.optimizers.LossScaleOptimizer(opt))`` returns one. It
    behaves exactly as a ``DistributedOptimizer`` (every method comes from it) and is also a
    ``LossScaleOptimizer``, only so that ``Model.compile()`` under a ``mixed_float16`` policy
    recognizes the loss scaling and does not add a second ``LossScaleOptimizer`` outside the
    allreduce. The loss-scaling state lives in the inner optimizer; the attributes Keras
    reads on a ``LossScaleOptimizer`` are forwarded to it.
    """

    dynamic_scale = property(lambda self: self.inner_optimizer.dynamic_scale)
    step_counter = property(lambda self: self.inner_optimizer.step_counter)
    initial_scale = property(lambda self: self.inner_optimizer.initial_scale)
    dynamic_growth_steps = property(lambda self: self.inner_optimizer.dynamic_growth_steps)


DistributedOptimizer._classes = WrapperClasses(DistributedOptimizer, LossScaleOptimizer,
                                               DistributedLossScaleOptimizer)
install_auto_resolution()  # jit_compile="auto" resolves to False with this optimizer

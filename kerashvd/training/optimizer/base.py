"""What the Keras 3 and the Keras 2 DistributedOptimizer share: one shape, two Keras bases.

``keras3.DistributedOptimizer`` is a ``keras.optimizers.Optimizer`` and
``keras2.DistributedOptimizer`` a ``tf_keras.optimizers.Optimizer``; both are also a
:class:`DistributedOptimizerBase`, which holds everything that does not depend on the Keras:

- construction: which class an optimizer gets (the other Keras' class for an optimizer of the
  other Keras, the loss-scaling variant for a loss-scale optimizer), the argument checks, the
  gradient reducer (``reduction``) and the local aggregator (``aggregation``);
- the step after the gradients exist: the loss-scaling order check, the before-apply actions
  (``apply_hooks``), local aggregation, the reduction and the hand-over to the inner
  optimizer;
- delegation of ``learning_rate``, ``iterations`` and ``finalize_variable_values``, and the
  ``dir()`` that keeps the inner optimizer's state from being saved twice;
- serialization of the wrapper's own arguments (``get_config`` / ``from_config``).

Each Keras' class supplies what differs: :meth:`_check_inner` (what it wraps),
:meth:`_become_optimizer` (its Keras base's constructor, and where it holds the inner
optimizer), :meth:`_apply_reduced` (how the inner optimizer applies), the inner optimizer's
(de)serialization, the class attributes ``_HIDDEN_FROM_DIR`` and ``_LOSS_SCALE_NAME``, and,
once its classes exist, ``_classes`` (:class:`WrapperClasses`).
"""

import collections
import copy

from ...collectives.compression import Compression
from ...collectives.reduce_ops import Average
from ...runtime.process_sets import global_process_set
from .aggregation import LocalAggregator
from .apply_hooks import ApplyHooks
from .chain import ReducerSettings
from . import select
from .reduction import GradientReducer
from ... import _private_api

WrapperClasses = collections.namedtuple("WrapperClasses", "plain loss_scale loss_scaled")
WrapperClasses.__doc__ = """The classes of one Keras that the shared constructor needs.

Fields:
    plain: that Keras' ``DistributedOptimizer``.
    loss_scale: that Keras' ``LossScaleOptimizer`` class (what ``isinstance`` checks).
    loss_scaled: its ``DistributedLossScaleOptimizer``, the class of a wrapped loss-scale
        optimizer.
"""

_COMPRESSION_NAMES = {getattr(Compression, name): name for name in ("none", "fp16", "bf16")}


class DistributedOptimizerBase(ReducerSettings, ApplyHooks):
    """The Keras-independent part of ``kerashvd.DistributedOptimizer`` (see the module doc).

    Not used on its own: ``kerashvd.DistributedOptimizer`` is the Keras 3 or Keras 2
    subclass, whose docstring lists the arguments.
    """

    _classes = None  # a WrapperClasses, set by each Keras' module
    _HIDDEN_FROM_DIR = ("inner_optimizer",)
    _LOSS_SCALE_NAME = "LossScaleOptimizer"  # as users spell that Keras' loss-scale class

    def __new__(cls, optimizer=None, *args, **kwargs):
        own = cls._classes
        chosen = select.class_for(optimizer, own.plain)
        if chosen is not own.plain:  # an optimizer of the other Keras
            return chosen(optimizer, *args, **kwargs)
        if cls is own.plain and isinstance(optimizer, own.loss_scale):
            cls = own.loss_scaled
        return super().__new__(cls)

    def __init__(self, optimizer, name=None, device_dense="", device_sparse="",
                 compression=Compression.none, sparse_as_dense=False, backward_passes_per_step=1,
                 op=Average, gradient_predivide_factor=1.0, average_aggregated_gradients=False,
                 num_groups=0, groups=None, scale_local_gradients=True,
                 process_set=global_process_set, bucket_cap_mb=None):
        self._check_inner(optimizer)
        if isinstance(optimizer, DistributedOptimizerBase):
            raise ValueError("The optimizer is already a DistributedOptimizer; wrap it once. "
                             f"Received optimizer={optimizer.name!r}")
        if (not isinstance(backward_passes_per_step, int) or isinstance(backward_passes_per_step, bool)
                or backward_passes_per_step < 1):
            raise ValueError("backward_passes_per_step must be an int >= 1; received "
                             f"backward_passes_per_step={backward_passes_per_step!r}")
        if name is None:
            name = "Distributed" + type(optimizer).__name__
        self._become_optimizer(optimizer, name)
        self.device_dense = device_dense
        self.device_sparse = device_sparse
        self.backward_passes_per_step = backward_passes_per_step
        self.average_aggregated_gradients = bool(average_aggregated_gradients)
        # Held outside Keras' attribute tracking and tf_keras' checkpoint dependencies: they
        # are no optimizer state (the accumulators are transient; see aggregation).
        object.__setattr__(self, "_reducer", GradientReducer(
            name, compression, sparse_as_dense, op, gradient_predivide_factor, num_groups,
            groups, scale_local_gradients, process_set, bucket_cap_mb))
        object.__setattr__(self, "_aggregator", LocalAggregator(
            backward_passes_per_step, average_aggregated_gradients)
            if backward_passes_per_step > 1 else None)
        self._order_checked = False

    # -- what each Keras supplies ---------------------------------------------------------
    def _check_inner(self, optimizer):
        """Raises TypeError/ValueError unless this Keras' wrapper can wrap ``optimizer``."""
        raise NotImplementedError

    def _become_optimizer(self, optimizer, name):
        """Runs this Keras' optimizer constructor and holds ``optimizer`` as the inner one."""
        raise NotImplementedError

    def _apply_reduced(self, grads, variables):
        """Applies the reduced ``grads`` (None where nothing to apply) with the inner optimizer."""
        raise NotImplementedError

    # _serialize_inner(optimizer) -> config and _deserialize_inner(config, custom_objects=...)
    # -> optimizer: this Keras' functions, as static methods.
    _serialize_inner = _deserialize_inner = None

    # -- the step -------------------------------------------------------------------------
    def _reduce_and_apply(self, grads, variables):
        """The step once the wrapper is built: before-apply actions, then the reduction and
        the inner optimizer's apply (every k-th call with ``backward_passes_per_step=k``)."""
        self._run_before_apply()

        def reduce_and_apply(local_grads):
            self._apply_reduced(self._reducer.reduce(local_grads, variables), variables)

        if self._aggregator is None:
            reduce_and_apply(grads)
        else:
            self._aggregator(grads, reduce_and_apply)

    def _check_not_wrapped_by_loss_scaling(self):
        """Refuses ``LossScaleOptimizer(DistributedOptimizer(...))``.

        A loss-scale optimizer skips a step whose gradients are not finite. Outside the
        allreduce, a rank with an inf would skip the step, and with it the collective the
        other ranks wait in; inside it, the reduced gradients carry any rank's inf to every
        rank, and all take the same decision. The outer optimizer calls our ``apply`` from one
        of its methods, so a frame up the stack holds it with ``inner_optimizer is self``
        (call this from ``apply``/``apply_gradients`` directly). Checked once, at the first
        call or trace.
        """
        if self._order_checked:
            return
        if _private_api.wrapped_by_loss_scaling(self, self._classes.loss_scale):
            raise ValueError(
                f"A {self._LOSS_SCALE_NAME} wraps this DistributedOptimizer (compile() does so "
                "under a mixed_float16 policy), so each rank would decide alone whether to "
                "skip a non-finite step, and ranks would stop meeting at the allreduce. Put the "
                f"loss scaling inside instead: hvd.DistributedOptimizer({self._LOSS_SCALE_NAME}"
                "(optimizer)); compile() then keeps it as it is (mixed_float16 wraps only "
                "optimizers that are not LossScaleOptimizers).")
        self._order_checked = True

    # -- delegation to the inner optimizer ------------------------------------------------
    @property
    def learning_rate(self):
        """The inner optimizer's learning rate (a schedule's value too); setting it sets that."""
        return self.inner_optimizer.learning_rate

    @learning_rate.setter
    def learning_rate(self, learning_rate):
        self.inner_optimizer.learning_rate = learning_rate

    @property
    def iterations(self):
        """The inner optimizer's step counter: the updates applied (not the calls, with
        ``backward_passes_per_step`` > 1)."""
        return self.inner_optimizer.iterations

    @iterations.setter
    def iterations(self, variable):
        # Keras before 3.4 creates the base class's own step counter under this name; the
        # inner optimizer's counter is the one that counts, so this one is kept aside unused.
        self._base_iterations = variable

    def finalize_variable_values(self, var_list):
        """Lets the inner optimizer finalize ``var_list`` at the end of ``fit`` (e.g. EMA)."""
        self.inner_optimizer.finalize_variable_values(var_list)

    def __dir__(self):
        """Hides the inner optimizer from attribute listings.

        Keras' saving (and tf_keras') finds the objects whose state it saves by walking
        ``dir()``; the inner optimizer's state is already saved as this optimizer's own
        (``variables``), and walking it too would store every slot twice (a checkpoint 1.7x
        the plain one). With it hidden, a checkpoint has the plain optimizer's layout
        (``optimizer/vars``) and loads into a model compiled with the plain optimizer.
        ``tests/parallel/test_saving.py`` fails loudly if Keras stops walking ``dir()``.
        """
        return [name for name in super().__dir__() if name not in self._HIDDEN_FROM_DIR]

    # -- serialization --------------------------------------------------------------------
    def get_config(self):
        """Returns the wrapper's arguments and the inner optimizer's serialized config.

        Variable lists (``groups`` given as lists of variables, variables registered as
        local) and the process set are left out: a reloaded optimizer groups by dtype and
        reduces over all ranks unless given them again.

        Raises:
            ValueError: for a custom compressor, which has no serializable name.
        """
        compression = _COMPRESSION_NAMES.get(self.compression)
        if compression is None:
            raise ValueError("Cannot serialize DistributedOptimizer with the custom compression "
                             f"{self.compression.__name__}; only Compression.none, .fp16 and "
                             ".bf16 have names")
        return {
            "name": self.name,
            "compression": compression,
            "sparse_as_dense": self.sparse_as_dense,
            "backward_passes_per_step": self.backward_passes_per_step,
            "op": self.op,
            "gradient_predivide_factor": self.gradient_predivide_factor,
            "average_aggregated_gradients": self.average_aggregated_gradients,
            "num_groups": self.num_groups,
            "scale_local_gradients": self.scale_local_gradients,
            "bucket_cap_mb": self.bucket_cap_mb,
            "optimizer": self._serialize_inner(self.inner_optimizer),
        }

    @classmethod
    def from_config(cls, config, custom_objects=None):
        """Rebuilds the wrapper and its inner optimizer from :meth:`get_config`'s output."""
        arguments = copy.deepcopy(config)  # tf_keras' deserialize edits the inner config
        inner = cls._deserialize_inner(arguments.pop("optimizer"), custom_objects=custom_objects)
        compression = arguments.pop("compression", "none")
        arguments["compression"] = (getattr(Compression, compression)
                                    if isinstance(compression, str) else compression)
        return cls._classes.plain(inner, **arguments)

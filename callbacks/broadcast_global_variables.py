"""Start every rank from the same model and optimizer state.

When the broadcast runs (``fit`` builds nothing before ``on_train_begin``; Keras 3 builds the
model and optimizer there only under a ``tf.distribute`` strategy): the ranks first agree, in
one small allgather, on whether every rank's model is built and whether every rank's
optimizer is a kerashvd ``DistributedOptimizer``. Then every rank takes the same path:

1. every model built (``keras.Input``, a loaded model, ``model.build(...)``): broadcast at
   ``on_train_begin``, after building the optimizer on ``model.trainable_variables``;
2. no model built (a ``Sequential`` without ``keras.Input``, a subclassed model) and every
   optimizer a ``DistributedOptimizer``: broadcast inside the first training step, when
   ``apply`` is traced with the new weights initialized and before the step executes
   (``DistributedOptimizer.call_before_apply``; see ``kerashvd/training/optimizer/apply_hooks.py``):
   the first update is the one of a model built with ``keras.Input`` (with
   ``run_eagerly=True`` the forward pass has run by then: the first update averages the
   gradients of each rank's own initial weights, and the ranks agree from then on);
3. otherwise (a plain optimizer, some ranks built and others not, TensorFlow unable to lift
   the new weights' initializers out of the step): broadcast after the first batch, as
   Horovod does; the ranks agree from the second step on.
"""

import tensorflow as tf

import kerashvd as hvd
from kerashvd.training.keras_compat import (KERAS_NAME, build_optimizer, keras, model_built,
                                   optimizer_variables)
from kerashvd.training.optimizer.apply_hooks import variables_initialized

from ._callback import Callback

__all__ = ["BroadcastGlobalVariablesCallback", "broadcast_model_state"]


class BroadcastGlobalVariablesCallback(Callback):
    """Broadcasts the model's and optimizer's variables from ``root_rank`` when training begins.

    Ranks usually initialize weights from different random seeds, and only one rank may have
    restored a checkpoint; after this callback every rank holds ``root_rank``'s weights
    (trainable and not), optimizer slots (e.g. Adam's moments), iteration count and learning
    rate before the first step. An optimizer that is still unbuilt is built on the model's
    trainable variables first, so every rank broadcasts the same list.

    Models built lazily (a ``Sequential`` without ``keras.Input``, a subclassed model) have
    no weights before ``fit`` runs its first step. With a ``DistributedOptimizer`` the
    broadcast then runs inside that first step, after the weights are created and before
    they are used (the same first update as a model built in advance); with another
    optimizer it runs after the first batch (Horovod's behaviour). Ranks may mix both kinds
    of model (e.g. rank 0 loads a checkpoint, the others build the model in code): they
    agree on one moment.

    The broadcast runs at the start of every ``fit`` the callback is passed to. Every rank
    must pass it (collectives are matched by name), and the ranks' models must have the same
    architecture and optimizer (same variables, in the same order).

    Args:
        root_rank: the rank whose state wins (default 0, the rank that restores checkpoints).
        device: accepted for Horovod compatibility; unused.
        local_variables: variables each rank keeps (e.g. the weights of the ``local_layers``
            of a ``PartialDistributedOptimizer``): a variable, a Keras layer (all its
            weights, resolved when the broadcast runs, so unbuilt layers work), or a list of
            them. They are not broadcast. Optimizer slots are broadcast all the same (they
            start at zero).

    Raises:
        ValueError: for a bad ``root_rank`` or ``local_variables``.

    Example:

    >>> import kerashvd as hvd
    >>> hvd.init()
    >>> model.fit(x, y, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)],
    ...           verbose=hvd.callbacks.verbose(1))  # doctest: +SKIP
    """

    def __init__(self, root_rank=0, device="", local_variables=None):
        super().__init__()
        if isinstance(root_rank, bool) or not isinstance(root_rank, int) or root_rank < 0:
            raise ValueError(f"root_rank must be a non-negative int; received root_rank={root_rank!r}")
        self.root_rank = root_rank
        self.device = device
        self.local_variables = _check_local(local_variables)
        self._after_first_batch = False
        self._armed = None  # the pending in-step broadcast of this fit, if any

    def on_train_begin(self, logs=None):
        self._after_first_batch, self._armed = False, None
        model = self.model
        optimizer = getattr(model, "optimizer", None)
        hooks = hasattr(optimizer, "call_before_apply")
        flags = hvd.allgather(tf.constant([[int(model_built(model)), int(hooks)]], tf.int32),
                              name="callbacks.broadcast_global_variables.ready").numpy()
        if flags[:, 0].all():
            self._broadcast()
            return
        # Path 3 unless path 2 broadcasts first (a rank-local but deterministic outcome:
        # every rank runs the same model code).
        self._after_first_batch = True
        if not flags[:, 0].any() and flags[:, 1].all():
            armed = self._armed = object()
            optimizer.call_before_apply(lambda: self._broadcast_in_step(armed))

    def _broadcast_in_step(self, armed):
        """The in-step broadcast (path 2); True once done or no longer wanted."""
        if self._armed is not armed:
            return True
        model = self.model
        if not model_built(model) or not variables_initialized(
                model.variables + optimizer_variables(model.optimizer)):
            return False  # Keras 3's first trace: TensorFlow initializes, then traces again
        self._broadcast()
        return True

    def on_train_batch_end(self, batch, logs=None):
        if self._after_first_batch:
            self._after_first_batch = False
            self._broadcast()

    def on_train_end(self, logs=None):
        self._after_first_batch, self._armed = False, None

    def _broadcast(self):
        self._armed, self._after_first_batch = None, False
        broadcast_model_state(self.model, root_rank=self.root_rank,
                              name="callbacks.broadcast_global_variables",
                              local_variables=self.local_variables)


def _is_variable(value):
    return hasattr(value, "shape") and hasattr(value, "assign")


def _check_local(items):
    """``local_variables`` as a list of variables and layers (layers resolved later)."""
    if items is None:
        return []
    if _is_variable(items) or isinstance(items, keras.layers.Layer):
        items = [items]
    if isinstance(items, (list, tuple)) and all(
            _is_variable(v) or isinstance(v, keras.layers.Layer) for v in items):
        return list(items)
    raise ValueError("local_variables must be a variable, a Keras layer or a list of them (e.g. "
                     f"layer.trainable_weights, or the layer); received local_variables={items!r}")


def _resolve_local(items):
    variables = []
    for item in _check_local(items):
        variables.extend(item.weights if isinstance(item, keras.layers.Layer) else [item])
    return variables


def broadcast_model_state(model, root_rank=0, name="callbacks.broadcast_model_state",
                          local_variables=None):
    """Assigns ``root_rank``'s model and optimizer variables on every rank.

    The function behind :class:`BroadcastGlobalVariablesCallback`, for custom training loops.
    Builds an unbuilt optimizer on ``model.trainable_variables`` first. The optimizer's
    learning rate is included also where Keras 2 keeps it out of ``optimizer.variables``.
    Every rank must call it, with the same ``name``. A model built lazily (no
    ``keras.Input``, or subclassed) has no weights before its first call: call it after the
    first training step (as Horovod's custom loops do), or build the model first.

    Args:
        model: a built Keras model (its ``optimizer``, if any, is included).
        root_rank: the rank whose values win.
        name: the prefix of the collectives' names.
        local_variables: variables (or Keras layers) to leave out: each rank keeps its own.

    Raises:
        ValueError: on every rank, when the model is not built on some rank (naming them).

    Example:

    >>> import kerashvd as hvd
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> model.compile(optimizer="adam", loss="mse")
    >>> hvd.callbacks.broadcast_model_state(model, root_rank=0)
    """
    built = hvd.allgather(tf.constant([int(model_built(model))], tf.int32),
                          name=f"{name}.built").numpy()
    if not built.all():
        unbuilt = [int(r) for r in (built == 0).nonzero()[0]]
        raise ValueError(
            f"broadcast_model_state: the {KERAS_NAME} model {model.name!r} has no weights yet "
            f"on rank(s) {unbuilt} (a Sequential without keras.Input or a subclassed model "
            "creates them at its first call; a rank that ran no batch never called it). Build "
            "the model on every rank first: keras.Input(shape) as its first layer, "
            "model.build(input_shape), or call it on one batch; or broadcast after the first "
            "training step.")
    optimizer = getattr(model, "optimizer", None)
    variables = list(model.variables)
    if optimizer is not None:
        build_optimizer(optimizer, model.trainable_variables)
        variables += optimizer_variables(optimizer)
    local = {id(v) for v in _resolve_local(local_variables)}
    variables = [v for v in variables if id(v) not in local]
    hvd.broadcast_variables(variables, root_rank=root_rank, name=name)

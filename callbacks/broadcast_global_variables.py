"""Start every rank from the same model and optimizer state."""

import kerashvd as hvd
from kerashvd.keras_compat import build_optimizer, optimizer_variables

from ._callback import Callback

__all__ = ["BroadcastGlobalVariablesCallback", "broadcast_model_state"]


class BroadcastGlobalVariablesCallback(Callback):
    """Broadcasts the model's and optimizer's variables from ``root_rank`` when training begins.

    Ranks usually initialize weights from different random seeds, and only one rank may have
    restored a checkpoint; after this callback every rank holds ``root_rank``'s weights
    (trainable and not), optimizer slots (e.g. Adam's moments), iteration count and learning
    rate before the first step. Keras 3 builds the optimizer before ``on_train_begin``; an
    optimizer that is still unbuilt (always with Keras 2, which builds it at the first step;
    or when the callback is driven by hand) is built on the model's trainable variables
    first, so every rank broadcasts the same list.

    The broadcast runs at the start of every ``fit`` the callback is passed to. Every rank
    must pass it (collectives are matched by name), and the ranks' models must have the same
    architecture and optimizer (same variables, in the same order).

    Args:
        root_rank: the rank whose state wins (default 0, the rank that restores checkpoints).
        device: accepted for Horovod compatibility; unused.
        local_variables: a variable or a list of variables each rank keeps (e.g. the weights
            of the ``local_layers`` of a ``PartialDistributedOptimizer``); they are not
            broadcast. Optimizer slots are broadcast all the same (they start at zero).

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
        self.local_variables = _variable_list(local_variables)

    def on_train_begin(self, logs=None):
        broadcast_model_state(self.model, root_rank=self.root_rank,
                              name="callbacks.broadcast_global_variables",
                              local_variables=self.local_variables)


def _variable_list(variables):
    if variables is None:
        return []
    if hasattr(variables, "shape") and hasattr(variables, "assign"):
        return [variables]
    if isinstance(variables, (list, tuple)) and all(
            hasattr(v, "shape") and hasattr(v, "assign") for v in variables):
        return list(variables)
    raise ValueError("local_variables must be a variable or a list of variables (e.g. "
                     f"layer.trainable_weights); received local_variables={variables!r}")


def broadcast_model_state(model, root_rank=0, name="callbacks.broadcast_model_state",
                          local_variables=None):
    """Assigns ``root_rank``'s model and optimizer variables on every rank.

    The function behind :class:`BroadcastGlobalVariablesCallback`, for custom training loops.
    Builds an unbuilt optimizer on ``model.trainable_variables`` first. The optimizer's
    learning rate is included also where Keras 2 keeps it out of ``optimizer.variables``.
    Every rank must call it, with the same ``name``.

    Args:
        model: a built Keras model (its ``optimizer``, if any, is included).
        root_rank: the rank whose values win.
        name: the prefix of the collectives' names.
        local_variables: variables to leave out (each rank keeps its own values).

    Example:

    >>> import kerashvd as hvd
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> model.compile(optimizer="adam", loss="mse")
    >>> hvd.callbacks.broadcast_model_state(model, root_rank=0)
    """
    optimizer = getattr(model, "optimizer", None)
    variables = list(model.variables)
    if optimizer is not None:
        build_optimizer(optimizer, model.trainable_variables)
        variables += optimizer_variables(optimizer)
    local = {id(v) for v in _variable_list(local_variables)}
    variables = [v for v in variables if id(v) not in local]
    hvd.broadcast_variables(variables, root_rank=root_rank, name=name)

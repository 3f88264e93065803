"""XLA and kerashvd: a clear error inside XLA, and turning XLA off where kerashvd can.

kerashvd's collectives are TensorFlow custom ops without an XLA kernel. Keras 3 compiles the
training step with XLA when a GPU is visible (``jit_compile="auto"``), so a model whose
optimizer is a ``DistributedOptimizer`` must train without it. Keras 3 runs no optimizer code
between ``compile()`` and the moment ``fit`` builds its XLA train function, so kerashvd turns
XLA off where it gets hold of the model first: in every kerashvd callback's ``set_model``
(which ``fit`` calls before it builds the train function), in ``hvd.load_model``, and for
models holding a ``SyncBatchNormalization`` (its ``supports_jit`` is False, Keras' own knob).
Otherwise the first traced step raises :func:`check_not_xla`'s error, which names the fix.
"""

import warnings

import tensorflow as tf


def check_not_xla(what):
    """Raises a clear error when called while tracing an XLA-compiled function.

    kerashvd's collectives are TensorFlow custom ops without an XLA kernel; XLA would reject
    them later with a message that names neither the cause nor the fix.
    """
    get_context = getattr(getattr(tf, "__internal__", None), "get_enclosing_xla_context", None)
    if get_context is not None and get_context() is not None:
        raise ValueError(
            f"{what} cannot run inside an XLA-compiled function: kerashvd's collectives have "
            "no XLA kernel. Pass jit_compile=False to Model.compile() (Keras turns XLA on by "
            "default when a GPU is present, jit_compile='auto'; a kerashvd callback in fit, "
            "e.g. hvd.callbacks.BroadcastGlobalVariablesCallback(0), turns it off for you), "
            "or drop jit_compile=True from the tf.function that runs the training step.")


def uses_distributed_optimizer(optimizer):
    """Whether ``optimizer`` is, or wraps (e.g. a LossScaleOptimizer), a DistributedOptimizer."""
    from .optimizer.reduction import ReducerSettings  # (the optimizers import this module)

    seen = set()
    while optimizer is not None and id(optimizer) not in seen:
        if isinstance(optimizer, ReducerSettings):
            return True
        seen.add(id(optimizer))
        optimizer = getattr(optimizer, "inner_optimizer", None)
    return False


def turn_off_jit_compile(model):
    """Sets ``model.jit_compile = False`` if its optimizer is a DistributedOptimizer.

    Prints a one-line notice (rank 0) when it changes anything; an already built train
    function is built again.

    Returns:
        True when ``jit_compile`` was on and is now off.
    """
    if not getattr(model, "jit_compile", False):
        return False
    if not uses_distributed_optimizer(getattr(model, "optimizer", None)):
        return False
    model.jit_compile = False
    if getattr(model, "train_function", None) is not None:
        model.make_train_function(force=True)
    from .runtime import is_initialized, rank

    if not is_initialized() or rank() == 0:
        warnings.warn(
            f"kerashvd: jit_compile is now False for model {model.name!r}: XLA cannot compile "
            "DistributedOptimizer's collectives (Keras turns XLA on when a GPU is present). "
            "Pass jit_compile=False to compile() to skip this notice.", stacklevel=3)
    return True

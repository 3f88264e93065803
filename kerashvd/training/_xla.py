"""XLA and kerashvd: "auto" resolves to off, a clear error inside XLA, and turning XLA off.

kerashvd's collectives are TensorFlow custom ops without an XLA kernel. Keras 3 compiles the
training step with XLA when a GPU is visible (``jit_compile="auto"``), so a model whose
optimizer is a ``DistributedOptimizer`` must train without it:

- ``jit_compile="auto"`` (``compile()``'s default) resolves to False for such a model, with a
  one-line notice: :func:`install_auto_resolution` wraps Keras' ``Trainer.
  _resolve_auto_jit_compile``, which ``compile()`` calls after it has set ``model.optimizer``.
  Keras runs no optimizer code between ``compile()`` and the moment ``fit`` builds its XLA
  train function, and offers no public knob that an optimizer could turn, so this is the one
  place where "auto" can be decided (a Keras without that method is refused by
  ``kerashvd._private_api``).
- An explicit ``jit_compile=True`` is turned off where kerashvd gets hold of the model before
  ``fit`` builds its step: in every kerashvd callback's ``set_model``, in ``hvd.load_model``,
  and for models holding a ``SyncBatchNormalization`` (its ``supports_jit`` is False, Keras'
  own knob). Otherwise the first traced step raises the collectives' error
  (:func:`kerashvd.collectives._xla_guard.check_not_xla`), which names the fix.
"""

import os
import sys
import warnings
import weakref

import tensorflow as tf

from .. import _private_api
from .optimizer.chain import uses_distributed_optimizer
from ..runtime.world import is_initialized, rank


_NOTICED = weakref.WeakSet()  # models whose notice was printed (Keras may resolve twice)


def _library_dirs():
    """Where Keras', TensorFlow's and kerashvd's own frames come from."""
    import keras  # lazy: imports Keras

    own = [os.path.dirname(__file__)]
    callbacks = sys.modules.get("kerashvd.callbacks")  # top-level callbacks/ in a checkout
    if callbacks is not None:
        own.append(os.path.dirname(callbacks.__file__))
    return tuple(os.path.join(os.path.realpath(d), "") for d in (
        *own, os.path.dirname(keras.__file__), os.path.dirname(tf.__file__)))


def _caller_stacklevel():
    """The ``stacklevel`` for :func:`_notice`'s warning that names the user's line (compile,
    fit or load_model), past the frames of Keras, TensorFlow and kerashvd."""
    libraries = _library_dirs()
    frame, level = sys._getframe(1), 1  # _notice's frame is stacklevel 1
    while frame.f_back is not None and os.path.realpath(
            frame.f_code.co_filename).startswith(libraries):
        frame, level = frame.f_back, level + 1
    return level


def _notice(model, why):
    """The one-line notice that XLA is off for ``model``: once per model, by rank 0 only."""
    if model in _NOTICED or (is_initialized() and rank() != 0):
        return
    _NOTICED.add(model)
    warnings.warn(
        f"kerashvd: jit_compile is {why} False for model {model.name!r}: XLA cannot compile "
        "DistributedOptimizer's collectives (Keras turns XLA on when a GPU is present). "
        "Pass jit_compile=False to compile() to skip this notice.",
        stacklevel=_caller_stacklevel())


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
    _notice(model, "now")
    return True


def install_auto_resolution():
    """Makes Keras 3 resolve ``jit_compile="auto"`` to False for a DistributedOptimizer's model.

    Wraps Keras' resolution once per process (``_private_api.wrap_resolve_auto_jit_compile``;
    see the module's docstring); other models resolve as before.

    Raises:
        kerashvd._private_api.PrivateApiError: when that Keras internal is gone.
    """
    _private_api.wrap_resolve_auto_jit_compile(_resolve_without_xla)


def _resolve_without_xla(model, resolved):
    if resolved and uses_distributed_optimizer(getattr(model, "optimizer", None)):
        _notice(model, "resolved to")
        return False
    return resolved

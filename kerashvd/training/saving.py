"""Reload a saved Keras model with its optimizer wrapped in a DistributedOptimizer."""

import inspect
import os
import zipfile

from . import _keras_classes
from ._xla import turn_off_jit_compile
from .keras_compat import build_optimizer, keras
from .optimizer import DistributedOptimizer

_WRAPPER_ARGS = tuple(p for p in inspect.signature(DistributedOptimizer.__init__).parameters
                      if p not in ("self", "optimizer"))


def load_model(filepath, custom_objects=None, compile=True, **distributed_optimizer_kwargs):
    """Loads a saved model and wraps its optimizer in a :class:`DistributedOptimizer`.

    The optimizer keeps the state it was saved with (``iterations``, Adam's moments ...):
    the state is loaded into the saved optimizer, which then becomes the wrapper's inner
    optimizer. A model saved with a ``DistributedOptimizer`` comes back with one (its saved
    settings, overridden by ``distributed_optimizer_kwargs``); a model saved with a plain
    optimizer gets one built from ``distributed_optimizer_kwargs``. The model comes back with
    ``jit_compile=False`` (XLA cannot compile kerashvd's collectives).

    This is how a fresh process loads a model saved with kerashvd's classes
    (``DistributedOptimizer``, ``SyncBatchNormalization``): it registers them with Keras
    first, as Horovod's ``hvd.load_model`` does. ``keras.saving.load_model`` alone works too
    once they are registered: after ``kerashvd.init()`` in a process that imported Keras
    before it, or after any use of ``hvd.DistributedOptimizer`` or
    ``hvd.SyncBatchNormalization`` (``import kerashvd`` alone registers nothing).

    The file is read by the Keras ``tf.keras`` uses (``kerashvd.training.keras_compat``): a
    ``.keras`` file; with Keras 2 (tf_keras, ``TF_USE_LEGACY_KERAS=1``) also a legacy ``.h5`` file.
    (tf_keras also reads a SavedModel directory, but without the optimizer's state.)

    Every rank can load the same file; to start all ranks from rank 0's state after loading
    on one rank only, broadcast the weights and optimizer variables (e.g. with the broadcast
    callback, or ``kerashvd.broadcast_variables(model.variables + opt.variables, 0)``).

    Args:
        filepath: path of a ``.keras`` file (Keras 2: or ``.h5``).
        custom_objects: as for ``keras.saving.load_model``.
        compile: load the training configuration; with False the model is returned as
            Keras loads it, without an optimizer.
        **distributed_optimizer_kwargs: arguments of :class:`DistributedOptimizer` (all but
            ``optimizer``), e.g. ``compression=hvd.Compression.fp16``.

    Returns:
        The model, compiled with a ``DistributedOptimizer`` when ``compile`` is True and the
        file holds a training configuration.

    Raises:
        TypeError: for an argument that ``DistributedOptimizer`` does not take.
        ValueError: for a ``.keras`` file that exists but is not a zip archive (truncated,
            damaged, or another format renamed); Keras alone reports "File not found" there.

    Example:

    >>> import kerashvd as hvd
    >>> model = hvd.load_model("model.keras", backward_passes_per_step=2)  # doctest: +SKIP
    >>> isinstance(model.optimizer, hvd.DistributedOptimizer)  # doctest: +SKIP
    True
    """
    unknown = sorted(set(distributed_optimizer_kwargs) - set(_WRAPPER_ARGS))
    if unknown:
        raise TypeError(f"load_model() got arguments DistributedOptimizer does not take: "
                        f"{unknown}; it takes {list(_WRAPPER_ARGS)}")
    _check_archive(filepath)
    _keras_classes.register()  # SyncBatchNormalization's module, for a fresh process
    model = keras.saving.load_model(filepath, custom_objects=custom_objects, compile=compile)
    optimizer = getattr(model, "optimizer", None)
    if not compile or optimizer is None:
        return model
    if isinstance(optimizer, DistributedOptimizer):
        if not distributed_optimizer_kwargs:
            turn_off_jit_compile(model)
            return model
        settings = optimizer.get_config()
        settings.pop("optimizer")
        settings["compression"] = optimizer.compression
        settings.update(distributed_optimizer_kwargs)
        optimizer = optimizer.inner_optimizer
    else:
        settings = distributed_optimizer_kwargs
    wrapped = DistributedOptimizer(optimizer, **settings)
    _recompile(model, wrapped)
    return model


def _check_archive(filepath):
    """A ``.keras`` file is a zip archive; a damaged one gets an error that says so."""
    path = os.fspath(filepath) if isinstance(filepath, (str, os.PathLike)) else None
    if path and path.endswith(".keras") and os.path.isfile(path) and not zipfile.is_zipfile(path):
        raise ValueError(
            f"Cannot load {path!r}: the file exists ({os.path.getsize(path)} bytes) but is not a "
            "Keras archive (a .keras file is a zip archive); it is damaged or truncated, e.g. by a "
            "writer that died mid-save, or it is another format with a .keras name. Load an "
            "earlier checkpoint (hvd.callbacks.latest_checkpoint names the last complete save "
            "of hvd.callbacks.ModelCheckpoint) or save the model again.")


def _recompile(model, optimizer):
    """Compiles ``model`` again as it was compiled, with ``optimizer`` (already stateful)."""
    config = keras.saving.deserialize_keras_object(model.get_compile_config())
    config["optimizer"] = optimizer
    model.compile(**config)
    turn_off_jit_compile(model)  # saved with jit_compile resolved, e.g. True on a GPU
    if model.built:
        build_optimizer(optimizer, model.trainable_variables)

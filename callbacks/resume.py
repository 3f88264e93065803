"""Continuing training from any step of an epoch: :func:`fit_resumable` and the batch offset.

Keras' ``fit`` starts epochs at their first batch (``initial_epoch`` counts whole epochs), so
a run stopped at batch ``k`` of epoch ``e`` (preemption, walltime, a periodic save) cannot go
on in one ``fit`` call with the same epoch boundaries. :func:`fit_resumable` runs two: the
rest of epoch ``e`` (``steps_per_epoch - k`` batches, from the data the epoch had left), then
the following epochs as usual. During the first call the callbacks of this package add ``k``
to the batch numbers Keras gives them (:func:`batch_offset`), so learning-rate schedules,
periodic saves and the preemption check see the same positions as in an uninterrupted run.

Exact resumption needs a data pipeline whose order is a function of the epoch alone (e.g.
shuffled with a seed made of the run's seed, the rank and the epoch), so ``dataset_fn(e, k)``
can produce epoch ``e``'s batches from the ``k``-th on, in a new process. With that, the
model's and optimizer's state in the checkpoint (``ModelCheckpoint`` adds the dropout layers'
random-generator state to each file), and the learning rate set by callbacks from the position,
a resumed run computes the same steps as an uninterrupted one on the same ranks.
"""

import contextlib
import weakref

import numpy as np

from kerashvd.training.keras_compat import build_optimizer

from .checkpoint_record import on_root
from .random_state import load_random_state, warn_unrestorable_random_layers

__all__ = ["batch_offset", "fit_resumable", "restore"]

# model -> batches of its current epoch trained before the running fit call started.
_offsets = weakref.WeakKeyDictionary()


def batch_offset(model):
    """Batches of the current epoch trained before this ``fit`` call (0 outside
    :func:`fit_resumable`'s first, partial epoch). Callbacks add it to Keras' batch index.

    Example (in a callback that needs the batch's position within the epoch)::

        def on_train_batch_begin(self, batch, logs=None):
            position = batch + hvd.callbacks.batch_offset(self.model)
    """
    return _offsets.get(model, 0) if model is not None else 0


@contextlib.contextmanager
def _offset(model, steps):
    _offsets[model] = steps
    try:
        yield
    finally:
        _offsets.pop(model, None)


def fit_resumable(model, dataset_fn, *, epochs, steps_per_epoch, initial_epoch=0,
                  initial_step=0, callbacks=None, **fit_kwargs):
    """``model.fit`` from batch ``initial_step`` of epoch ``initial_epoch`` to ``epochs``.

    Args:
        model: a compiled model.
        dataset_fn: ``dataset_fn(epoch, step)`` returns this rank's training batches of
            ``epoch`` (0-based) from batch ``step`` on: a ``tf.data.Dataset`` of at least
            ``steps_per_epoch - step`` batches, in the same order for the same arguments in
            every process (see the module doc).
        epochs: as for ``fit``.
        steps_per_epoch: as for ``fit``; required.
        initial_epoch: epochs already completed.
        initial_step: batches of epoch ``initial_epoch`` already trained (a checkpoint's
            ``step``); 0 starts at the epoch's beginning.
        callbacks: the callbacks, used for both ``fit`` calls.
        **fit_kwargs: passed to ``fit`` (``validation_data``, ``verbose``, ...; not ``x``,
            ``epochs``, ``initial_epoch``, ``steps_per_epoch``).

    Returns:
        A ``keras.callbacks.History`` covering the epochs run (``None`` when none was left).

    Raises:
        ValueError: for a position outside the run or a missing ``steps_per_epoch``.

    Example:

    >>> ckpt = hvd.callbacks.latest_checkpoint("ckpt")  # doctest: +SKIP
    >>> hvd.callbacks.fit_resumable(
    ...     model, lambda epoch, step: epoch_batches(epoch).skip(step), epochs=10,
    ...     steps_per_epoch=steps, initial_epoch=ckpt.epoch if ckpt else 0,
    ...     initial_step=ckpt.step if ckpt else 0, callbacks=callbacks)  # doctest: +SKIP
    """
    for key in ("x", "y", "epochs", "initial_epoch", "steps_per_epoch", "batch_size"):
        if key in fit_kwargs:
            raise ValueError(f"fit_resumable takes the data from dataset_fn and sets {key!r} "
                             "itself; remove it from the keyword arguments")
    if isinstance(steps_per_epoch, bool) or not isinstance(steps_per_epoch, int) or steps_per_epoch < 1:
        raise ValueError(f"steps_per_epoch must be a positive int; received {steps_per_epoch!r}")
    if initial_step == steps_per_epoch:  # stopped after an epoch's last batch
        initial_epoch, initial_step = initial_epoch + 1, 0
    if not 0 <= initial_step < steps_per_epoch:
        raise ValueError(f"initial_step must be in [0, steps_per_epoch={steps_per_epoch}); "
                         f"received initial_step={initial_step!r}")
    if initial_epoch > epochs or (initial_epoch == epochs and initial_step):
        raise ValueError(f"the position (epoch {initial_epoch}, step {initial_step}) is past "
                         f"the end of the run (epochs={epochs})")

    def batches(epoch, step):  # exactly the epoch's remaining batches, whatever dataset_fn adds
        return dataset_fn(epoch, step).take(steps_per_epoch - step)

    fit_kwargs.setdefault("shuffle", False)  # the datasets order themselves
    histories = []
    if initial_step:
        with _offset(model, initial_step):
            histories.append(model.fit(
                batches(initial_epoch, initial_step), epochs=initial_epoch + 1,
                initial_epoch=initial_epoch, steps_per_epoch=steps_per_epoch - initial_step,
                callbacks=callbacks, **fit_kwargs))
        initial_epoch += 1
        if model.stop_training:  # e.g. EarlyStopping in the partial epoch
            return _merged(histories)
    if initial_epoch < epochs:
        stream = batches(initial_epoch, 0)
        for epoch in range(initial_epoch + 1, epochs):
            stream = stream.concatenate(batches(epoch, 0))
        histories.append(model.fit(stream, epochs=epochs, initial_epoch=initial_epoch,
                                   steps_per_epoch=steps_per_epoch, callbacks=callbacks,
                                   **fit_kwargs))
    return _merged(histories)


def _merged(histories):
    """One History with the epochs and logs of consecutive ``fit`` calls."""
    if not histories:
        return None
    merged = histories[-1]
    if len(histories) > 1:
        first = histories[0]
        merged.epoch = list(first.epoch) + list(merged.epoch)
        keys = set(first.history) | set(merged.history)
        merged.history = {k: list(first.history.get(k, [])) + list(merged.history.get(k, []))
                          for k in keys}
    return merged


def restore(model, checkpoint, input_shape=None, root_rank=0):
    """Loads ``checkpoint`` (a :class:`Checkpoint`) into ``model`` on ``root_rank`` and checks it.

    Every rank builds and compiles the model in code and calls this; ``root_rank`` loads the
    weights and the optimizer's state (``model.load_weights``: a ``.keras`` file holds both)
    and ``BroadcastGlobalVariablesCallback`` copies them to the others when ``fit`` starts, so
    only ``root_rank`` reads the file (the directory need not be shared between nodes).
    The loaded optimizer's ``iterations`` must equal the record's: a file that does not match
    its record (e.g. overwritten after it by a writer that then crashed) would otherwise
    resume at a wrong position without a word. Under Keras 2 (tf_keras), ``root_rank`` warns
    when the model has random layers (dropout, noise, random augmentation): their random state
    cannot be restored there, so the resumed run is not bit-exact (Keras 3's is).

    Args:
        model: a compiled model.
        checkpoint: what :func:`latest_checkpoint` returned; ``None`` does nothing.
        input_shape: the batch shape to build a lazily built model with before loading (by
            calling it on zeros of that shape, float32; build other models yourself).
            Every rank builds it, so the broadcast runs when ``fit`` starts.
        root_rank: the rank that reads the file.

    Returns:
        ``(epoch, step)``: pass them to :func:`fit_resumable` (``(0, 0)`` without checkpoint).

    Raises:
        ValueError: on every rank, when the file cannot be loaded or does not match its
            record (the message names the file and both counts).

    Example:

    >>> ckpt = hvd.callbacks.latest_checkpoint("ckpt")  # doctest: +SKIP
    >>> epoch, step = hvd.callbacks.restore(model, ckpt, input_shape=(None, 28, 28, 1))  # doctest: +SKIP
    """
    if checkpoint is None:
        return 0, 0
    if not model.built:
        if input_shape is None:
            raise ValueError("restore() needs a built model: build it first, or pass "
                             "input_shape=(None, ...) to build it here")
        # A call on zeros builds every kind of model, also subclassed ones without build().
        model(np.zeros([1 if d is None else d for d in input_shape], np.float32))

    def load():
        try:
            optimizer = getattr(model, "optimizer", None)
            if optimizer is not None:
                build_optimizer(optimizer, model.trainable_variables)
            model.load_weights(checkpoint.path)
            load_random_state(model, checkpoint.path)
        except (OSError, ValueError) as err:
            raise ValueError(f"cannot load {checkpoint.path}: {type(err).__name__}: {err}") from None
        loaded = None if optimizer is None else int(np.asarray(optimizer.iterations))
        if None not in (checkpoint.iterations, loaded) and loaded != checkpoint.iterations:
            raise ValueError(
                f"{checkpoint.path} holds an optimizer at iterations={loaded}, but its record "
                f"says iterations={checkpoint.iterations} (epoch {checkpoint.epoch}, step "
                f"{checkpoint.step}): the file was replaced after the record was written. "
                "Resume from another file of the directory (fit_resumable with its position) "
                "or start over.")
        warn_unrestorable_random_layers(model)

    on_root(load, root_rank, "callbacks.restore")
    return checkpoint.epoch, checkpoint.step

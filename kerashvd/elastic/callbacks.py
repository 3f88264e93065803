"""Keras callbacks that keep an elastic state's position and commit it during ``fit``.

Pass them in this order (Keras calls callbacks in list order, and a commit should hold the
position of the batch it follows)::

    callbacks = [hvd.elastic.UpdateEpochStateCallback(state),
                 hvd.elastic.UpdateBatchStateCallback(state),
                 hvd.elastic.CommitStateCallback(state, batches_per_commit=10)]

Positions: ``state.epoch`` counts the epochs completed and ``state.batch`` the batches
completed in the current epoch (Horovod stores the index of the last batch instead, one
less). Both are what :func:`kerashvd.callbacks.fit_resumable` takes to go on exactly where a
commit was made: ``fit_resumable(model, dataset_fn, epochs=E, steps_per_epoch=S,
initial_epoch=state.epoch, initial_step=state.batch, callbacks=callbacks)``; the callbacks
count the batches of its first, partial epoch from ``state.batch`` on.
"""

import kerashvd as hvd
from kerashvd.training.keras_compat import keras


def _offset(model):
    """Batches of the epoch trained before this ``fit`` (``fit_resumable``'s partial epoch)."""
    return hvd.callbacks.batch_offset(model)


class CommitStateCallback(keras.callbacks.Callback):
    """Commits ``state`` every ``batches_per_commit`` batches and at the end of every epoch.

    A commit costs a snapshot of the model and optimizer (paid as a copy in the next step)
    and one small broadcast (the host check); fewer commits cost less and lose more steps on
    a failure (up to ``batches_per_commit``). Under ``kerashvdrun``'s elastic mode a commit
    raises ``HostsUpdatedInterrupt`` when hosts changed, which ``hvd.elastic.run`` handles.

    Args:
        state: the :class:`~kerashvd.elastic.State` to commit.
        batches_per_commit: batches between commits, >= 1 (default 1).

    Raises:
        ValueError: for a bad ``batches_per_commit``.

    Example:

    >>> hvd.elastic.CommitStateCallback(state, batches_per_commit=10)  # doctest: +SKIP
    """

    def __init__(self, state, batches_per_commit=1):
        super().__init__()
        if isinstance(batches_per_commit, bool) or not isinstance(batches_per_commit, int) \
                or batches_per_commit < 1:
            raise ValueError("batches_per_commit must be an int >= 1; received "
                             f"batches_per_commit={batches_per_commit!r}")
        self.state = state
        self.batches_per_commit = batches_per_commit
        self.batches_remaining = batches_per_commit

    def on_train_begin(self, logs=None):
        self.batches_remaining = self.batches_per_commit  # the same count on every rank

    def on_train_batch_end(self, batch, logs=None):
        self.batches_remaining -= 1
        if self.batches_remaining == 0:
            self.state.commit()
            self.batches_remaining = self.batches_per_commit

    def on_epoch_end(self, epoch, logs=None):
        self.state.commit()


class UpdateBatchStateCallback(keras.callbacks.Callback):
    """Keeps ``state.batch`` at the number of batches completed in the current epoch (0 at
    the end of an epoch).

    Args:
        state: an elastic state with a ``batch`` attribute.

    Example:

    >>> hvd.elastic.UpdateBatchStateCallback(state)  # doctest: +SKIP
    """

    def __init__(self, state):
        super().__init__()
        self.state = state

    def on_train_batch_end(self, batch, logs=None):
        self.state.batch = batch + 1 + _offset(self.model)

    def on_epoch_end(self, epoch, logs=None):
        self.state.batch = 0


class UpdateEpochStateCallback(keras.callbacks.Callback):
    """Keeps ``state.epoch`` at the number of epochs completed, across resets.

    Works with ``fit(epochs=E - state.epoch)`` (Horovod's examples: Keras counts from 0)
    and with ``fit(initial_epoch=state.epoch, epochs=E)``: the first epoch a ``fit`` runs is
    epoch ``state.epoch`` of the whole training. A ``fit`` that starts at a later epoch (Keras
    counting from its ``initial_epoch``) runs that epoch of the training: ``fit_resumable``
    does so after a commit made right after an epoch's last batch, before the epoch's end.

    Args:
        state: an elastic state with an ``epoch`` attribute.

    Example:

    >>> hvd.elastic.UpdateEpochStateCallback(state)  # doctest: +SKIP
    """

    def __init__(self, state):
        super().__init__()
        self.state = state
        self.initial_epoch = state.epoch
        self._first = None

    def on_train_begin(self, logs=None):
        self.initial_epoch, self._first = self.state.epoch, None

    def _training_epoch(self, epoch):
        """The epoch of the whole training that Keras' ``epoch`` of this ``fit`` is."""
        return max(self.initial_epoch, self._first) + epoch - self._first

    def on_epoch_begin(self, epoch, logs=None):
        if self._first is None:
            self._first = epoch
        self.state.epoch = self._training_epoch(epoch)

    def on_epoch_end(self, epoch, logs=None):
        self.state.epoch = self._training_epoch(epoch) + 1

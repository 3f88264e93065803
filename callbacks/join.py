"""Uneven data: ranks with different numbers of batches finish each epoch together.

Why a callback is needed: ``DistributedOptimizer`` allreduces the gradients at every step, so
a rank whose dataset runs out leaves the other ranks waiting in that allreduce forever (or
until the stall shutdown). ``kerashvd.join()`` solves it: until all ranks have joined, a joined
rank contributes the identity of the op to every allreduce (zeros for Sum and Average, which
is what gradients use; one for Product, the lowest value for Max, the highest for Min).
Broadcast, allgather, alltoall and reducescatter cannot run while a rank has joined: they
fail with ``tf.errors.FailedPreconditionError`` on the ranks that call them, naming the
joined ranks. So nothing but gradient allreduces may run between a rank's join and the end
of the join, which is why the join must come before any other collective of the epoch.

Where to hook (Keras 3 TF trainer, ``Model.fit``), per epoch::

    on_epoch_begin
    for each batch of *this rank's* data: on_train_batch_begin; train_function; on_train_batch_end
    epoch_logs = model.get_metrics_result()         # local, no collective
    if validating this epoch:
        evaluate(...) -> on_test_begin; validation batches; on_test_end   # may communicate
    on_epoch_end                                     # MetricAverageCallback etc. communicate

So the join must happen at the first of ``on_test_begin`` (during ``fit``) and
``on_epoch_end``: after this rank's last training step, before any other collective of the
epoch. When the last rank joins, ``join()`` returns that rank's number on every rank, and it
is the rank that applied every update of the epoch; its model and optimizer variables are
broadcast, so every rank ends the epoch with identical weights.
"""

import numbers

import numpy as np
import tensorflow as tf

import kerashvd as hvd

from ._callback import Callback
from .broadcast_global_variables import broadcast_model_state

__all__ = ["JoinCallback", "agree_steps_per_epoch"]


class JoinCallback(Callback):
    """Lets ranks with different numbers of batches per epoch finish ``fit`` without hanging.

    A rank that runs out of training batches calls ``kerashvd.join()`` at the end of its
    epoch's training steps, before ``fit`` runs validation (at ``on_test_begin``; at
    ``on_epoch_end`` in epochs without validation). While it waits there it contributes zeros
    to the other ranks' gradient allreduces, so they finish their extra batches. When every
    rank has joined, the model's and optimizer's variables (weights, optimizer slots,
    ``iterations``, learning rate) are broadcast from the rank that joined last (it applied
    every update of the epoch), so every rank starts validation, ``on_epoch_end`` and the next
    epoch with identical weights. The rank that joined last is kept in ``last_joined_rank``.

    What the updates mean: ``DistributedOptimizer`` averages by dividing the sum of gradients
    by ``size()``, also on steps where some ranks have already joined and contribute zeros.
    With ``k`` of ``n`` ranks still training, a step's update is ``k / n`` of the mean gradient
    of those ``k`` ranks: the extra batches are trained on with a smaller effective learning
    rate, and the ranks' samples do not all weigh the same. When that matters, balance the
    shards instead -- ``kerashvd.data.shard_dataset(..., drop_remainder=True)`` on a dataset
    whose size divides evenly, or :func:`agree_steps_per_epoch` to run the same number of
    steps on every rank -- and keep ``JoinCallback`` as a guard against hangs.

    Placement: **put it first in the callback list** (before ``MetricAverageCallback``,
    ``DistributedValidationCallback`` and anything else that communicates in
    ``on_test_begin`` or ``on_epoch_end``). Keras calls callbacks in list order, and a rank
    that has finished its batches must join before it starts any other collective, or it
    waits there while the other ranks wait for its gradients. Every rank must pass it. The
    other ranks must not run a broadcast, allgather, alltoall or reducescatter (e.g. in a
    per-batch callback) while a rank has joined: those fail with
    ``tf.errors.FailedPreconditionError`` naming the joined rank, as they would otherwise
    return wrong data; allreduces (``MetricAverageCallback``'s too) are fine.

    Limits: with ``DistributedOptimizer(backward_passes_per_step=k > 1)`` give every rank a
    multiple of ``k`` batches per epoch (the local accumulation counter is not reset by the
    join). Each epoch costs one join and one broadcast of the model and optimizer variables.
    With Keras 3, a rank with no batches at all in an epoch is fine: it joins at once. With
    Keras 2 (tf_keras) every rank needs at least one batch per epoch: tf_keras' ``fit``
    itself refuses an empty dataset (``ValueError: Expected input data to be non-empty``, or
    for a dataset of unknown size ``Unexpected result of `train_function` (Empty logs)``)
    before any callback can join.

    Example:

    >>> import kerashvd as hvd
    >>> hvd.init()
    >>> ds = tf.data.Dataset.range(10 + hvd.rank()).map(lambda i: (tf.ones([2]), tf.ones([1])))
    >>> model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse")
    >>> model.fit(ds.batch(2), epochs=2, validation_data=val_ds, callbacks=[
    ...     hvd.callbacks.JoinCallback(),                      # first
    ...     hvd.callbacks.BroadcastGlobalVariablesCallback(0),
    ...     hvd.callbacks.MetricAverageCallback(),
    ... ], verbose=hvd.callbacks.verbose(1))  # doctest: +SKIP
    """

    def __init__(self):
        super().__init__()
        self._pending = False  # in an epoch whose join has not happened yet
        self.last_joined_rank = None

    def on_epoch_begin(self, epoch, logs=None):
        self._pending = True

    def on_test_begin(self, logs=None):
        # Inside fit, only between on_epoch_begin and the join: a model.evaluate() outside
        # fit (or a second validation run) does not join.
        if self._pending:
            self._join()

    def on_epoch_end(self, epoch, logs=None):
        if self._pending:
            self._join()

    def on_train_end(self, logs=None):
        self._pending = False

    def _join(self):
        self._pending = False
        last = hvd.join()
        broadcast_model_state(self.model, root_rank=last, name="callbacks.join")
        self.last_joined_rank = last


def agree_steps_per_epoch(local_steps, name="callbacks.agree_steps_per_epoch"):
    """Returns the smallest ``local_steps`` over all ranks, to pass as ``steps_per_epoch``.

    The alternative to :class:`JoinCallback` that keeps every step a full step: every rank
    runs the same number of batches per epoch, the number the rank with the fewest batches
    has. Repeat the dataset (``.repeat()``) so that a rank's batches beyond the agreed count
    are used in later epochs rather than dropped (with ``steps_per_epoch``, Keras continues
    the same iterator from epoch to epoch). Every rank must call it.

    Args:
        local_steps: this rank's number of batches per epoch, an int >= 0 (e.g.
            ``int(dataset.cardinality())`` for a finite, batched ``tf.data.Dataset``).
        name: the collective's name (ranks match the call by it).

    Returns:
        The minimum over ranks, an int (the same on every rank).

    Raises:
        ValueError: when ``local_steps`` is not an int >= 0 (e.g. the ``-1``/``-2`` that
            ``cardinality()`` returns for infinite or unknown datasets).

    Example:

    >>> import kerashvd as hvd
    >>> hvd.init()
    >>> train = hvd.data.shard_dataset(ds, per_rank_batch_size=32)
    >>> steps = hvd.callbacks.agree_steps_per_epoch(int(train.cardinality()))
    >>> model.fit(train.repeat(), steps_per_epoch=steps, epochs=5)  # doctest: +SKIP
    """
    if isinstance(local_steps, (tf.Tensor, np.ndarray)) and np.ndim(local_steps) == 0:
        local_steps = np.asarray(local_steps).item()  # a scalar tensor or array, e.g. cardinality()
    if (isinstance(local_steps, bool) or not isinstance(local_steps, numbers.Integral)
            or local_steps < 0):
        raise ValueError(
            "agree_steps_per_epoch needs this rank's number of batches per epoch, an int >= 0; "
            f"received local_steps={local_steps!r}. For a tf.data.Dataset pass "
            "int(dataset.cardinality()), which is -1 (infinite) or -2 (unknown) when the "
            "dataset cannot be counted: count its batches or use JoinCallback instead.")
    reduced = hvd.allreduce(tf.constant([int(local_steps)], tf.int64), op=hvd.Min, name=name)
    return int(reduced.numpy()[0])

"""Average epoch-end metrics over ranks, so every rank's callbacks see the same numbers."""

import numbers

import numpy as np
import tensorflow as tf

import kerashvd as hvd

from ._callback import Callback

__all__ = ["MetricAverageCallback"]


class MetricAverageCallback(Callback):
    """Replaces each numeric epoch-end log value by its average over all ranks (Horovod).

    Each rank computes ``loss``, ``accuracy``, ``val_loss``, ... on its own shard. At the end
    of every epoch this callback averages them over ranks, in place, so that callbacks after
    it (``EarlyStopping``, ``ReduceLROnPlateau``, ``ModelCheckpoint(save_best_only=True)``,
    ``History``, the progress bar) make the same decision on every rank. **Place it before
    those callbacks** in the list: Keras calls callbacks in list order with one shared logs
    dict.

    Values are averaged with equal weight per rank (as Horovod does), which is the global
    value only when every rank saw the same number of samples. For exact validation metrics
    over uneven shards use :class:`DistributedValidationCallback`, which reduces the metric
    states instead (averaging its already-global ``val_*`` values again changes nothing).

    Ranks may log different metric names: a rank without any training batch in an epoch
    (allowed under :class:`JoinCallback`) logs no ``loss``, for instance. Each metric is
    averaged over the ranks that logged it: a rank without a value contributes nothing and
    is not counted, and afterwards every rank's logs hold every metric that some rank logged,
    with the same value everywhere.

    Numeric values (Python and numpy numbers, 0-d tensors) are averaged; other values are
    left alone. Each epoch costs one allgather of the metric names
    (``callbacks.metric_average.<epoch>.keys``) and one float64 allreduce of the values and
    of how many ranks have each (``callbacks.metric_average.<epoch>``).

    Example:

    >>> import kerashvd as hvd
    >>> model.fit(x, y, validation_data=(x_val, y_val), callbacks=[
    ...     hvd.callbacks.BroadcastGlobalVariablesCallback(0),
    ...     hvd.callbacks.MetricAverageCallback(),  # before the callbacks that read metrics
    ...     keras.callbacks.EarlyStopping(patience=3),
    ... ])  # doctest: +SKIP
    """

    def on_epoch_end(self, epoch, logs=None):
        # Every rank must take part, also one that was given no logs dict.
        average_logs({} if logs is None else logs, name=f"callbacks.metric_average.{epoch}")


def _is_numeric(value):
    if isinstance(value, bool):
        return False
    if isinstance(value, (numbers.Real, np.number)):
        return True
    return isinstance(value, (tf.Tensor, np.ndarray)) and value.shape == () and (
        tf.as_dtype(value.dtype).is_floating or tf.as_dtype(value.dtype).is_integer)


def average_logs(logs, name):
    """Averages the numeric values of ``logs`` over the ranks that have them, in place.
    Returns ``logs``.

    The ranks first agree on the sorted union of their numeric keys (an allgather of the
    names), then one float64 allreduce sums, per key, the values and the number of ranks that
    logged it (a rank without the key adds 0 to both).
    """
    mine = {k: float(v) for k, v in logs.items() if _is_numeric(v)}
    every_rank = hvd.allgather_object(sorted(mine), name=name + ".keys")
    keys = sorted(set().union(*every_rank))
    if not keys:
        return logs
    values = [mine.get(k, 0.0) for k in keys] + [float(k in mine) for k in keys]
    summed = hvd.allreduce(tf.constant(values, tf.float64), op=hvd.Sum, name=name).numpy()
    totals, counts = summed[:len(keys)], summed[len(keys):]
    for key, total, count in zip(keys, totals, counts):
        logs[key] = float(total / count)  # count >= 1: some rank logged the key
    return logs

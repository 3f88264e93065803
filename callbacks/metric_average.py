"""Average epoch-end metrics over ranks, so every rank's callbacks see the same numbers."""

import numbers
import zlib

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

    Numeric values (Python and numpy numbers, 0-d tensors) are reduced in one float64
    allreduce (``callbacks.metric_average.<epoch>``), in sorted key order; other values are
    left alone. Every rank must log the same numeric keys; otherwise every rank raises a
    ``ValueError`` naming its keys.

    Raises:
        ValueError: when ranks log different numeric keys.

    Example:

    >>> import kerashvd as hvd
    >>> model.fit(x, y, validation_data=(x_val, y_val), callbacks=[
    ...     hvd.callbacks.BroadcastGlobalVariablesCallback(0),
    ...     hvd.callbacks.MetricAverageCallback(),  # before the callbacks that read metrics
    ...     keras.callbacks.EarlyStopping(patience=3),
    ... ])  # doctest: +SKIP
    """

    def on_epoch_end(self, epoch, logs=None):
        if logs is None:
            return
        average_logs(logs, name=f"callbacks.metric_average.{epoch}")


def _is_numeric(value):
    if isinstance(value, bool):
        return False
    if isinstance(value, (numbers.Real, np.number)):
        return True
    return isinstance(value, (tf.Tensor, np.ndarray)) and value.shape == () and (
        tf.as_dtype(value.dtype).is_floating or tf.as_dtype(value.dtype).is_integer)


def average_logs(logs, name):
    """Averages the numeric values of ``logs`` over ranks, in place. Returns ``logs``.

    One float64 allreduce carries a 16-bit hash of the sorted keys, its square, and the
    values. By Cauchy-Schwarz, ``n * sum(h*h) == sum(h)**2`` (exact in integers) holds only
    when every rank's hash is the same, so ranks that log different keys get an error on
    every rank instead of silently mixed numbers.
    """
    keys = sorted(k for k, v in logs.items() if _is_numeric(v))
    key_hash = float(zlib.crc32("\0".join(keys).encode()) & 0xFFFF)
    values = np.array([key_hash, key_hash * key_hash] + [float(logs[k]) for k in keys], np.float64)
    summed = hvd.allreduce(tf.constant(values), op=hvd.Sum, name=name).numpy()
    world = hvd.size()
    if world * int(summed[1]) != int(summed[0]) ** 2:
        raise ValueError(
            f"MetricAverageCallback: ranks logged different metric names, so they cannot be "
            f"averaged. This rank's numeric keys: {keys}. Give metrics explicit names and make "
            "every rank run the same metrics and validation (every rank needs at least one "
            "validation batch).")
    for key, value in zip(keys, summed[2:] / world):
        logs[key] = float(value)
    return logs

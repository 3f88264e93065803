"""Give each rank its part of the data.

Two helpers, one per kind of input:

- :func:`shard_dataset` shards a ``tf.data.Dataset`` **strided**: element ``i`` goes to rank
  ``i % size()`` (``Dataset.shard``), then batches it. The batch size is explicit: either the
  batch each rank processes per step (``per_rank_batch_size``) or the batch the whole job
  processes per step (``global_batch_size``, which must divide by ``size()``).
- :func:`shard_arrays` slices numpy arrays **contiguously**: with ``n`` rows and ``s`` ranks,
  the first ``n % s`` ranks get ``n // s + 1`` rows and the others ``n // s`` (the same split
  as ``kerashvd.reducescatter``), so the slices are views and need no copy.

Either way every sample lands on exactly one rank. Shards may differ in size by one sample
(and by one batch); for exact validation metrics over uneven shards use
``kerashvd.callbacks.DistributedValidationCallback``. For training, ranks with fewer batches
would stop meeting the others at the gradient allreduce: pass ``drop_remainder=True`` and a
``steps_per_epoch`` every rank can reach, or repeat the dataset.
"""

import numpy as np
import tensorflow as tf

from .runtime.world import rank, size

__all__ = ["shard_arrays", "shard_dataset"]


def _positive_int(value, what):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ValueError(f"{what} must be a positive int; received {what}={value!r}")
    return int(value)


def shard_dataset(dataset, *, per_rank_batch_size=None, global_batch_size=None,
                  drop_remainder=False, shuffle_buffer_size=None, seed=None):
    """Returns this rank's strided shard of ``dataset``, shuffled (optionally) and batched.

    Element ``i`` of ``dataset`` goes to rank ``i % size()``. Give exactly one of
    ``per_rank_batch_size`` and ``global_batch_size``; with ``global_batch_size=G`` each rank
    batches ``G // size()`` elements, so one step of the job still processes ``G`` samples.

    Shard before any ``repeat`` and before per-element randomness, so every rank shards the
    same sequence; shuffling here happens after sharding, within this rank's shard.

    Args:
        dataset: a ``tf.data.Dataset`` of unbatched elements.
        per_rank_batch_size: elements per batch on this rank.
        global_batch_size: elements per batch summed over all ranks; must divide by
            ``size()``.
        drop_remainder: drop this rank's last batch when it is smaller.
        shuffle_buffer_size: when given, shuffle this rank's shard with this buffer before
            batching (reshuffled every epoch).
        seed: the shuffle seed (use ``seed + kerashvd.rank()`` for different orders per rank,
            or nothing).

    Returns:
        A batched ``tf.data.Dataset``.

    Raises:
        TypeError: when ``dataset`` is not a ``tf.data.Dataset``.
        ValueError: when both or neither batch size is given, a batch size is not a positive
            int, or ``global_batch_size`` does not divide by ``size()``.

    Example:

    >>> import kerashvd as hvd
    >>> hvd.init()
    >>> ds = hvd.data.shard_dataset(tf.data.Dataset.range(10), global_batch_size=2 * hvd.size())
    >>> sum(int(tf.size(b)) for b in ds) == len(range(hvd.rank(), 10, hvd.size()))
    True
    """
    if not isinstance(dataset, tf.data.Dataset):
        raise TypeError(f"shard_dataset needs a tf.data.Dataset; received {type(dataset).__name__}. "
                        "For numpy arrays use kerashvd.data.shard_arrays.")
    if (per_rank_batch_size is None) == (global_batch_size is None):
        raise ValueError(
            "shard_dataset needs exactly one of per_rank_batch_size (samples per step on each "
            "rank) and global_batch_size (samples per step over all ranks); received "
            f"per_rank_batch_size={per_rank_batch_size!r}, global_batch_size={global_batch_size!r}")
    world = size()
    if global_batch_size is not None:
        global_batch_size = _positive_int(global_batch_size, "global_batch_size")
        if global_batch_size % world:
            raise ValueError(
                f"global_batch_size must divide by the number of ranks ({world}); received "
                f"global_batch_size={global_batch_size}. Use a multiple of {world}, or pass "
                "per_rank_batch_size instead.")
        batch = global_batch_size // world
    else:
        batch = _positive_int(per_rank_batch_size, "per_rank_batch_size")
    shard = dataset.shard(num_shards=world, index=rank())
    if shuffle_buffer_size is not None:
        shard = shard.shuffle(_positive_int(shuffle_buffer_size, "shuffle_buffer_size"), seed=seed,
                              reshuffle_each_iteration=True)
    return shard.batch(batch, drop_remainder=drop_remainder)


def _shard_bounds(num_rows, num_shards, index):
    base, extra = divmod(num_rows, num_shards)
    start = index * base + min(index, extra)
    return start, start + base + (1 if index < extra else 0)


def shard_arrays(*arrays):
    """Returns this rank's contiguous slice of each array (along the first axis).

    With ``n`` rows and ``s`` ranks, rank ``r`` gets rows ``[start_r, stop_r)`` where the first
    ``n % s`` ranks get ``n // s + 1`` rows and the others ``n // s``. The slices are views.

    Args:
        *arrays: numpy arrays (or array-likes) with the same number of rows.

    Returns:
        The slice of the single array given, or a tuple of slices for several arrays.

    Raises:
        ValueError: when no array is given or the arrays' row counts differ.

    Example:

    >>> import kerashvd as hvd
    >>> x, y = hvd.data.shard_arrays(np.arange(10), np.arange(10) * 2)
    >>> sum(hvd.allgather_object(len(x))) == 10
    True
    """
    if not arrays:
        raise ValueError("shard_arrays needs at least one array")
    arrays = [np.asarray(a) for a in arrays]
    lengths = [a.shape[0] if a.ndim else None for a in arrays]
    if None in lengths or len(set(lengths)) != 1:
        raise ValueError("shard_arrays needs arrays of rank >= 1 with the same number of rows; "
                         f"received shapes {[a.shape for a in arrays]}")
    start, stop = _shard_bounds(lengths[0], size(), rank())
    sliced = tuple(a[start:stop] for a in arrays)
    return sliced[0] if len(sliced) == 1 else sliced

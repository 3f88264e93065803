"""kerashvd.data: every sample on exactly one rank, batch sizes explicit."""

import numpy as np
import pytest
import tensorflow as tf

# No Keras, but the input side of Keras training (rerun with tf_keras too), and shards that
# 3 ranks do not divide evenly.
pytestmark = [pytest.mark.keras, pytest.mark.sizes]

# Counts include 0, 1, and counts that do not divide by 2, 3 or 4.
COUNTS = [0, 1, 2, 7, 13]


def _gathered(hvd, values):
    everything = hvd.allgather_object(sorted(int(v) for v in values))
    return sorted(v for part in everything for v in part)


@pytest.mark.parametrize("n", COUNTS)
def test_shard_dataset_covers_each_sample_once(hvd, n):
    ds = hvd.data.shard_dataset(tf.data.Dataset.range(n), per_rank_batch_size=2)
    batches = [b.numpy() for b in ds]
    mine = np.concatenate(batches) if batches else np.zeros([0], np.int64)
    assert all(len(b) <= 2 for b in batches)
    assert _gathered(hvd, mine) == list(range(n))
    # Strided: element i goes to rank i % size.
    assert list(mine) == list(range(hvd.rank(), n, hvd.size()))


def test_shard_dataset_global_batch_size_splits_per_rank(hvd):
    ds = hvd.data.shard_dataset(tf.data.Dataset.range(40), global_batch_size=2 * hvd.size(),
                                drop_remainder=True)
    sizes = [int(tf.size(b)) for b in ds]
    assert sizes and all(s == 2 for s in sizes)


def test_shard_dataset_shuffles_within_the_shard(hvd):
    ds = hvd.data.shard_dataset(tf.data.Dataset.range(13), per_rank_batch_size=3,
                                shuffle_buffer_size=16, seed=1)
    mine = np.concatenate([b.numpy() for b in ds])
    assert sorted(mine) == list(range(hvd.rank(), 13, hvd.size()))
    assert _gathered(hvd, mine) == list(range(13))


def test_shard_dataset_validates_batch_sizes(hvd):
    ds = tf.data.Dataset.range(4)
    with pytest.raises(ValueError, match="exactly one of"):
        hvd.data.shard_dataset(ds)
    with pytest.raises(ValueError, match="exactly one of"):
        hvd.data.shard_dataset(ds, per_rank_batch_size=1, global_batch_size=hvd.size())
    with pytest.raises(ValueError, match="positive int"):
        hvd.data.shard_dataset(ds, per_rank_batch_size=0)
    with pytest.raises(TypeError, match="tf.data.Dataset"):
        hvd.data.shard_dataset(np.arange(4), per_rank_batch_size=1)
    if hvd.size() > 1:
        with pytest.raises(ValueError, match="divide by the number of ranks"):
            hvd.data.shard_dataset(ds, global_batch_size=2 * hvd.size() + 1)


@pytest.mark.parametrize("n", COUNTS)
def test_shard_arrays_contiguous_and_complete(hvd, n):
    x = np.arange(n)
    y = np.arange(n) * 10
    xs, ys = hvd.data.shard_arrays(x, y)
    assert np.array_equal(ys, xs * 10)
    assert _gathered(hvd, xs) == list(range(n))
    # Contiguous, sizes differ by at most one, larger shards first.
    sizes = hvd.allgather_object(len(xs))
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)
    if len(xs):
        assert list(xs) == list(range(xs[0], xs[0] + len(xs)))
    assert np.shares_memory(xs, x) or len(xs) == 0


def test_shard_arrays_single_array_and_errors(hvd):
    single = hvd.data.shard_arrays(np.arange(5))
    assert isinstance(single, np.ndarray)
    with pytest.raises(ValueError, match="same number of rows"):
        hvd.data.shard_arrays(np.arange(3), np.arange(4))
    with pytest.raises(ValueError, match="at least one array"):
        hvd.data.shard_arrays()

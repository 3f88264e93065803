"""Exception types as Horovod raises them, kept compatible with kerashvd's earlier ones.

- bad alltoall splits and a collective called outside its process set: the error is a
  ``tf.errors.InvalidArgumentError`` (Horovod) and also a ``ValueError`` (kerashvd before);
- ``op=Adasum``: ``NotImplementedError`` (tests/parallel/test_allreduce.py);
- a bad ``op`` is reported before the values are looked at;
- ``HorovodInternalError`` and ``HostsUpdatedInterrupt`` exist with Horovod's signatures.
"""

import pickle

import pytest
import tensorflow as tf


def _both_types(error):
    assert isinstance(error, tf.errors.InvalidArgumentError), type(error).__mro__
    assert isinstance(error, ValueError), type(error).__mro__


def test_bad_alltoall_splits_raise_invalid_argument_error(hvd):
    n = hvd.size()
    for splits in ([1] * (n + 1), [5] + [0] * (n - 1), [0.5] * n, "abc"):
        with pytest.raises(tf.errors.InvalidArgumentError, match="splits") as info:
            hvd.alltoall(tf.ones([4]), splits=splits, name="exc.splits")
        _both_types(info.value)
        assert "splits" in info.value.message and "splits" in str(info.value)
        copy = pickle.loads(pickle.dumps(info.value))
        assert type(copy) is type(info.value) and str(copy) == str(info.value)
    if n > 1:
        with pytest.raises(tf.errors.InvalidArgumentError, match="divisible") as info:
            hvd.alltoall(tf.ones([n + 1]), name="exc.rows")
        _both_types(info.value)
    hvd.barrier()


def test_collective_outside_the_process_set_raises_invalid_argument_error(hvd):
    if hvd.size() == 1:
        pytest.skip("needs a rank outside the set")
    ps = hvd.add_process_set([0])
    try:
        if hvd.rank() != 0:
            with pytest.raises(tf.errors.InvalidArgumentError, match="is not in") as info:
                hvd.allreduce(tf.ones([2]), process_set=ps)
            _both_types(info.value)
    finally:
        hvd.remove_process_set(ps)


def test_op_is_checked_before_the_values_of_indexed_slices(hvd):
    """IndexedSlices whose values are a list: a bad op is named, not an AttributeError."""
    r = hvd.rank()
    slices = tf.IndexedSlices([[1.0, 2.0]], tf.constant([r]), dense_shape=tf.constant([8, 2]))
    for call in (lambda op: hvd.allreduce(slices, op=op, name="exc.slices"),
                 lambda op: hvd.grouped_allreduce([slices], op=op, name="exc.grouped_slices")):
        with pytest.raises(NotImplementedError, match="op=Average or op=Sum"):
            call(hvd.Max)
        with pytest.raises(ValueError, match="op must be one of"):
            call(99)
        got = call(hvd.Sum)
        got = got[0] if isinstance(got, list) else got
        assert got.values.shape == [hvd.size(), 2]
        assert got.indices.numpy().tolist() == list(range(hvd.size()))


def test_horovod_exception_classes(hvd):
    assert issubclass(hvd.HorovodInternalError, RuntimeError)
    err = hvd.HostsUpdatedInterrupt(skip_sync=True)
    assert isinstance(err, RuntimeError) and err.skip_sync is True
    assert hvd.HostsUpdatedInterrupt(False).skip_sync is False
    with pytest.raises(hvd.HorovodInternalError, match="peer"):
        raise hvd.HorovodInternalError("peer died")

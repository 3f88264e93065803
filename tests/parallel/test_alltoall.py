"""alltoall against numpy: equal parts, uneven splits and received_splits."""

import numpy as np
import pytest
import tensorflow as tf

from fixtures.reference import ALL_DTYPES, assert_matches, rank_input

TRAILING = [(), (3,), (2, 0), (2, 1, 2)]


def _splits(sender, size, rule):
    """Rows ``sender`` sends to each rank."""
    if rule == "uneven":
        return [(sender + 2 * q) % 3 for q in range(size)]  # zeros included
    if rule == "to_rank0_only":
        return [5 if q == 0 else 0 for q in range(size)]
    if rule == "none":
        return [0] * size
    raise ValueError(rule)


def _expected(inputs, splits, rank):
    """Rows every rank sent to ``rank``, in rank order, and how many came from each."""
    parts, received = [], []
    for q, x in enumerate(inputs):
        start = sum(splits[q][:rank])
        parts.append(x[start:start + splits[q][rank]])
        received.append(splits[q][rank])
    return np.concatenate(parts, axis=0), np.array(received, np.int64)


@pytest.mark.parametrize("trailing", TRAILING, ids=lambda t: "x".join(map(str, t)) or "1d")
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_alltoall_equal_parts(hvd, dtype, trailing):
    n, r = hvd.size(), hvd.rank()
    key = f"alltoall/{dtype}/{trailing}"
    rows = 2 * n
    inputs = [rank_input(key, q, (rows,) + trailing, dtype) for q in range(n)]
    got = hvd.alltoall(tf.constant(inputs[r]), name=key)
    expected, _ = _expected(inputs, [[2] * n] * n, r)
    assert_matches(got.numpy(), expected, dtype, what=key)


@pytest.mark.parametrize("rule", ["uneven", "to_rank0_only", "none"])
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_alltoall_uneven_splits(hvd, dtype, rule):
    n, r = hvd.size(), hvd.rank()
    key = f"alltoall.splits/{dtype}/{rule}"
    splits = [_splits(q, n, rule) for q in range(n)]
    inputs = [rank_input(key, q, (sum(splits[q]), 2), dtype) for q in range(n)]
    got, received_splits = hvd.alltoall(tf.constant(inputs[r]), splits=splits[r], name=key)
    expected, expected_splits = _expected(inputs, splits, r)
    assert received_splits.dtype == tf.int64
    np.testing.assert_array_equal(received_splits.numpy(), expected_splits)
    assert_matches(got.numpy(), expected, dtype, what=key)


def test_alltoall_splits_as_tensor_numpy_or_list(hvd):
    n, r = hvd.size(), hvd.rank()
    splits = [_splits(q, n, "uneven") for q in range(n)]
    inputs = [rank_input("alltoall.kinds", q, (sum(splits[q]),), "int32") for q in range(n)]
    expected, expected_splits = _expected(inputs, splits, r)
    x = tf.constant(inputs[r])
    for i, s in enumerate([splits[r], np.array(splits[r], np.int32), tf.constant(splits[r], tf.int64)]):
        got, received = hvd.alltoall(x, splits=s, name=f"alltoall.kinds/{i}")
        np.testing.assert_array_equal(got.numpy(), expected)
        np.testing.assert_array_equal(received.numpy(), expected_splits)


def test_alltoall_default_name(hvd):
    n, r = hvd.size(), hvd.rank()
    got = hvd.alltoall(tf.range(n) + 10 * r)
    np.testing.assert_array_equal(got.numpy(), [r + 10 * q for q in range(n)])


def test_alltoall_in_tf_function(hvd):
    n, r = hvd.size(), hvd.rank()

    @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32), tf.TensorSpec([None], tf.int64),
                                  tf.TensorSpec([None], tf.uint16)])
    def exchange(x, splits, y):
        received, received_splits = hvd.alltoall(x, splits=splits, name="alltoall.fn.x")
        return received, received_splits, hvd.alltoall(y, name="alltoall.fn.y")

    outs = []
    for rule in ["uneven", "to_rank0_only"]:
        splits = [_splits(q, n, rule) for q in range(n)]
        xs = [rank_input(f"alltoall.fn/{rule}", q, (sum(splits[q]), 2), "float32") for q in range(n)]
        ys = [rank_input(f"alltoall.fn/{rule}", q, (3 * n,), "uint16") for q in range(n)]
        outs.append((splits, xs, ys, exchange(tf.constant(xs[r]), tf.constant(splits[r], tf.int64),
                                              tf.constant(ys[r]))))
    assert exchange.experimental_get_tracing_count() == 1
    for splits, xs, ys, (got, got_splits, got_y) in outs:
        expected, expected_splits = _expected(xs, splits, r)
        np.testing.assert_array_equal(got.numpy(), expected)
        np.testing.assert_array_equal(got_splits.numpy(), expected_splits)
        np.testing.assert_array_equal(got_y.numpy(), _expected(ys, [[3] * n] * n, r)[0])


def test_alltoall_splits_of_other_types_in_tf_function(hvd):
    """Inside tf.function the splits may be int32 or float tensors (whole numbers, checked by
    the kernel) or a list of symbolic scalars."""
    n, r = hvd.size(), hvd.rank()
    x = tf.constant([float(r)] * n)

    @tf.function
    def exchange(x, ones):
        as_list = hvd.alltoall(x, splits=[ones[q] for q in range(n)], name="alltoall.types.list")[0]
        as_int32 = hvd.alltoall(x, splits=tf.cast(ones, tf.int32), name="alltoall.types.int32")[0]
        as_float = hvd.alltoall(x, splits=tf.cast(ones, tf.float32), name="alltoall.types.float")[0]
        return as_list, as_int32, as_float

    for got in exchange(x, tf.ones([n], tf.int64)):
        np.testing.assert_array_equal(got.numpy(), np.arange(n, dtype=np.float32))

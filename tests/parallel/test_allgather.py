"""allgather and grouped_allgather against numpy, with first dimensions that differ per rank."""

import numpy as np
import pytest
import tensorflow as tf

from fixtures.reference import ALL_DTYPES, assert_matches, rank_input

# name -> (rows of rank r, the trailing dimensions)
CASES = {
    "same7": (lambda r: 7, ()),
    "rows_r": (lambda r: r, ()),                 # rank 0 sends no rows
    "rows_2r+1_x3": (lambda r: 2 * r + 1, (3,)),
    "uneven_3d": (lambda r: 13 if r == 0 else (r * 5) % 3, (2, 2)),
    "zero_trailing": (lambda r: r + 1, (0,)),    # rows, but 0 elements
    "all_empty": (lambda r: 0, (3,)),
    "one_row": (lambda r: 1, ()),
}


def _inputs(key, case, dtype, size):
    rows, trailing = CASES[case]
    return [rank_input(key, r, (rows(r),) + trailing, dtype) for r in range(size)]


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_allgather_matches_numpy(hvd, dtype, case):
    key = f"allgather/{dtype}/{case}"
    inputs = _inputs(key, case, dtype, hvd.size())
    got = hvd.allgather(tf.constant(inputs[hvd.rank()]), name=key)
    assert got.dtype == tf.as_dtype(dtype)
    assert_matches(got.numpy(), np.concatenate(inputs, axis=0), dtype, what=key)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_grouped_allgather_mixed_shapes(hvd, dtype):
    key = f"grouped_allgather/{dtype}"
    cases = ["rows_r", "rows_2r+1_x3", "uneven_3d", "zero_trailing", "one_row"]
    inputs = [_inputs(f"{key}/{c}", c, dtype, hvd.size()) for c in cases]
    got = hvd.grouped_allgather([tf.constant(x[hvd.rank()]) for x in inputs], name=key)
    assert len(got) == len(cases)
    for c, g, x in zip(cases, got, inputs):
        assert_matches(g.numpy(), np.concatenate(x, axis=0), dtype, what=f"{key}/{c}")


def test_allgather_default_name_and_empty_group(hvd):
    got = hvd.allgather(tf.fill([hvd.rank() + 1], hvd.rank()))
    assert hvd.grouped_allgather([]) == []
    expected = np.concatenate([np.full([q + 1], q, np.int32) for q in range(hvd.size())])
    np.testing.assert_array_equal(got.numpy(), expected)


def test_allgather_in_tf_function_with_unknown_first_dim(hvd):
    """One trace serves every rank's row count; the output's first dimension is dynamic."""
    n, r = hvd.size(), hvd.rank()

    @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32),
                                  tf.TensorSpec([None], tf.int64), tf.TensorSpec([None], tf.bool)])
    def gather(a, b, c):
        assert a.shape[0] is None
        grouped = hvd.grouped_allgather([a, a * 2], name="allgather.fn.grouped")
        return hvd.allgather(a, name="allgather.fn.a"), hvd.allgather(b, name="allgather.fn.b"), \
            hvd.allgather(c, name="allgather.fn.c"), grouped

    results = []
    for step in range(2):  # different row counts in the second call, same trace
        rows = [(q + step) % 3 for q in range(n)]
        xs = [rank_input(f"allgather.fn/{step}", q, (rows[q], 2), "float32") for q in range(n)]
        ys = [rank_input(f"allgather.fn/{step}", q, (rows[q] + 1,), "int64") for q in range(n)]
        zs = [rank_input(f"allgather.fn/{step}", q, (rows[q],), "bool") for q in range(n)]
        results.append((xs, ys, zs, gather(tf.constant(xs[r]), tf.constant(ys[r]), tf.constant(zs[r]))))
    assert gather.experimental_get_tracing_count() == 1
    for xs, ys, zs, (a, b, c, (g1, g2)) in results:
        np.testing.assert_array_equal(a.numpy(), np.concatenate(xs))
        np.testing.assert_array_equal(b.numpy(), np.concatenate(ys))
        np.testing.assert_array_equal(c.numpy(), np.concatenate(zs))
        np.testing.assert_array_equal(g1.numpy(), np.concatenate(xs))
        np.testing.assert_array_equal(g2.numpy(), 2 * np.concatenate(xs))

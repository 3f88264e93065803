"""reducescatter and grouped_reducescatter against numpy, with uneven first dimensions.

With N rows on n ranks, the first N % n ranks get N // n + 1 rows, the others N // n.
"""

import numpy as np
import pytest
import tensorflow as tf

from fixtures.reference import (FLOAT_DTYPES, REDUCE_DTYPES, all_inputs, assert_matches, reduce_reference,
                        scatter_rows, shape_id)

# N = 1 and 3 are below the world size at 4 ranks (some ranks get no rows), 7 and 5 divide by
# none of 2, 3, 4, 12 by all, and N = 0 gives every rank an empty result.
SHAPES = [(0,), (1,), (3,), (7,), (12,), (5, 2), (0, 3), (2, 2, 3)]


def _expected(inputs, dtype, op, rank, size, pre=1.0, post=1.0):
    full = reduce_reference(inputs, dtype, op, size, pre, post)
    start, stop = scatter_rows(full.shape[0], rank, size)
    return full[start:stop]


# Every shape with Sum; Average (the same scatter, scaled) with fewer.
OP_SHAPES = [("Sum", s) for s in SHAPES] + [("Average", s) for s in [(0,), (3,), (7,), (5, 2)]]


@pytest.mark.parametrize("op,shape", OP_SHAPES, ids=[f"{op}-{shape_id(s)}" for op, s in OP_SHAPES])
@pytest.mark.parametrize("dtype", REDUCE_DTYPES)
def test_reducescatter_matches_numpy(hvd, dtype, op, shape):
    n, r = hvd.size(), hvd.rank()
    key = f"reducescatter/{dtype}/{op}/{shape_id(shape)}"
    inputs = all_inputs(key, shape, dtype, n)
    got = hvd.reducescatter(tf.constant(inputs[r]), op=getattr(hvd, op), name=key)
    assert got.shape[0] == shape[0] // n + (1 if r < shape[0] % n else 0)
    assert_matches(got.numpy(), _expected(inputs, dtype, op, r, n), dtype, op, key)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES + ("int32",))
def test_reducescatter_prescale_postscale(hvd, dtype):
    n, r = hvd.size(), hvd.rank()
    key = f"reducescatter.scaled/{dtype}"
    pre, post = (2.0, 3.0) if dtype == "int32" else (0.5, 3.0)
    results = {}
    inputs = all_inputs(key, (7, 2), dtype, n)
    for op in ["Sum", "Average"]:
        results[op] = hvd.reducescatter(tf.constant(inputs[r]), op=getattr(hvd, op), prescale_factor=pre,
                                        postscale_factor=post, name=f"{key}/{op}")
    for op, got in results.items():
        assert_matches(got.numpy(), _expected(inputs, dtype, op, r, n, pre, post), dtype, op, f"{key}/{op}")


@pytest.mark.parametrize("op", ["Sum", "Average"])
@pytest.mark.parametrize("dtype", REDUCE_DTYPES)
def test_grouped_reducescatter_mixed_shapes(hvd, dtype, op):
    n, r = hvd.size(), hvd.rank()
    key = f"grouped_reducescatter/{dtype}/{op}"
    shapes = [(0,), (1,), (7, 3), (13,), (2, 2, 3)]
    inputs = [all_inputs(f"{key}/{i}", s, dtype, n) for i, s in enumerate(shapes)]
    got = hvd.grouped_reducescatter([tf.constant(x[r]) for x in inputs], op=getattr(hvd, op), name=key)
    assert len(got) == len(shapes)
    for i, (g, x) in enumerate(zip(got, inputs)):
        assert_matches(g.numpy(), _expected(x, dtype, op, r, n), dtype, op, f"{key}/{i}")


def test_reducescatter_default_op_is_average_and_empty_group(hvd):
    n, r = hvd.size(), hvd.rank()
    got = hvd.reducescatter(tf.fill([2 * n, 2], 3.0))
    assert hvd.grouped_reducescatter([]) == []
    np.testing.assert_array_equal(got.numpy(), np.full([2, 2], 3.0, np.float32))


def test_reducescatter_in_tf_function(hvd):
    n, r = hvd.size(), hvd.rank()
    shapes = [(7,), (5, 2), (1, 3)]
    inputs = [all_inputs(f"reducescatter.fn/{i}", s, "float32", n) for i, s in enumerate(shapes)]
    half_inputs = all_inputs("reducescatter.fn/half", (13,), "bfloat16", n)

    @tf.function
    def scatter(a, b, c, h):
        return (hvd.reducescatter(a, op=hvd.Sum, name="reducescatter.fn.a"),
                hvd.grouped_reducescatter([b, c], op=hvd.Average, name="reducescatter.fn.bc"),
                hvd.reducescatter(h, op=hvd.Sum, name="reducescatter.fn.h"))

    a, (b, c), h = scatter(*[tf.constant(x[r]) for x in inputs], tf.constant(half_inputs[r]))
    assert_matches(a.numpy(), _expected(inputs[0], "float32", "Sum", r, n), "float32", "Sum", "fn.a")
    assert_matches(b.numpy(), _expected(inputs[1], "float32", "Average", r, n), "float32", "Average", "fn.b")
    assert_matches(c.numpy(), _expected(inputs[2], "float32", "Average", r, n), "float32", "Average", "fn.c")
    assert_matches(h.numpy(), _expected(half_inputs, "bfloat16", "Sum", r, n), "bfloat16", "Sum", "fn.h")

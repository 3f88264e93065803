"""Min and Max allreduce with NaN and signed zeros: every rank gets the same bits.

The rule (kerashvd/collectives/reduce_ops.py): a NaN on any rank makes the element NaN (as numpy's
np.maximum/np.minimum propagate NaN), and Max prefers +0.0 over -0.0, Min -0.0 over +0.0 (IEEE
754-2019 maximum/minimum), so the result does not depend on the order in which MPI combines
the ranks. Each case runs alone, fused with others (grouped_allreduce, tf.function), for every
float dtype, and once large enough (>= 1 MiB) for the two-rank reduce-scatter + allgather path.
"""

import numpy as np
import pytest
import tensorflow as tf

from fixtures.reference import FLOAT_DTYPES, rank_input

_BITS = {"float16": tf.int16, "bfloat16": tf.int16, "float32": tf.int32, "float64": tf.int64}


def _inputs(key, n, length, dtype):
    """Every rank's input: position k < n is NaN on rank k only; position n is NaN everywhere;
    n + 1 is -inf on rank 0 and NaN on the last rank; n + 2 is -0.0 on even ranks and +0.0 on
    odd ones; n + 3 is +inf on the last rank; the rest is finite. Every 97th element beyond
    those is NaN on rank (element % n), which spreads NaNs over a large tensor."""
    xs = [rank_input(key, r, (length,), "float64") for r in range(n)]
    for r, x in enumerate(xs):
        x[r] = np.nan
        x[n] = np.nan
        x[n + 1] = -np.inf if r == 0 else (np.nan if r == n - 1 else 1.0)
        x[n + 2] = -0.0 if r % 2 == 0 else 0.0
        x[n + 3] = np.inf if r == n - 1 else 2.0
        for e in range(n + 4, length, 97):
            if e % n == r:
                x[e] = np.nan
    return [x.astype(tf.as_dtype(dtype).as_numpy_dtype) for x in xs]


def _expected(xs, op):
    fn = np.maximum if op == "Max" else np.minimum
    stacked = np.stack([x.astype(np.float64) for x in xs])
    out = fn.reduce(stacked, axis=0)
    zero = out == 0
    wanted_sign = np.any(np.signbit(stacked), axis=0) if op == "Min" else np.all(np.signbit(stacked), axis=0)
    out[zero] = np.where(wanted_sign[zero], -0.0, 0.0)
    return out


def _check(hvd, got, xs, op, dtype, what):
    got64 = tf.cast(got, tf.float64).numpy()
    expected = _expected(xs, op)
    nan = np.isnan(expected)
    assert np.array_equal(np.isnan(got64), nan), (
        f"{what}: NaN at {np.flatnonzero(np.isnan(got64))[:8]}, expected at {np.flatnonzero(nan)[:8]}")
    np.testing.assert_array_equal(got64[~nan], expected[~nan].astype(xs[0].dtype).astype(np.float64),
                                  err_msg=what)
    assert np.array_equal(np.signbit(got64[~nan]), np.signbit(expected[~nan])), f"{what}: signed zeros"
    # The same bits on every rank, NaN payloads included.
    bits = tf.bitcast(got, _BITS[dtype])
    everyone = hvd.allgather(tf.reshape(bits, [1, -1]), name=f"nan.bits/{what}").numpy()
    assert (everyone == everyone[0]).all(), f"{what}: ranks got different bits"


@pytest.mark.parametrize("op", ["Max", "Min"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_nan_alone_and_fused(hvd, dtype, op):
    n, r = hvd.size(), hvd.rank()
    lengths = (n + 5, 300, n + 4)  # every length holds the n + 4 special positions
    inputs = [_inputs(f"nan/{dtype}/{op}/{i}", n, length, dtype) for i, length in enumerate(lengths)]
    hvd_op = getattr(hvd, op)
    alone = hvd.allreduce(tf.constant(inputs[0][r]), op=hvd_op, name=f"nan/{dtype}/{op}")
    _check(hvd, alone, inputs[0], op, dtype, f"alone/{dtype}/{op}")
    fused = hvd.grouped_allreduce([tf.constant(x[r]) for x in inputs], op=hvd_op,
                                  name=f"nan.grouped/{dtype}/{op}")
    for i, (got, xs) in enumerate(zip(fused, inputs)):
        _check(hvd, got, xs, op, dtype, f"grouped{i}/{dtype}/{op}")


@pytest.mark.parametrize("op", ["Max", "Min"])
def test_nan_in_tf_function_and_large(hvd, op):
    n, r = hvd.size(), hvd.rank()
    small = _inputs(f"nan.fn/{op}/small", n, n + 9, "float32")
    large = _inputs(f"nan.fn/{op}/large", n, 300_000, "float32")  # 1.2 MB
    hvd_op = getattr(hvd, op)

    @tf.function
    def step(a, b):
        return (hvd.allreduce(a, op=hvd_op, name=f"nan.fn.small/{op}"),
                hvd.allreduce(b, op=hvd_op, name=f"nan.fn.large/{op}"))

    got_small, got_large = step(tf.constant(small[r]), tf.constant(large[r]))
    _check(hvd, got_small, small, op, "float32", f"fn.small/{op}")
    _check(hvd, got_large, large, op, "float32", f"fn.large/{op}")
    eager_large = hvd.allreduce(tf.constant(large[r]), op=hvd_op, name=f"nan.large/{op}")
    _check(hvd, eager_large, large, op, "float32", f"large/{op}")

"""A wrong argument on ONE rank: every rank raises within seconds, and the job goes on.

The rank whose own arguments are wrong (alltoall splits, an unpicklable object, a root rank
out of range, a scalar where rows are needed) cannot run its collective, but the other ranks
are already waiting in theirs. It still submits the collective under its name, marked as
failed with its message, and the negotiation fails that collective on every rank: the rank
at fault raises its own error (ValueError, TypeError, pickling errors eagerly; inside
tf.function the kernel's InvalidArgumentError), the others tf.errors.InvalidArgumentError
naming the collective, the rank and its message (ops/core/controller.h, "failed requests").
Every test bounds how long the error takes, so a regression is a failure, not a hang.
"""

import pickle
import time

import numpy as np
import pytest
import tensorflow as tf

from fixtures.reference import WORLD

multi_rank = pytest.mark.skipif(WORLD == 1, reason="needs at least two ranks")
BOUND_SECONDS = 10  # the negotiation answers within a few cycles; 10 s on a loaded machine


def _job_goes_on(hvd, tag):
    got = hvd.allreduce(tf.constant([1.0, 2.0]), op=hvd.Sum, name=f"one_rank.after/{tag}")
    np.testing.assert_array_equal(got.numpy(), [hvd.size(), 2.0 * hvd.size()])


def _outcome(fn):
    """(exception or None, seconds) of running fn."""
    start = time.monotonic()
    try:
        fn()
    except Exception as err:  # noqa: BLE001  (the test reads what was raised)
        return err, time.monotonic() - start
    return None, time.monotonic() - start


def _check(hvd, bad_rank, outcome, local_type, text, tensor):
    err, seconds = outcome
    assert err is not None, "no error"
    assert seconds < BOUND_SECONDS, f"the error took {seconds:.1f} s"
    message = str(err)
    if hvd.rank() == bad_rank:
        assert isinstance(err, local_type), f"{type(err).__name__}: {message}"
    else:
        assert isinstance(err, tf.errors.InvalidArgumentError), f"{type(err).__name__}: {message}"
        assert f"'{tensor}' failed on rank {bad_rank}:" in message, message
        assert "Every rank of the collective raises this error" in message, message
    assert text in message, message


BAD_SPLITS = {
    "length": (lambda n: [4] + [0] * n, "one entry per rank"),
    "negative": (lambda n: [5, -1] + [0] * (n - 2), "splits must be >= 0"),
    "sum": (lambda n: [5] + [0] * (n - 1), "splits sum to 5 but the tensor has 4 rows"),
    "fraction": (lambda n: [1.5, 2.5] + [0] * (n - 2), "splits must be whole numbers"),
}


@multi_rank
@pytest.mark.parametrize("case", list(BAD_SPLITS))
def test_bad_alltoall_splits_on_one_rank(hvd, case):
    n, bad = hvd.size(), hvd.size() - 1
    splits_of, text = BAD_SPLITS[case]
    splits = splits_of(n) if hvd.rank() == bad else [4] + [0] * (n - 1)
    outcome = _outcome(lambda: hvd.alltoall(tf.ones([4]), splits=splits, name=f"one_rank.splits/{case}"))
    _job_goes_on(hvd, f"splits/{case}")
    _check(hvd, bad, outcome, ValueError, text, f"one_rank.splits/{case}")


@multi_rank
@pytest.mark.parametrize("case", list(BAD_SPLITS))
def test_bad_alltoall_splits_on_one_rank_inside_tf_function(hvd, case):
    """The splits are a runtime tensor here: the kernel finds the problem on the bad rank."""
    n, bad = hvd.size(), hvd.size() - 1
    splits_of, text = BAD_SPLITS[case]
    splits = splits_of(n) if hvd.rank() == bad else [4] + [0] * (n - 1)
    dtype = tf.float32 if case == "fraction" else tf.int64

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32), tf.TensorSpec([None], dtype)])
    def exchange(x, s):
        return hvd.alltoall(x, splits=s, name=f"one_rank.fn.splits/{case}")[0]

    outcome = _outcome(lambda: exchange(tf.ones([4]), tf.constant(splits, dtype)))
    _job_goes_on(hvd, f"fn.splits/{case}")
    _check(hvd, bad, outcome, tf.errors.InvalidArgumentError, text,
           f"one_rank.fn.splits/{case}")
    got = exchange(tf.ones([4]), tf.constant([4] + [0] * (n - 1), dtype))  # the function still works
    assert got.shape[0] == (4 * n if hvd.rank() == 0 else 0)


def test_fractional_splits_are_refused_not_truncated(hvd):
    n = hvd.size()
    splits = [0.5, 0.5] + [0] * (n - 2) if n > 1 else [1.5]
    with pytest.raises(ValueError, match="splits must be whole numbers"):
        hvd.alltoall(tf.ones([1]), splits=splits)
    with pytest.raises(ValueError, match="splits must be whole numbers"):
        hvd.alltoall(tf.ones([1]), splits=tf.constant([1.0] + [0.0] * (n - 1)) + 0.25)
    _job_goes_on(hvd, "fractions")


class _Unpicklable:
    def __reduce__(self):
        raise pickle.PicklingError("this object refuses to be pickled")


@multi_rank
def test_broadcast_object_unpicklable_on_the_root_only(hvd):
    obj = _Unpicklable() if hvd.rank() == 0 else None
    outcome = _outcome(lambda: hvd.broadcast_object(obj, root_rank=0, name="one_rank.object"))
    _job_goes_on(hvd, "object")
    _check(hvd, 0, outcome, pickle.PicklingError, "this object refuses to be pickled",
           "one_rank.object.size")
    assert hvd.broadcast_object({"ok": hvd.rank()}, root_rank=0) == {"ok": 0}


@multi_rank
def test_allgather_object_unpicklable_on_one_rank(hvd):
    bad = hvd.size() - 1
    obj = _Unpicklable() if hvd.rank() == bad else hvd.rank()
    outcome = _outcome(lambda: hvd.allgather_object(obj, name="one_rank.gather_object"))
    _job_goes_on(hvd, "gather_object")
    _check(hvd, bad, outcome, pickle.PicklingError, "this object refuses to be pickled",
           "one_rank.gather_object.size")
    assert hvd.allgather_object(hvd.rank()) == list(range(hvd.size()))


@multi_rank
def test_root_rank_out_of_range_on_one_rank(hvd):
    n, bad = hvd.size(), hvd.size() - 1
    root = n + 3 if hvd.rank() == bad else 0
    outcome = _outcome(lambda: hvd.broadcast(tf.ones([2]), root_rank=root, name="one_rank.root"))
    _job_goes_on(hvd, "root")
    _check(hvd, bad, outcome, ValueError, f"received root_rank={n + 3}", "one_rank.root")


@multi_rank
def test_scalar_allgather_on_one_rank_and_unnamed_calls_stay_aligned(hvd):
    """The failed call still takes its automatic name on the bad rank, so the next unnamed
    collectives keep matching across ranks."""
    bad = hvd.size() - 1
    x = tf.constant(1.0) if hvd.rank() == bad else tf.ones([1])
    outcome = _outcome(lambda: hvd.allgather(x))
    err, _ = outcome
    assert err is not None
    if hvd.rank() != bad:
        assert "noname." in str(err) and f"failed on rank {bad}" in str(err), str(err)
    assert "rank >= 1" in str(err), str(err)
    got = hvd.allgather(tf.fill([1], float(hvd.rank())))  # unnamed: must pair with itself
    np.testing.assert_array_equal(got.numpy(), np.arange(hvd.size(), dtype=np.float32))


@pytest.mark.skipif(WORLD < 3, reason="a set of two ranks that is not the world needs three")
def test_bad_splits_on_one_member_of_a_process_set(hvd):
    members = list(range(1, hvd.size()))
    ps = hvd.add_process_set(members)
    try:
        if ps.included():
            k, bad = ps.size(), members[-1]
            splits = [-1, 3] + [0] * (k - 2) if hvd.rank() == bad else [2] + [0] * (k - 1)
            outcome = _outcome(lambda: hvd.alltoall(tf.ones([2]), splits=splits,
                                                    name="one_rank.set", process_set=ps))
            _check(hvd, bad, outcome, ValueError, "splits must be >= 0", "one_rank.set")
            got = hvd.allreduce(tf.constant(1.0), op=hvd.Sum, process_set=ps, name="one_rank.set.after")
            assert float(got) == k
    finally:
        hvd.remove_process_set(ps)
    _job_goes_on(hvd, "set")


@multi_rank
def test_every_rank_wrong_raises_each_ranks_own_error(hvd):
    """The common case (the same bug on every rank) stays a plain local error everywhere."""
    n = hvd.size()
    with pytest.raises(ValueError, match="splits sum to 9"):
        hvd.alltoall(tf.ones([4]), splits=[9] + [0] * (n - 1), name="one_rank.all_wrong")
    _job_goes_on(hvd, "all_wrong")

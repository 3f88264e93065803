"""join (ranks leaving at different times) and barrier."""

import time

import numpy as np
import pytest
import tensorflow as tf


def _contribution(rank, step, dtype):
    return np.arange(1, 6).astype(dtype) * (rank + 1) + step


@pytest.mark.parametrize("op,dtype", [("Sum", "float32"), ("Average", "float32"), ("Sum", "float16"),
                                      ("Sum", "int32"), ("Average", "float64")])
def test_join_with_ranks_leaving_at_different_times(hvd, op, dtype):
    """Rank r runs r + 1 allreduces, then joins; joined ranks contribute zeros.

    Two rounds with the same names: the second is served by the response cache.
    """
    n, r = hvd.size(), hvd.rank()
    rounds = []
    for _ in range(2):
        results = [hvd.allreduce(tf.constant(_contribution(r, step, dtype)), op=getattr(hvd, op),
                                 name=f"join/{op}/{dtype}/{step}")
                   for step in range(r + 1)]
        rounds.append((results, hvd.join()))
    # The job goes on normally afterwards.
    after = hvd.allreduce(tf.constant([1.0]), op=hvd.Sum, name=f"join/{op}/{dtype}/after")
    assert after.numpy()[0] == n
    for results, last in rounds:
        assert last == n - 1  # the rank with the most steps joins last
        for step, got in enumerate(results):
            total = sum(_contribution(q, step, "float64") for q in range(step, n))  # ranks still active
            expected = (total / n if op == "Average" else total).astype(dtype)
            np.testing.assert_allclose(got.numpy().astype(np.float64), expected.astype(np.float64),
                                       rtol=1e-6, err_msg=f"step {step}")


def test_join_with_grouped_allreduce_and_allgather(hvd):
    """Joined ranks contribute zeros to grouped allreduces; an allgather fails while any rank
    has joined (it would silently miss that rank's rows), on every rank that called it."""
    n, r = hvd.size(), hvd.rank()
    sums, gathers = [], []
    for step in range(r + 1):
        sums.append(hvd.grouped_allreduce([tf.fill([3], float(r + 1)), tf.fill([2, 2], float(step))],
                                          op=hvd.Sum, name=f"join.grouped/{step}"))
        try:
            gathers.append(hvd.allgather(tf.fill([r + 1, 2], r), name=f"join.gather/{step}"))
        except tf.errors.FailedPreconditionError as err:
            gathers.append(err)
    last = hvd.join()
    assert last == n - 1
    for step, ((a, b), g) in enumerate(zip(sums, gathers)):
        active = range(step, n)
        np.testing.assert_array_equal(a.numpy(), np.full([3], sum(q + 1.0 for q in active), np.float32))
        np.testing.assert_array_equal(b.numpy(), np.full([2, 2], step * len(active), np.float32))
        if step == 0:  # every rank took part
            expected = np.concatenate([np.full([q + 1, 2], q, np.int32) for q in active])
            np.testing.assert_array_equal(g.numpy(), expected)
        else:  # ranks 0 .. step - 1 had joined
            assert isinstance(g, tf.errors.FailedPreconditionError), g
            joined = "rank 0 has" if step == 1 else f"ranks {list(range(step))} have"
            assert "Cannot run allgather '" in str(g) and f"join.gather/{step}'" in str(g), str(g)
            assert f"{joined} joined" in str(g), str(g)


def test_join_by_every_rank_at_once(hvd):
    last = hvd.join()
    again = hvd.join()  # join can be used again after everyone joined
    everyone = hvd.allgather_object((last, again), name="join.at_once")
    assert 0 <= last < hvd.size() and 0 <= again < hvd.size()
    assert all(e == everyone[0] for e in everyone)


def test_barrier_waits_for_every_rank(hvd):
    r = hvd.rank()
    time.sleep(0.1 * r)  # arrive at different times
    entered = time.time()
    hvd.barrier()
    left = time.time()
    times = hvd.allgather_object((entered, left), name="barrier.times")
    latest_entry = max(t[0] for t in times)
    assert all(t[1] >= latest_entry for t in times), times


def test_barrier_repeated(hvd):
    for _ in range(3):
        hvd.barrier()
    got = hvd.allreduce(tf.constant(1), op=hvd.Sum, name="barrier.after")
    assert int(got) == hvd.size()

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


def test_unnamed_collectives_around_join(hvd):
    """Rank r runs r + 1 unnamed allreduces (and a traced function's), then joins: the ranks
    that joined early skipped the others' unnamed calls, yet afterwards every rank's unnamed
    collectives pair again (join() restarts the eager counters on every rank), as in Horovod."""
    n, r = hvd.size(), hvd.rank()

    @tf.function
    def traced(x):
        return hvd.allreduce(x, op=hvd.Sum)

    eager, in_function = [], []
    for step in range(r + 1):
        eager.append(hvd.allreduce(tf.constant([float(r + 1), step]), op=hvd.Sum))
        in_function.append(traced(tf.constant([float(r + 1)])))
    assert hvd.join() == n - 1
    for step, (got, got_traced) in enumerate(zip(eager, in_function)):
        active = range(step, n)  # the ranks still working at this step
        np.testing.assert_array_equal(got.numpy(), [sum(q + 1.0 for q in active), step * len(active)])
        np.testing.assert_array_equal(got_traced.numpy(), [sum(q + 1.0 for q in active)])
    for _ in range(2):
        np.testing.assert_array_equal(hvd.allreduce(tf.constant([1.0]), op=hvd.Sum).numpy(), [n])
        np.testing.assert_array_equal(traced(tf.constant([2.0])).numpy(), [2.0 * n])
        np.testing.assert_array_equal(hvd.allgather(tf.constant([r])).numpy(), list(range(n)))
        hvd.barrier()


def test_collectives_of_constants_run_every_time(hvd):
    """A traced function whose collective reduces a constant (or tf.shape of a statically
    shaped tensor): TensorFlow must run it at every call, never fold it into the constant of
    its first run. Here the last rank joins before the second call, so the sum changes."""
    n, r = hvd.size(), hvd.rank()

    @tf.function
    def count():
        return hvd.allreduce(tf.constant(1.0), op=hvd.Sum, name="join.constant")

    @tf.function
    def rows(x):
        return hvd.allreduce(tf.cast(tf.shape(x)[0], tf.float32), op=hvd.Sum, name="join.rows")

    first = (float(count()), float(rows(tf.ones([3]))))
    if r != n - 1:
        second = (float(count()), float(rows(tf.ones([3]))))
    hvd.join()
    assert first == (n, 3.0 * n)
    if r != n - 1:
        assert second == (n - 1, 3.0 * (n - 1)), second


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

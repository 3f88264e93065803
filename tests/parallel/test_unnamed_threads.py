"""Unnamed collectives issued by several Python threads at the same time.

Ranks match an unnamed collective by an automatic name: a per-kind call counter. Two threads
interleave their calls differently on each rank, so one shared counter would pair thread a's
call on rank 0 with thread b's call on rank 1 and return wrong sums without any error. The
counters are therefore kept per thread (the main thread's, and one per thread name for the
others), and two live threads with the same name that issue unnamed collectives get an error
asking for name=.
"""

import threading

import numpy as np
import pytest
import tensorflow as tf

CALLS = 150  # per thread; ~half the results were wrong with one shared counter at 2 ranks


def _run_threads(targets):
    """Starts one thread per (name, function), joins them, re-raises the first error."""
    errors = []

    def guarded(fn):
        def run():
            try:
                fn()
            except BaseException as err:  # noqa: BLE001  (re-raised in the main thread)
                errors.append(err)
        return run

    threads = [threading.Thread(target=guarded(fn), name=name) for name, fn in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a thread is still running"
    return errors


def test_unnamed_allreduces_from_two_threads_are_correct(hvd):
    n, r = hvd.size(), hvd.rank()
    results = {}

    def work(tag, base):
        def run():
            got = []
            for i in range(CALLS):
                # Every rank adds its rank, so each call's sum is unique to (thread, call).
                x = tf.constant([base + i, float(r)])
                got.append(hvd.allreduce(x, op=hvd.Sum).numpy())
            results[tag] = got
        return run

    errors = _run_threads([("kerashvd.test.a", work("a", 0.0)),
                           ("kerashvd.test.b", work("b", 10000.0))])
    assert not errors, errors
    ranks_sum = n * (n - 1) / 2
    for tag, base in (("a", 0.0), ("b", 10000.0)):
        expected = np.array([[n * (base + i), ranks_sum] for i in range(CALLS)], np.float32)
        wrong = int(np.sum(np.any(np.stack(results[tag]) != expected, axis=1)))
        assert wrong == 0, f"thread {tag}: {wrong} of {CALLS} results wrong"
    # The main thread's own counter is independent of the threads'.
    got = hvd.allreduce(tf.constant([1.0]), op=hvd.Sum)
    assert got.numpy()[0] == n


def test_unnamed_collectives_from_two_threads_with_one_name_are_refused(hvd):
    """Both threads are alive before either calls, so the check fails on every rank alike."""
    both_started = threading.Barrier(2)
    messages = []

    def work():
        both_started.wait(timeout=60)
        try:
            hvd.allgather(tf.constant([1.0]))
        except ValueError as err:
            messages.append(str(err))
        both_started.wait(timeout=60)  # neither thread exits before both have called

    errors = _run_threads([("kerashvd.test.twin", work), ("kerashvd.test.twin", work)])
    assert not errors, errors
    assert len(messages) == 2, messages
    for message in messages:
        assert "'kerashvd.test.twin'" in message and "pass name=" in message, message
    # Named collectives from such threads still work, and so does the job.
    results = []

    def named(value, name):
        return lambda: results.append(hvd.allreduce(tf.constant(value), op=hvd.Sum, name=name))

    _run_threads([("kerashvd.test.twin", named(1.0, "twin.0")),
                  ("kerashvd.test.twin", named(2.0, "twin.1"))])
    assert sorted(float(x) for x in results) == [hvd.size(), 2.0 * hvd.size()]


@pytest.mark.parametrize("kind", ["allgather", "broadcast"])
def test_a_thread_reusing_a_finished_threads_name_continues_its_counter(hvd, kind):
    """A thread may take the name of one that has ended; their unnamed calls do not collide."""
    n = hvd.size()
    got = []

    def call():
        x = tf.constant([float(hvd.rank())])
        if kind == "allgather":
            got.append(hvd.allgather(x).numpy().tolist())
        else:
            got.append(hvd.broadcast(x, root_rank=n - 1).numpy().tolist())

    for _ in range(3):
        assert not _run_threads([("kerashvd.test.reused", call)])
    expected = list(map(float, range(n))) if kind == "allgather" else [float(n - 1)]
    assert got == [expected] * 3

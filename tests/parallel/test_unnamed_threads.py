"""Unnamed collectives: from several Python threads at the same time, and in traced functions.

Ranks match an unnamed collective by an automatic name (kerashvd/collectives/_names.py).
Eagerly it is a call counter. Two threads interleave their calls differently on each rank, so
one shared counter would pair thread a's call on rank 0 with thread b's call on rank 1 and
return wrong sums without any error. The counters are therefore kept per thread (the main
thread's, and one per thread name for the others), and two live threads with the same name
that issue unnamed collectives get an error asking for name=. So do unnamed collectives from a
thread pool or from a thread with Python's default name. Inside a tf.function the name is the
function's and the call's place in its trace, so a rank that retraces (a partial last batch)
still agrees with the others; the thread that calls the function is added to the key at each
call, so one traced function shared by several threads pairs each thread's calls with the same
thread's calls on the other ranks.
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


@pytest.mark.parametrize("where", ["eager", "tf.function per thread", "one tf.function"])
def test_unnamed_allreduces_from_two_threads_are_correct(hvd, where):
    """Eagerly, with a tf.function of one Python function per thread (each thread traces its
    own), and with one tf.function both threads call (one trace, its key completed by the
    calling thread at each call): the threads' calls never meet."""
    n, r = hvd.size(), hvd.rank()
    results = {}

    def body(x):
        return hvd.allreduce(x, op=hvd.Sum)

    shared = tf.function(body)

    def work(tag, base):
        def run():
            reduce = {"eager": body, "one tf.function": shared}.get(where) or tf.function(body)
            got = []
            for i in range(CALLS):
                # Every rank adds its rank, so each call's sum is unique to (thread, call).
                x = tf.constant([base + i, float(r)])
                got.append(reduce(x).numpy())
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


def test_one_traced_function_with_a_gradient_called_by_two_threads_at_once(hvd):
    """One tf.function, traced once, holding an allreduce and its gradient (a tape inside the
    function), called by two threads at once: without the calling thread in the key, the
    threads' calls share one key, so each rank would refuse a different thread's call as
    already in flight, or pair thread a's call on one rank with thread b's on another."""
    n, r = hvd.size(), hvd.rank()

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            total = hvd.allreduce(x * x, op=hvd.Sum)
            loss = tf.reduce_sum(total)
        return total, tape.gradient(loss, x)

    results = {}

    def work(tag, base):
        def run():
            results[tag] = [[t.numpy().tolist() for t in step(tf.constant([base + i, r + 1.0]))]
                            for i in range(CALLS // 3)]
        return run

    errors = _run_threads([("kerashvd.test.a", work("a", 1.0)),
                           ("kerashvd.test.b", work("b", 1000.0))])
    assert not errors, errors
    squares = sum((q + 1.0) ** 2 for q in range(n))
    for tag, base in (("a", 1.0), ("b", 1000.0)):
        for i, (total, grad) in enumerate(results[tag]):
            v = base + i
            assert total == [n * v * v, squares], (tag, i, total)
            # d/dx of the sum over ranks of x*x: the allreduce's gradient is a Sum.
            assert grad == [2 * v * n, 2 * (r + 1.0) * n], (tag, i, grad)
    assert step.experimental_get_tracing_count() == 1


def test_a_traced_function_called_from_a_pool_worker_is_refused_at_the_call(hvd):
    """Traced on the main thread, called from a pool's worker: refused at each call on every
    rank alike, as an eager unnamed call from there is; from the main thread it still works."""
    import concurrent.futures

    @tf.function
    def step(x):
        return hvd.allreduce(x, op=hvd.Sum)

    assert float(step(tf.constant(1.0))) == hvd.size()
    with concurrent.futures.ThreadPoolExecutor(1) as executor:
        messages = executor.submit(lambda: _refusals([lambda: step(tf.constant(2.0))])).result()
    assert len(messages) == 1 and "is a worker of a thread pool" in messages[0], messages
    assert float(step(tf.constant(3.0))) == 3.0 * hvd.size()


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


def _refusals(calls):
    """Runs each call, returns the messages of the ValueErrors they raised."""
    messages = []
    for call in calls:
        try:
            call()
        except ValueError as err:
            messages.append(str(err))
    return messages


@pytest.mark.parametrize("pool", ["ThreadPoolExecutor", "ThreadPool", "named prefix"])
def test_unnamed_collectives_from_a_thread_pool_are_refused(hvd, pool):
    """A pool hands its tasks to its threads in a different order on each rank: unnamed calls
    would pair task i on one rank with task j on another (wrong sums, or a hang). Every rank
    refuses them alike; with name= per task the same pool gives the right sums."""
    import concurrent.futures
    import multiprocessing.pool

    n, r = hvd.size(), hvd.rank()

    def task(i, name=None):
        return hvd.allreduce(tf.constant(1000.0 * i + r), op=hvd.Sum, name=name).numpy()

    def unnamed(i):
        return _refusals([lambda: task(i)])

    if pool == "ThreadPool":
        with multiprocessing.pool.ThreadPool(2) as executor:
            refused = executor.map(unnamed, range(20))
            named = executor.map(lambda i: task(i, f"pool.{pool}.{i}"), range(20))
    else:
        prefix = "kerashvd-test-pool" if pool == "named prefix" else ""
        with concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix=prefix) as executor:
            refused = list(executor.map(unnamed, range(20)))
            named = list(executor.map(lambda i: task(i, f"pool.{pool}.{i}"), range(20)))
    assert all(len(messages) == 1 for messages in refused), refused
    message = refused[0][0]
    assert "is a worker of a thread pool" in message and "Pass name=" in message, message
    expected = [1000.0 * i * n + n * (n - 1) / 2 for i in range(20)]
    assert [float(x) for x in named] == expected


def test_unnamed_collectives_from_a_default_named_thread_are_refused(hvd):
    """Thread-N numbers threads in the order a rank started them, which can differ."""
    messages = []
    thread = threading.Thread(target=lambda: messages.extend(
        _refusals([lambda: hvd.allgather(tf.constant([1.0]))])))
    thread.start()
    thread.join(timeout=60)
    assert len(messages) == 1, messages
    assert f"thread {thread.name!r} has Python's default name" in messages[0], messages[0]
    # Named collectives from it, and unnamed ones from the main thread, still work.
    results = []
    thread = threading.Thread(target=lambda: results.append(
        hvd.allreduce(tf.constant(2.0), op=hvd.Sum, name="default_thread.named")))
    thread.start()
    thread.join(timeout=60)
    assert float(results[0]) == 2.0 * hvd.size()
    assert float(hvd.allreduce(tf.constant(1.0), op=hvd.Sum)) == hvd.size()


def test_unnamed_collectives_in_a_function_that_one_rank_retraces(hvd):
    """A custom training loop over a dataset with drop_remainder=False: rank 0's last batch is
    partial, so only rank 0 retraces the step; the eager calls around it and the later steps
    still pair. Nested functions and tf.cond branches name their collectives alike."""
    n, r = hvd.size(), hvd.rank()

    @tf.function
    def inner(x):
        return hvd.allreduce(tf.reduce_sum(x), op=hvd.Sum)

    @tf.function
    def step(x):
        total = hvd.allreduce(tf.reduce_sum(x), op=hvd.Sum)
        rows = hvd.allgather(tf.shape(x)[:1])
        branch = tf.cond(total > 0, lambda: hvd.allreduce(x[:1], op=hvd.Max),
                         lambda: hvd.allreduce(-x[:1], op=hvd.Max))
        return total, rows, branch, inner(x)

    batches = [4, 4, 3, 4] if r == 0 else [4, 4, 4, 4]
    for i, size in enumerate(batches):
        x = tf.ones([size]) * (r + 1)
        total, rows, branch, nested = step(x)
        sizes = [3 if (q == 0 and i == 2) else 4 for q in range(n)]
        expected = sum((q + 1.0) * sizes[q] for q in range(n))
        assert float(total) == expected and float(nested) == expected, (i, total, nested)
        assert rows.numpy().tolist() == sizes, (i, rows)
        assert branch.numpy().tolist() == [float(n)], (i, branch)
        # An eager unnamed call between steps pairs too (traces do not count eagerly).
        assert float(hvd.allreduce(tf.constant(1.0), op=hvd.Sum)) == n
    assert step.experimental_get_tracing_count() == (2 if r == 0 else 1)

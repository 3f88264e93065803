"""Ranks that disagree, and wrong arguments.

A mismatch (shape, dtype, op, scale, root rank, ... differing between ranks) must fail with
tf.errors.FailedPreconditionError (as in Horovod) on EVERY rank, naming the tensor, the field and each rank's
value, and the job must go on afterwards. Wrong arguments fail locally, before any collective.
Mismatches need two ranks; at size 1 those tests are skipped (on every rank alike).
"""

import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from fixtures.reference import WORLD

multi_rank = pytest.mark.skipif(WORLD == 1, reason="a mismatch needs at least two ranks")


def _mismatch_message(fn):
    """Runs ``fn`` (a collective that must mismatch) and returns the error text on this rank."""
    with pytest.raises(tf.errors.FailedPreconditionError) as info:
        fn()
    return str(info.value)


def _assert_names(message, kind, tensor, field, values):
    assert f"Mismatched {kind} for tensor '{tensor}'" in message, message
    assert f"ranks disagree on {field}:" in message, message
    for q, v in enumerate(values):
        assert f"rank {q} {v};" in message, f"rank {q} {v} not in: {message}"


def _job_goes_on(hvd, tag):
    got = hvd.allreduce(tf.constant([1.0, 2.0]), op=hvd.Sum, name=f"mismatch.after/{tag}")
    np.testing.assert_array_equal(got.numpy(), [hvd.size(), 2.0 * hvd.size()])


def _others(r, first, other):
    return first if r == 0 else other


@multi_rank
def test_shape_mismatch(hvd):
    r, n = hvd.rank(), hvd.size()
    msg = _mismatch_message(lambda: hvd.allreduce(tf.ones([_others(r, 2, 3)]), name="mm.shape"))
    _job_goes_on(hvd, "shape")
    _assert_names(msg, "allreduce", "mm.shape", "shape", ["[2]"] + ["[3]"] * (n - 1))


@multi_rank
@pytest.mark.parametrize("named", [True, False], ids=["named", "unnamed"])
def test_different_kinds_under_one_name(hvd, named):
    """Rank 0 allreduces what the others allgather, under one name (or as the same unnamed
    call): every rank raises the mismatch naming both kinds, instead of each kind waiting for
    the other ranks for ever."""
    r, n = hvd.rank(), hvd.size()
    name = "mm.kinds" if named else None
    x = tf.ones([2])
    if r == 0:
        msg = _mismatch_message(lambda: hvd.allreduce(x, op=hvd.Sum, name=name))
    else:
        msg = _mismatch_message(lambda: hvd.allgather(x, name=name))
    _job_goes_on(hvd, f"kinds/{named}")
    tensor = "mm.kinds" if named else msg.split("for tensor '")[1].split("'")[0]
    assert named or tensor.startswith("noname."), msg
    _assert_names(msg, "allreduce", tensor, "collective", ["allreduce"] + ["allgather"] * (n - 1))


@multi_rank
def test_dtype_mismatch(hvd):
    r, n = hvd.rank(), hvd.size()
    dtype = _others(r, tf.float32, tf.float64)
    msg = _mismatch_message(lambda: hvd.allreduce(tf.ones([4], dtype), name="mm.dtype"))
    _job_goes_on(hvd, "dtype")
    _assert_names(msg, "allreduce", "mm.dtype", "dtype", ["float32"] + ["float64"] * (n - 1))


@multi_rank
def test_op_mismatch(hvd):
    r, n = hvd.rank(), hvd.size()
    op = _others(r, hvd.Sum, hvd.Max)
    msg = _mismatch_message(lambda: hvd.allreduce(tf.ones([4]), op=op, name="mm.op"))
    _job_goes_on(hvd, "op")
    _assert_names(msg, "allreduce", "mm.op", "reduce op", ["Sum"] + ["Max"] * (n - 1))


@multi_rank
def test_prescale_mismatch(hvd):
    r, n = hvd.rank(), hvd.size()
    msg = _mismatch_message(lambda: hvd.allreduce(tf.ones([4]), op=hvd.Sum, prescale_factor=_others(r, 1.0, 2.0),
                                                  name="mm.prescale"))
    _job_goes_on(hvd, "prescale")
    _assert_names(msg, "allreduce", "mm.prescale", "prescale_factor", ["1"] + ["2"] * (n - 1))


@multi_rank
def test_root_rank_mismatch(hvd):
    r, n = hvd.rank(), hvd.size()
    msg = _mismatch_message(lambda: hvd.broadcast(tf.ones([3]), root_rank=_others(r, 0, 1), name="mm.root"))
    _job_goes_on(hvd, "root")
    _assert_names(msg, "broadcast", "mm.root", "root_rank", ["0"] + ["1"] * (n - 1))


@multi_rank
def test_allgather_trailing_shape_mismatch(hvd):
    r, n = hvd.rank(), hvd.size()
    x = tf.ones([r + 1, _others(r, 2, 3)])  # first dims may differ, the others may not
    msg = _mismatch_message(lambda: hvd.allgather(x, name="mm.gather"))
    _job_goes_on(hvd, "gather")
    _assert_names(msg, "allgather", "mm.gather", "shape", ["[*, 2]"] + ["[*, 3]"] * (n - 1))


@multi_rank
def test_reducescatter_first_dim_mismatch(hvd):
    r, n = hvd.rank(), hvd.size()
    msg = _mismatch_message(lambda: hvd.reducescatter(tf.ones([_others(r, 4, 5)]), name="mm.scatter"))
    _job_goes_on(hvd, "scatter")
    _assert_names(msg, "reducescatter", "mm.scatter", "shape", ["[4]"] + ["[5]"] * (n - 1))


@multi_rank
def test_grouped_number_of_tensors_mismatch(hvd):
    r, n = hvd.rank(), hvd.size()
    tensors = [tf.ones([2])] * _others(r, 1, 2)
    msg = _mismatch_message(lambda: hvd.grouped_allreduce(tensors, name="mm.group"))
    _job_goes_on(hvd, "group")
    _assert_names(msg, "allreduce", "mm.group", "number of tensors", ["1"] + ["2"] * (n - 1))


@multi_rank
def test_mismatch_after_the_signature_was_cached(hvd):
    """A name that worked before (served by the response cache) still fails cleanly."""
    r, n = hvd.rank(), hvd.size()
    for _ in range(2):
        hvd.allreduce(tf.ones([2]), name="mm.cached")
    msg = _mismatch_message(lambda: hvd.allreduce(tf.ones([_others(r, 2, 5)]), name="mm.cached"))
    again = hvd.allreduce(tf.ones([2]), op=hvd.Sum, name="mm.cached.sum")
    _assert_names(msg, "allreduce", "mm.cached", "shape", ["[2]"] + ["[5]"] * (n - 1))
    np.testing.assert_array_equal(again.numpy(), [n, n])


@multi_rank
def test_mismatch_inside_tf_function(hvd):
    r, n = hvd.rank(), hvd.size()

    @tf.function
    def step(x):
        return hvd.allreduce(x, name="mm.fn")

    msg = _mismatch_message(lambda: step(tf.ones([_others(r, 3, 4)])))
    _job_goes_on(hvd, "fn")
    _assert_names(msg, "allreduce", "mm.fn", "shape", ["[3]"] + ["[4]"] * (n - 1))


@multi_rank
def test_one_mismatch_among_several_collectives_in_a_function(hvd):
    """Only the mismatching collective fails; the function raises; its other collectives and a
    later rerun with matching shapes work."""
    r, n = hvd.rank(), hvd.size()

    @tf.function
    def step(a, b, c):
        return (hvd.allreduce(a, op=hvd.Sum, name="mm.several.a"), hvd.allreduce(b, name="mm.several.b"),
                hvd.allreduce(c, op=hvd.Sum, name="mm.several.c"))

    msg = _mismatch_message(lambda: step(tf.ones([2]), tf.ones([_others(r, 3, 4)]), tf.ones([5])))
    a, b, c = step(tf.ones([2]), tf.ones([3]), tf.ones([5]))
    _assert_names(msg, "allreduce", "mm.several.b", "shape", ["[3]"] + ["[4]"] * (n - 1))
    assert "mm.several.a" not in msg and "mm.several.c" not in msg
    np.testing.assert_array_equal(a.numpy(), [n, n])
    np.testing.assert_array_equal(b.numpy(), [1.0, 1.0, 1.0])
    np.testing.assert_array_equal(c.numpy(), [n] * 5)


def _overlapping_calls(hvd, call, tag):
    """Two named threads run ``call(thread)`` at once on every rank; the last rank starts
    them only once the others' calls have long been in flight (both waiting for it), so
    every other rank holds two calls of one name at once. Returns each thread's outcome:
    the result, or the InvalidArgumentError's message."""
    n, r = hvd.size(), hvd.rank()
    late = n - 1
    outcomes = {}
    both = threading.Barrier(2)

    def run(thread):
        both.wait(timeout=60)
        try:
            outcomes[thread] = call(thread)
        except tf.errors.InvalidArgumentError as err:
            outcomes[thread] = str(err)

    if r == late:  # told to go by the others, well after their calls started
        hvd.allreduce(tf.constant(0.0), name=f"overlap.go/{tag}")
    threads = [threading.Thread(target=run, args=(t,), name=f"kerashvd.test.overlap.{t}")
               for t in range(2)]
    for t in threads:
        t.start()
    if r != late:
        time.sleep(2.0)  # both threads' calls are in the engine now, waiting for the last rank
        hvd.allreduce(tf.constant(0.0), name=f"overlap.go/{tag}")
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a call hangs"
    return outcomes


@multi_rank
@pytest.mark.parametrize("shared", ["name", "named in a tf.function"])
def test_one_name_in_flight_twice_fails_on_every_rank(hvd, shared):
    """Two threads use one name= at once, eagerly or through one traced function that holds
    the named collective. No rank can tell which of another rank's calls goes with which of
    its own, so none pairs them: all calls fail on every rank, the late rank's as they arrive,
    naming the name and the fix. Then the name works again."""
    n, r = hvd.size(), hvd.rank()
    name = "overlap.explicit"

    @tf.function
    def step(x):
        return hvd.allreduce(x, op=hvd.Sum, name=name)

    def call(thread, value=None):
        x = tf.constant(100.0 * (thread + 1) + r if value is None else value)
        return float(step(x) if shared != "name" else hvd.allreduce(x, op=hvd.Sum, name=name))

    call(0, value=1.0)  # traces the function in the main thread
    outcomes = _overlapping_calls(hvd, call, shared)
    assert sorted(outcomes) == [0, 1], outcomes
    for thread, outcome in outcomes.items():
        assert isinstance(outcome, str), f"thread {thread} got {outcome} instead of an error"
        assert f"allreduce '{name}' was called again while an earlier call" in outcome, outcome
        assert "Give each thread its own names" in outcome, outcome
    # Every rank failed the same two calls, so the next ones pair again.
    assert call(0, value=1.0) == n
    assert call(0, value=float(r)) == n * (n - 1) / 2


@multi_rank
def test_one_traced_function_in_flight_from_two_threads_pairs_by_thread(hvd):
    """Two named threads call one traced function, whose collective is unnamed, at once,
    while the last rank starts its calls late: each thread's call pairs with the same
    thread's call on every rank (the calling thread completes the key at run time), so both
    complete with their own sums, never each other's."""
    n, r = hvd.size(), hvd.rank()

    @tf.function
    def step(x):
        return hvd.allreduce(x, op=hvd.Sum)

    def call(thread, value=None):
        return float(step(tf.constant(100.0 * (thread + 1) + r if value is None else value)))

    assert call(0, value=1.0) == n  # traced in the main thread
    outcomes = _overlapping_calls(hvd, call, "unnamed in a tf.function")
    ranks_sum = n * (n - 1) / 2
    assert outcomes == {t: n * 100.0 * (t + 1) + ranks_sum for t in range(2)}, outcomes
    assert call(0, value=float(r)) == ranks_sum


@multi_rank
@pytest.mark.parametrize("where", ["eager", "tf.function"])
@pytest.mark.parametrize("call", ["allreduce", "grouped_allreduce"])
def test_indexed_slices_on_one_rank_dense_on_the_others(hvd, where, call):
    """An allreduce of tf.IndexedSlices is an allgather of their values and indices; against
    a dense allreduce under the same name it is the mismatch error on every rank, naming both
    kinds, not a stall. The job goes on."""
    r, n = hvd.rank(), hvd.size()
    name = f"mm.sparse/{call}/{where}"

    def reduce(x):
        if call == "allreduce":
            return hvd.allreduce(x, op=hvd.Sum, name=name)
        return hvd.grouped_allreduce([x], op=hvd.Sum, name=name)

    if where == "tf.function":
        reduce = tf.function(reduce)
    if r == 0:
        x = tf.IndexedSlices(tf.ones([2, 3]), tf.constant([0, 1], tf.int64),
                             dense_shape=tf.constant([4, 3], tf.int64))
    else:
        x = tf.ones([4, 3])
    msg = _mismatch_message(lambda: reduce(x))
    _job_goes_on(hvd, f"sparse/{call}/{where}")
    _assert_names(msg, "allgather", name, "collective", ["allgather"] + ["allreduce"] * (n - 1))
    assert "tf.IndexedSlices" in msg, msg


@multi_rank
def test_indexed_slices_of_another_dtype_or_count_in_a_group(hvd):
    """Grouped IndexedSlices that differ in number or in values dtype: the mismatch error on
    every rank, each time, and no collective of the call is left waiting."""
    r, n = hvd.rank(), hvd.size()

    def slices(dtype):
        return tf.IndexedSlices(tf.ones([1, 2], dtype), tf.constant([r], tf.int64),
                                dense_shape=tf.constant([4, 2], tf.int64))

    first = [slices(tf.float32), slices(tf.float64)]
    cases = {
        "count": (first, [slices(tf.float32)], "number of tensors", "2", "1"),
        "dtype": ([slices(tf.float64)], [slices(tf.float32)], "dtype", "float64", "float32"),
        "second dtype": (first, [slices(tf.float32), slices(tf.float32)], "number of tensors",
                         "1", "2"),
    }
    for case, (mine, theirs, field, value0, value) in cases.items():
        name = f"mm.sparse.group/{case}"
        msg = _mismatch_message(lambda: hvd.grouped_allreduce(mine if r == 0 else theirs,
                                                              op=hvd.Sum, name=name))
        assert f"ranks disagree on {field}:" in msg, (case, msg)
        assert f"rank 0 {value0};" in msg and f"rank 1 {value};" in msg, (case, msg)
    _job_goes_on(hvd, "sparse.group")


# --- wrong arguments: local errors, no collective is started --------------------------------


def test_bad_reduce_op(hvd):
    x = tf.ones([2])
    for op in [7, -1, "Sum", 2.5]:
        with pytest.raises(ValueError, match="op must be one of"):
            hvd.allreduce(x, op=op)
    with pytest.raises(ValueError, match="either op= or the deprecated average="):
        hvd.allreduce(x, op=hvd.Sum, average=True)
    with pytest.raises(ValueError, match="op must be one of kerashvd.Average, kerashvd.Sum"):
        hvd.reducescatter(x, op=hvd.Max)
    with pytest.raises(ValueError, match="op must be one of"):
        hvd.grouped_allreduce([x], op=9)


def test_bad_root_rank(hvd):
    for root in [-1, hvd.size(), 1.5, True, "0", None]:
        with pytest.raises(ValueError, match=r"root_rank must be an int in \[0, "):
            hvd.broadcast(tf.ones([2]), root_rank=root)
        with pytest.raises(ValueError, match="root_rank"):
            hvd.grouped_broadcast([tf.ones([2])], root_rank=root)


def test_bad_name(hvd):
    for name in ["", 3]:
        with pytest.raises(ValueError, match="name must be a non-empty string"):
            hvd.allreduce(tf.ones([2]), name=name)


@pytest.mark.parametrize("fn", ["allreduce", "allgather", "broadcast", "alltoall", "reducescatter"])
def test_unsupported_dtype(hvd, fn):
    call = {
        "allreduce": lambda t: hvd.allreduce(t),
        "allgather": lambda t: hvd.allgather(t),
        "broadcast": lambda t: hvd.broadcast(t, root_rank=0),
        "alltoall": lambda t: hvd.alltoall(t),
        "reducescatter": lambda t: hvd.reducescatter(t),
    }[fn]
    for value in [tf.constant(["a", "b"]), tf.constant([1 + 2j]), "text"]:
        with pytest.raises(TypeError, match=f"{fn} does not support dtype"):
            call(value)
    if fn in ("allreduce", "reducescatter"):  # these reduce: no bool, int16, uint16
        for dtype in [tf.bool, tf.int16, tf.uint16]:
            with pytest.raises(TypeError, match=f"{fn} does not support dtype {dtype.name}; supported:"):
                call(tf.zeros([2], dtype))


def test_not_a_tensor(hvd):
    with pytest.raises(TypeError, match="allreduce needs a tensor"):
        hvd.allreduce(object())
    with pytest.raises(TypeError, match="grouped_allreduce needs a list of tensors"):
        hvd.grouped_allreduce(tf.ones([2]))
    with pytest.raises(TypeError, match="one dtype"):
        hvd.grouped_allreduce([tf.ones([2]), tf.ones([2], tf.float64)])
    with pytest.raises(TypeError, match="one dtype"):
        hvd.grouped_allgather([tf.ones([2]), tf.ones([2], tf.int32)])


# Shape errors: ValueError from the Python boundary when the shapes and splits are known there;
# inside tf.function, where they may not be, the kernel checks them before submitting anything.


def test_bad_shapes_are_value_errors(hvd):
    n = hvd.size()
    cases = {
        "allgather of a scalar": (lambda: hvd.allgather(tf.constant(1.0)), "rank >= 1"),
        "grouped_allgather of a scalar": (lambda: hvd.grouped_allgather([tf.ones([1]), tf.constant(1.0)]),
                                          "rank >= 1"),
        "reducescatter of a scalar": (lambda: hvd.reducescatter(tf.constant(1.0)), "rank >= 1"),
        "alltoall of a scalar": (lambda: hvd.alltoall(tf.constant(1.0)), "rank >= 1"),
        "splits not summing": (lambda: hvd.alltoall(tf.ones([4]), splits=[5] + [0] * (n - 1)),
                               "splits sum to 5 but the tensor has 4 rows"),
        "splits of the wrong length": (lambda: hvd.alltoall(tf.ones([4]), splits=[1] * (n + 1)),
                                       "one entry per rank"),
        "negative splits": (lambda: hvd.alltoall(tf.ones([4]), splits=[5, -1] + [0] * (n - 2))
                            if n > 1 else hvd.alltoall(tf.ones([4]), splits=[-1]), "splits must be >= 0"),
    }
    if n > 1:
        cases["rows not divisible without splits"] = (lambda: hvd.alltoall(tf.ones([n + 1])),
                                                      "divisible by the number of ranks")
    for what, (call, text) in cases.items():
        with pytest.raises(ValueError) as info:
            call()
        assert text in str(info.value), f"{what}: {info.value}"
    _job_goes_on(hvd, "bad_shapes")


def test_bad_splits_inside_tf_function_fail_in_the_kernel(hvd):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32), tf.TensorSpec([None], tf.int64)])
    def exchange(x, splits):
        return hvd.alltoall(x, splits=splits, name="mm.fn.splits")[0]

    n = hvd.size()
    with pytest.raises(tf.errors.InvalidArgumentError, match="splits sum to 5 but the tensor has 4 rows"):
        exchange(tf.ones([4]), tf.constant([5] + [0] * (n - 1), tf.int64))
    with pytest.raises(tf.errors.InvalidArgumentError, match="one entry per rank"):
        exchange(tf.ones([4]), tf.constant([4] + [0] * n, tf.int64))
    _job_goes_on(hvd, "fn_splits")

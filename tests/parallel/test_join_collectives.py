"""Collectives while some ranks are inside join().

A joined rank contributes the identity of the reduction to an allreduce (zeros for Sum and
Average, one for Product, the lowest value for Max, the highest for Min), so Max, Min and
Product give the result of the ranks still working. Broadcast, allgather, alltoall and
reducescatter cannot run with a joined rank: they fail, on every rank that called them, with
an error naming the collective, the tensor and the joined ranks. join() is global: all of
this holds in the process sets of the joined rank too.
"""

import numpy as np
import pytest
import tensorflow as tf

from fixtures.reference import WORLD


def _values(rank, step, dtype, op):
    """Values for which a joined rank's zeros would change the result of `op`."""
    base = np.arange(1, 6, dtype=np.float64) + rank + step
    if op == "Max":
        base = -base  # all negative: a 0 would win
    elif op == "Product":
        # A 0 would zero the product; these keep it exact in every dtype tested.
        base = 1.0 + (base % 3) * (1 if "int" in dtype else 0.25)
    return base.astype(dtype)


def _kind(dtype):
    """The numpy dtype the test values are made in: integers as such, floats in float64."""
    return dtype if "int" in dtype else "float64"


def _reduce(arrays, op):
    stacked = np.stack([a.astype(np.float64) for a in arrays])
    return {"Max": np.max, "Min": np.min, "Product": np.prod}[op](stacked, axis=0)


@pytest.mark.parametrize("op", ["Max", "Min", "Product"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16", "int32", "int64"])
def test_joined_ranks_contribute_the_identity(hvd, op, dtype):
    """Rank r runs r + 1 steps, then joins; every step's result is that of the active ranks.

    Each step runs a lone allreduce (its own path on the active ranks) and a grouped one (the
    fusion buffer), twice with the same names: the second round comes from the response cache.
    """
    n, r = hvd.size(), hvd.rank()
    tf_dtype = getattr(tf, dtype)
    np_dtype = np.float32 if dtype == "bfloat16" else dtype
    for round_ in range(2):
        results = []
        for step in range(r + 1):
            mine = tf.cast(tf.constant(_values(r, step, _kind(dtype), op)), tf_dtype)
            lone = hvd.allreduce(mine, op=getattr(hvd, op), name=f"join.identity/{op}/{dtype}/{step}")
            grouped = hvd.grouped_allreduce([mine, mine[:2]], op=getattr(hvd, op),
                                            name=f"join.identity.grouped/{op}/{dtype}/{step}")
            results.append((lone, grouped))
        assert hvd.join() == n - 1
        for step, (lone, (whole, part)) in enumerate(results):
            active = range(step, n)
            expected = _reduce([_values(q, step, _kind(dtype), op) for q in active], op)
            expected = tf.cast(tf.constant(expected), tf_dtype).numpy().astype(np_dtype)
            for got, want in ((lone, expected), (whole, expected), (part, expected[:2])):
                np.testing.assert_allclose(
                    tf.cast(got, tf.float64).numpy(), want.astype(np.float64), rtol=1e-6,
                    err_msg=f"{op} {dtype} round {round_} step {step}: active ranks {list(active)}")
    after = hvd.allreduce(tf.constant([1.0]), op=hvd.Sum, name=f"join.identity/{op}/{dtype}/after")
    assert after.numpy()[0] == n


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_joined_ranks_keep_nan_and_infinities_in_min_and_max(hvd, dtype):
    """Only rank 0 reduces: its own values come back, NaN and infinities included."""
    values = [np.nan, -3.0, 3.0, -np.inf, np.inf, -0.0]
    got = {}
    if hvd.rank() == 0:
        x = tf.constant(values, getattr(tf, dtype))
        got = {op: hvd.allreduce(x, op=getattr(hvd, op), name=f"join.nan/{op}/{dtype}")
               for op in ("Max", "Min")}
    hvd.join()
    for op, result in got.items():
        np.testing.assert_array_equal(result.numpy(), np.array(values, dtype), err_msg=op)


def _refused(hvd, last):
    """What the ranks but `last` run while it has joined: {what: (collective named, call)}."""
    n, r = hvd.size(), hvd.rank()
    rows = tf.reshape(tf.range(2 * n, dtype=tf.float32), [n, 2])
    return {
        "broadcast from the joined rank": ("broadcast", lambda: hvd.broadcast(
            tf.constant([7.0, 8.0]), root_rank=last, name="join.refused.bcast_joined_root")),
        "broadcast from an active rank": ("broadcast", lambda: hvd.broadcast(
            tf.constant([7.0, 8.0]), root_rank=0, name="join.refused.bcast_active_root")),
        "grouped_broadcast": ("broadcast", lambda: hvd.grouped_broadcast(
            [tf.constant([1.0]), tf.constant([2.0])], root_rank=0, name="join.refused.gbcast")),
        "allgather": ("allgather", lambda: hvd.allgather(tf.constant([7.0]),
                                                         name="join.refused.gather")),
        "grouped_allgather": ("allgather", lambda: hvd.grouped_allgather(
            [tf.constant([7.0]), tf.constant([1.0, 2.0])], name="join.refused.ggather")),
        "alltoall": ("alltoall", lambda: hvd.alltoall(rows, name="join.refused.alltoall")),
        "reducescatter": ("reducescatter", lambda: hvd.reducescatter(
            rows, op=hvd.Sum, name="join.refused.rs")),
        "grouped_reducescatter": ("reducescatter", lambda: hvd.grouped_reducescatter(
            [rows, rows], op=hvd.Sum, name="join.refused.grs")),
        "broadcast_object": ("broadcast", lambda: hvd.broadcast_object(
            {"a": 1}, root_rank=0, name="join.refused.bobj")),
        # Run by every rank before the join, so their signatures are in the response cache.
        "cached broadcast": ("broadcast", lambda: hvd.broadcast(
            tf.constant([float(r)]), root_rank=0, name="join.refused.cached")),
        "cached allgather": ("allgather", lambda: hvd.allgather(
            tf.constant([r]), name="join.refused.cached_gather")),
    }


def test_collectives_needing_every_rank_fail_under_join(hvd):
    """The last rank joins at once; the others get a named error from each such collective,
    both on first use and when the same collective's signature is in the response cache."""
    n, r = hvd.size(), hvd.rank()
    last = n - 1
    # Every rank runs them once together, so that their signatures are cached.
    cached_bcast = hvd.broadcast(tf.constant([float(r)]), root_rank=0, name="join.refused.cached")
    cached_gather = hvd.allgather(tf.constant([r]), name="join.refused.cached_gather")
    assert cached_bcast.numpy()[0] == 0.0
    assert list(cached_gather.numpy()) == list(range(n))
    failures = {}
    if r != last:
        for what, (kind, call) in _refused(hvd, last).items():
            with pytest.raises(tf.errors.FailedPreconditionError) as info:
                call()
            failures[what] = (kind, str(info.value))
    hvd.join()
    for what, (kind, message) in failures.items():
        assert f"Cannot run {kind} '" in message and "join.refused." in message, (what, message)
        assert f"rank {last} has joined" in message, (what, message)
        assert "before any rank calls join()" in message, (what, message)
    # The ranks are still in step: every collective works again once all have joined.
    again = hvd.broadcast(tf.constant([float(r)]), root_rank=last, name="join.refused.after")
    assert again.numpy()[0] == float(last)
    gathered = hvd.allgather(tf.constant([r]), name="join.refused.after_gather")
    assert list(gathered.numpy()) == list(range(n))


@pytest.mark.skipif(WORLD < 3, reason="a set of two ranks or more that leaves a rank out")
def test_join_counts_in_the_joined_ranks_process_sets(hvd):
    """Set `head` (all ranks but the last). Its last member joins at once, and so does the
    rank outside it; the other members allreduce on the set meanwhile (the joined member
    contributes the identity), and its allgather fails naming the joined member. After the
    join the set needs every member again."""
    n, r = hvd.size(), hvd.rank()
    head = hvd.add_process_set(list(range(n - 1)))
    joined = n - 2  # head's last member
    got = {}
    try:
        if r < joined:
            x = tf.constant([float(r + 1), -float(r + 1)])
            for op in ("Sum", "Average", "Max", "Min"):
                got[op] = hvd.allreduce(x, op=getattr(hvd, op), process_set=head,
                                        name=f"join.set/{op}").numpy()
            with pytest.raises(tf.errors.FailedPreconditionError) as info:
                hvd.allgather(tf.constant([r]), process_set=head, name="join.set.gather")
            got["gather"] = str(info.value)
        hvd.join()
        if head.included():
            after = hvd.allreduce(tf.constant([float(r + 1)]), op=hvd.Sum, process_set=head,
                                  name="join.set/after")
            np.testing.assert_array_equal(after.numpy(), [sum(q + 1.0 for q in range(n - 1))])
    finally:
        assert hvd.remove_process_set(head)
    if r < joined:
        values = np.array([[q + 1.0, -(q + 1.0)] for q in range(joined)])  # the active members
        np.testing.assert_array_equal(got["Sum"], values.sum(axis=0))
        np.testing.assert_array_equal(got["Average"], values.sum(axis=0) / (n - 1))
        np.testing.assert_array_equal(got["Max"], values.max(axis=0))
        np.testing.assert_array_equal(got["Min"], values.min(axis=0))
        assert "Cannot run allgather 'join.set.gather'" in got["gather"], got["gather"]
        assert f"rank {joined} has joined" in got["gather"], got["gather"]

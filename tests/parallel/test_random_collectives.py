"""Randomized collectives from several threads and process sets, with random joins.

Every rank draws the same plan from one seed (``KHVD_RANDOM_SEED``, printed on failure): in
each round, a few named threads issue their own random sequence of collectives (kind, dtype,
shape, reduce op, root, splits, process set, named or unnamed) while the main thread issues
its own; then the ranks leave one by one through ``join()`` after a random number of world
allreduces each, trying now and then a collective that join() refuses. Every rank computes
every rank's input (tests/_reference.py), so each result is checked against numpy on every
rank. Now and then the ranks of one collective disagree on
its shape or dtype, and every member must raise the mismatch error while the other threads'
collectives go on. Anything else fails the test: a wrong value, an unexpected error, a hang
(the stall shutdown of the MPI runs turns that into an error). Other seeds:
``KHVD_RANDOM_SEED=7 mpiexec -n 3 python -m pytest tests/parallel/test_random_collectives.py``.

The same file runs at 1 rank under plain pytest and at 2-4 ranks via tests/test_mpi_sizes.py.
"""

import os
import re
import threading

import numpy as np
import pytest
import tensorflow as tf

from _reference import assert_matches, rank_input, reduce_reference, scatter_rows, seed_of

SEED = int(os.environ.get("KHVD_RANDOM_SEED", "20261126"))
ROUNDS = 3
THREADS = 3          # named worker threads per round, plus the main thread
OPS_PER_THREAD = 8
REDUCE_OPS = ("Sum", "Average", "Min", "Max", "Product")
REFUSED_UNDER_JOIN = ("allgather", "broadcast", "alltoall", "reducescatter")
KINDS = ("allreduce", "grouped_allreduce", "allgather", "broadcast", "alltoall", "reducescatter")
DTYPES = ("float32", "float64", "int32", "int64", "float16")
SHAPES = [(), (0,), (1,), (5,), (3, 2), (7, 1)]
MISMATCH_RATE = 0.08


def _set_ranks(size):
    """The process sets used besides the world, by name (the same at every world size)."""
    sets = {"evens": list(range(0, size, 2))}
    if size >= 2:
        sets["odds"] = list(range(1, size, 2))
    if size >= 3:
        sets["head"] = list(range(size - 1))
    return sets


@pytest.fixture(scope="module")
def sets(hvd):
    if hvd.size() == 1:
        yield {}
        return
    registered = {name: hvd.add_process_set(ranks) for name, ranks in _set_ranks(hvd.size()).items()}
    yield registered
    for ps in registered.values():
        assert hvd.remove_process_set(ps)


def _draw_op(rng, key, size, set_names):
    """One random collective: a dict every rank draws alike."""
    kind = KINDS[rng.integers(len(KINDS))]
    scope = None if not set_names or rng.random() < 0.5 else set_names[rng.integers(len(set_names))]
    op = {"key": key, "kind": kind, "set": scope, "named": bool(rng.random() < 0.5),
          "dtype": DTYPES[rng.integers(len(DTYPES))]}
    # Now and then the first member submits another shape or dtype: every member must get
    # the mismatch error (and the other threads' collectives must go on unharmed).
    op["mismatch"] = (None if rng.random() > MISMATCH_RATE
                      else ("shape", "dtype")[rng.integers(2)])
    if kind in ("allreduce", "grouped_allreduce"):
        op["op"] = REDUCE_OPS[rng.integers(len(REDUCE_OPS))]
        count = 1 if kind == "allreduce" else int(rng.integers(1, 4))
        op["shapes"] = [SHAPES[rng.integers(len(SHAPES))] for _ in range(count)]
    elif kind == "reducescatter":
        op["op"] = ("Sum", "Average")[rng.integers(2)]
        op["dtype"] = ("float32", "float64", "int32")[rng.integers(3)]
        op["rows"] = int(rng.integers(0, 9))
    else:
        op["shapes"] = [(0,)]  # unused; rows below come from the key and the rank
    op["root_index"] = int(rng.integers(size))  # broadcast: a member, by index in the set
    return op


def _plan(size, set_names):
    """[round][thread] -> list of ops, thread 0 being the main thread; and the join steps."""
    rng = np.random.default_rng(SEED)
    rounds = []
    for rnd in range(ROUNDS):
        threads = [[_draw_op(rng, f"rand/{SEED}/{rnd}/{t}/{i}", size, set_names)
                    for i in range(OPS_PER_THREAD)] for t in range(THREADS + 1)]
        steps = [int(rng.integers(0, 3)) for _ in range(size)]  # world allreduces before join
        # Per step: the allreduce's op, and a collective refused under join (or None) tried first.
        join_ops = [(REDUCE_OPS[rng.integers(len(REDUCE_OPS))],
                     None if rng.random() < 0.5 else
                     REFUSED_UNDER_JOIN[rng.integers(len(REFUSED_UNDER_JOIN))])
                    for _ in range(max(steps, default=0))]
        rounds.append((threads, steps, join_ops))
    return rounds


def _members(op, sets, size):
    return list(range(size)) if op["set"] is None else sets[op["set"]].ranks


def _rows(key, rank):
    """Rows of ``rank``'s allgather input: 0 to 2, different per rank."""
    return int(seed_of(f"{key}/rows", rank).integers(0, 3))


def _alltoall_splits(key, sender, members):
    """Rows ``sender`` sends to each member: 0 to 2 each."""
    return [int(x) for x in seed_of(f"{key}/splits", sender).integers(0, 3, size=len(members))]


def _run_op(hvd, op, sets, name):
    """Runs ``op`` on this rank (a member of its set) and checks its result against numpy."""
    n, r = hvd.size(), hvd.rank()
    members = _members(op, sets, n)
    ps = hvd.global_process_set if op["set"] is None else sets[op["set"]]
    kind, dtype, key = op["kind"], op["dtype"], op["key"]
    what = f"seed {SEED}, {kind} {key} ({op}) on rank {r}"

    if kind in ("allreduce", "grouped_allreduce"):
        reduce_op = op["op"]
        input_kind = "product" if reduce_op == "Product" else "sum"
        inputs = [[rank_input(f"{key}/{j}", q, shape, dtype, input_kind) for q in members]
                  for j, shape in enumerate(op["shapes"])]
        mine = [tf.constant(per_rank[members.index(r)]) for per_rank in inputs]
        if kind == "allreduce":
            got = [hvd.allreduce(mine[0], op=getattr(hvd, reduce_op), name=name, process_set=ps)]
        else:
            got = hvd.grouped_allreduce(mine, op=getattr(hvd, reduce_op), name=name, process_set=ps)
        for j, per_rank in enumerate(inputs):
            expected = reduce_reference(per_rank, dtype, reduce_op, len(members))
            assert_matches(got[j].numpy(), expected, dtype, reduce_op, f"{what}, tensor {j}")
    elif kind == "allgather":
        parts = [rank_input(key, q, (_rows(key, q), 2), dtype) for q in members]
        got = hvd.allgather(tf.constant(parts[members.index(r)]), name=name, process_set=ps)
        assert_matches(got.numpy(), np.concatenate(parts), dtype, what=what)
    elif kind == "broadcast":
        root = members[op["root_index"] % len(members)]
        value = rank_input(key, root, (3,), dtype)
        mine = value if r == root else rank_input(key, r, (3,), dtype)
        got = hvd.broadcast(tf.constant(mine), root_rank=root, name=name, process_set=ps)
        assert_matches(got.numpy(), value, dtype, what=what)
    elif kind == "alltoall":
        splits = {q: _alltoall_splits(key, q, members) for q in members}
        parts = {q: rank_input(key, q, (sum(splits[q]), 2), dtype) for q in members}
        me = members.index(r)
        got, received = hvd.alltoall(tf.constant(parts[r]), splits=splits[r], name=name,
                                     process_set=ps)
        expected = [parts[q][sum(splits[q][:me]):sum(splits[q][:me + 1])] for q in members]
        assert_matches(got.numpy(), np.concatenate(expected), dtype, what=what)
        assert received.numpy().tolist() == [splits[q][me] for q in members], what
    elif kind == "reducescatter":
        inputs = [rank_input(key, q, (op["rows"], 3), dtype) for q in members]
        got = hvd.reducescatter(tf.constant(inputs[members.index(r)]), op=getattr(hvd, op["op"]),
                                name=name, process_set=ps)
        full = reduce_reference(inputs, dtype, op["op"], len(members))
        start, stop = scatter_rows(op["rows"], members.index(r), len(members))
        assert_matches(got.numpy(), full[start:stop], dtype, op["op"], what)
    else:
        raise AssertionError(f"unknown kind {kind}")


def _run_mismatch(hvd, op, sets, name):
    """The first member allreduces another shape or dtype than the others: every member gets
    the mismatch error naming the field (at one member, there is nobody to disagree with)."""
    members = _members(op, sets, hvd.size())
    ps = hvd.global_process_set if op["set"] is None else sets[op["set"]]
    first = hvd.rank() == members[0]
    if op["mismatch"] == "shape":
        x = tf.zeros([3 if first else 2], tf.float32)
    else:
        x = tf.zeros([2], tf.float64 if first else tf.float32)
    if len(members) == 1:
        hvd.allreduce(x, op=hvd.Sum, name=name, process_set=ps)
        return
    with pytest.raises(tf.errors.FailedPreconditionError) as info:
        hvd.allreduce(x, op=hvd.Sum, name=name, process_set=ps)
    message = str(info.value)
    assert f"ranks disagree on {op['mismatch']}" in message, (op, message)
    assert name is None or name in message, (op, message)


def _run_thread_ops(hvd, ops, sets, errors):
    r = hvd.rank()
    try:
        for i, op in enumerate(ops):
            if r not in _members(op, sets, hvd.size()):
                continue
            name = op["key"].replace("/", ".") if op["named"] else None
            if op["mismatch"]:
                _run_mismatch(hvd, op, sets, name)
            else:
                _run_op(hvd, op, sets, name)
    except BaseException as err:  # noqa: BLE001  (re-raised in the main thread)
        errors.append(err)


def _refused_under_join(hvd, kind, key, active):
    """Some rank has joined: ``kind`` must fail with the named error on every active rank."""
    x = tf.zeros([hvd.size(), 2], tf.float32)
    name = key.replace("/", ".") + "." + kind
    with pytest.raises(tf.errors.FailedPreconditionError) as info:
        if kind == "allgather":
            hvd.allgather(x, name=name)
        elif kind == "broadcast":
            hvd.broadcast(x, root_rank=active[0], name=name)
        elif kind == "alltoall":
            hvd.alltoall(x, name=name)
        else:
            hvd.reducescatter(x, op=hvd.Sum, name=name)
    message = str(info.value)
    assert re.search(r"ha(s|ve) joined", message) and name in message, (kind, message)


def _join_phase(hvd, rnd, steps, join_ops):
    """Rank q runs steps[q] world allreduces, then joins. Joined ranks contribute the
    operation's identity (zeros for Sum and Average, which still divides by the world size;
    nothing for Min, Max and Product), and the collectives that cannot run without them are
    refused on every active rank."""
    n, r = hvd.size(), hvd.rank()
    for s in range(steps[r]):
        reduce_op, refused = join_ops[s]
        key = f"rand/{SEED}/{rnd}/join/{s}"
        active = [q for q in range(n) if steps[q] > s]
        if refused is not None and len(active) < n:
            _refused_under_join(hvd, refused, key, active)
        input_kind = "product" if reduce_op == "Product" else "sum"
        inputs = [rank_input(key, q, (4,), "float32", input_kind) for q in range(n)]
        got = hvd.allreduce(tf.constant(inputs[r]), op=getattr(hvd, reduce_op),
                            name=key.replace("/", "."))
        if reduce_op in ("Sum", "Average"):
            zeros = np.zeros(4, np.float32)
            per_rank = [inputs[q] if q in active else zeros for q in range(n)]
            expected = reduce_reference(per_rank, "float32", reduce_op, n)
        else:
            expected = reduce_reference([inputs[q] for q in active], "float32", reduce_op, n)
        assert_matches(got.numpy(), expected, "float32", reduce_op,
                       f"seed {SEED}, round {rnd}, join step {s} ({reduce_op}), active ranks "
                       f"{active}, on rank {r}")
    last = hvd.join()
    longest = max(steps)
    if longest > 0:  # the ranks with the most steps can only join after all the others
        assert steps[last] == longest, (f"seed {SEED}, round {rnd}: join returned {last}, steps "
                                        f"{steps}")


def test_random_collectives_from_threads_and_sets_with_joins(hvd, sets):
    n = hvd.size()
    set_names = sorted(sets)
    for rnd, (threads, steps, join_ops) in enumerate(_plan(n, set_names)):
        errors = []
        workers = [threading.Thread(target=_run_thread_ops, args=(hvd, ops, sets, errors),
                                    name=f"kerashvd.test.random.{t}")
                   for t, ops in enumerate(threads[1:], start=1)]
        for worker in workers:
            worker.start()
        _run_thread_ops(hvd, threads[0], sets, errors)
        for worker in workers:
            worker.join(timeout=300)
        assert not any(w.is_alive() for w in workers), f"seed {SEED}: a thread hangs"
        if errors:
            raise errors[0]
        _join_phase(hvd, rnd, steps, join_ops)
    # The job goes on after the joins.
    assert float(hvd.allreduce(tf.constant(1.0), op=hvd.Sum, name="rand.after")) == n

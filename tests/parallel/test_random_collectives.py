"""Randomized collectives from several threads and process sets, with random joins.

Every rank draws the same plan from one seed (``KHVD_RANDOM_SEED``, printed on failure): in
each round, a few named threads issue their own random sequence of collectives (kind, dtype,
shape, reduce op, root, splits, process set, named or unnamed; IndexedSlices alone or beside
a dense tensor; a traced function whose unnamed collectives some ranks retrace and others
not) while the main thread issues its own; one thread's collective is used by two of its
sub-threads at once under one name, which every member must refuse, or in one traced function,
whose calls must both complete, each paired by its sub-thread.
Then the ranks leave one by one through ``join()`` after a random number of allreduces each,
named or not, in the world and in every set they belong to (where a joined member gives the
identity), trying now and then a collective that join() refuses. Every rank computes every
rank's input (tests/fixtures/reference.py), so each result is checked against numpy on every rank.
Now and then the ranks of one collective disagree on its shape or dtype, or on dense against
IndexedSlices, and every member must raise the mismatch error while the other threads'
collectives go on. Anything else fails the test: a wrong value, an unexpected error, a hang
(the stall shutdown of the MPI runs turns that into an error). Other seeds:
``KHVD_RANDOM_SEED=7 mpiexec -n 3 python -m pytest tests/parallel/test_random_collectives.py``.

The same file runs at 1 rank under plain pytest and at 2-4 ranks via tests/multiprocess/test_mpi_sizes.py.
"""

import os
import re
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

from fixtures.reference import assert_matches, rank_input, reduce_reference, scatter_rows, seed_of

SEED = int(os.environ.get("KHVD_RANDOM_SEED", "20261126"))
ROUNDS = 3
THREADS = 3          # named worker threads per round, plus the main thread
OPS_PER_THREAD = 8
REDUCE_OPS = ("Sum", "Average", "Min", "Max", "Product")
REFUSED_UNDER_JOIN = ("allgather", "broadcast", "alltoall", "reducescatter")
KINDS = ("allreduce", "grouped_allreduce", "allgather", "broadcast", "alltoall", "reducescatter",
         "sparse", "traced")
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
                      else ("shape", "dtype", "sparse")[rng.integers(3)])
    if kind in ("allreduce", "grouped_allreduce"):
        op["op"] = REDUCE_OPS[rng.integers(len(REDUCE_OPS))]
        count = 1 if kind == "allreduce" else int(rng.integers(1, 4))
        op["shapes"] = [SHAPES[rng.integers(len(SHAPES))] for _ in range(count)]
    elif kind == "reducescatter":
        op["op"] = ("Sum", "Average")[rng.integers(2)]
        op["dtype"] = ("float32", "float64", "int32")[rng.integers(3)]
        op["rows"] = int(rng.integers(0, 9))
    elif kind == "sparse":
        op["op"] = ("Sum", "Average")[rng.integers(2)]
        op["dtype"] = ("float32", "float64")[rng.integers(2)]
        op["grouped"] = bool(rng.random() < 0.5)  # beside a dense tensor
    elif kind == "traced":
        op["dtype"] = "float32"
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
        # One worker's collective is called by two of its sub-threads at once (one name or one
        # traced function).
        t, i = int(rng.integers(1, THREADS + 1)), int(rng.integers(OPS_PER_THREAD))
        threads[t][i] = {"key": threads[t][i]["key"], "kind": "overlap", "mismatch": None,
                         "dtype": "float32", "named": True, "set": threads[t][i]["set"],
                         "shared": ("name", "function")[rng.integers(2)]}
        steps = [int(rng.integers(0, 3)) for _ in range(size)]  # allreduces before join
        if rnd == 0 and size > 1:  # some rank skips unnamed calls the others make
            steps[-1] = max(steps) + 1
        # Per step: the allreduces' op, a collective refused under join (or None) tried first,
        # and whether the allreduces are named.
        join_ops = [(REDUCE_OPS[rng.integers(len(REDUCE_OPS))],
                     None if rng.random() < 0.5 else
                     REFUSED_UNDER_JOIN[rng.integers(len(REFUSED_UNDER_JOIN))],
                     bool(rnd > 0 and rng.random() < 0.5))
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
    elif kind == "sparse":
        _run_sparse(hvd, op, members, ps, name, what)
    elif kind == "traced":
        _run_traced(hvd, op, members, ps, what)
    elif kind == "overlap":
        _run_overlap(hvd, op, members, ps, what)
    else:
        raise AssertionError(f"unknown kind {kind}")


def _sparse_input(key, rank, dtype):
    rows = _rows(key, rank)
    indices = seed_of(f"{key}/indices", rank).integers(0, 8, size=rows)
    return rank_input(key, rank, (rows, 2), dtype), indices


def _run_sparse(hvd, op, members, ps, name, what):
    """An allreduce of IndexedSlices: every member's values and indices, in rank order."""
    r, key, dtype, reduce_op = hvd.rank(), op["key"], op["dtype"], op["op"]
    parts = {q: _sparse_input(key, q, dtype) for q in members}
    values, indices = parts[r]
    mine = tf.IndexedSlices(tf.constant(values), tf.constant(indices, tf.int64),
                            dense_shape=tf.constant([8, 2], tf.int64))
    if op["grouped"]:
        dense = [rank_input(f"{key}/dense", q, (3,), dtype) for q in members]
        got_dense, got = hvd.grouped_allreduce([tf.constant(dense[members.index(r)]), mine],
                                               op=getattr(hvd, reduce_op), name=name, process_set=ps)
        assert_matches(got_dense.numpy(), reduce_reference(dense, dtype, reduce_op, len(members)),
                       dtype, reduce_op, f"{what}, dense")
    else:
        got = hvd.allreduce(mine, op=getattr(hvd, reduce_op), name=name, process_set=ps)
    scale = 1.0 / len(members) if reduce_op == "Average" else 1.0
    expected = np.concatenate([parts[q][0].astype(np.float64) for q in members]) * scale
    assert_matches(got.values.numpy(), expected.astype(dtype), dtype, reduce_op, what)
    assert got.indices.numpy().tolist() == [int(i) for q in members for i in parts[q][1]], what


def _run_traced(hvd, op, members, ps, what):
    """A tf.function with unnamed collectives, called twice with rows drawn per rank and call:
    a rank whose rows change retraces, the others do not, and they must still agree."""
    r, key = hvd.rank(), op["key"]

    @tf.function
    def traced_step(x):
        return (hvd.allreduce(tf.reduce_sum(x), op=hvd.Sum, process_set=ps),
                hvd.allgather(tf.shape(x)[:1], process_set=ps))

    for call in range(2):
        inputs = {q: rank_input(f"{key}/{call}", q, (_rows(f"{key}/{call}", q) + 1,), "float32")
                  for q in members}
        total, rows = traced_step(tf.constant(inputs[r]))
        assert float(total) == sum(float(x.sum()) for x in inputs.values()), (what, call)
        assert rows.numpy().tolist() == [len(inputs[q]) for q in members], (what, call)


def _run_overlap(hvd, op, members, ps, what):
    """Two sub-threads call one name (or one traced function) at once. The last member starts
    its calls only once the others' are in flight. One name: with two members or more every
    member must refuse both; a member alone either runs both or refuses both. One traced
    function: its unnamed collective's key takes the calling thread, so both calls complete,
    each paired with the same sub-thread's on the other members."""
    r, key = hvd.rank(), op["key"].replace("/", ".")
    late = members[-1]

    @tf.function
    def shared_step(x):
        return hvd.allreduce(x, op=hvd.Sum, process_set=ps)

    def call(value):
        if op["shared"] == "function":
            return float(shared_step(tf.constant(value)))
        return float(hvd.allreduce(tf.constant(value), op=hvd.Sum, name=key, process_set=ps))

    if op["shared"] == "function":
        assert call(1.0) == len(members), what  # traced in this thread, the same on every member
    outcomes = [None, None]
    both = threading.Barrier(2)

    def run(i):
        both.wait(timeout=60)
        try:
            outcomes[i] = call(1000.0 * (i + 1) + r)
        except tf.errors.InvalidArgumentError as err:
            outcomes[i] = str(err)

    def go():
        hvd.allreduce(tf.constant(0.0), name=f"{key}.go", process_set=ps)

    if r == late:
        go()
    subs = [threading.Thread(target=run, args=(i,), name=f"{threading.current_thread().name}.{i}")
            for i in range(2)]
    for sub in subs:
        sub.start()
    if r != late:
        time.sleep(1.5)  # both calls are in the engine now, waiting for the last member
        go()
    for sub in subs:
        sub.join(timeout=120)
    assert not any(sub.is_alive() for sub in subs), f"{what}: a call hangs"
    if op["shared"] == "function":
        expected = [len(members) * 1000.0 * (i + 1) + sum(members) for i in range(2)]
        assert outcomes == expected, (what, outcomes)
        return
    refused = [isinstance(o, str) and "was called again while an earlier call" in o
               for o in outcomes]
    if len(members) > 1 or refused[0]:
        assert all(refused), (what, outcomes)
    else:
        ranks_sum = sum(members)
        assert outcomes == [1000.0 * (i + 1) + ranks_sum for i in range(2)], (what, outcomes)


def _run_mismatch(hvd, op, sets, name):
    """The first member allreduces another shape or dtype than the others: every member gets
    the mismatch error naming the field (at one member, there is nobody to disagree with)."""
    members = _members(op, sets, hvd.size())
    ps = hvd.global_process_set if op["set"] is None else sets[op["set"]]
    first = hvd.rank() == members[0]
    if op["mismatch"] == "shape":
        x = tf.zeros([3 if first else 2], tf.float32)
    elif op["mismatch"] == "dtype":
        x = tf.zeros([2], tf.float64 if first else tf.float32)
    else:  # the first member dense, the others IndexedSlices
        x = tf.zeros([2, 2]) if first else tf.IndexedSlices(
            tf.ones([1, 2]), tf.constant([0], tf.int64), dense_shape=tf.constant([2, 2], tf.int64))
    if len(members) == 1:
        hvd.allreduce(x, op=hvd.Sum, name=name, process_set=ps)
        return
    with pytest.raises(tf.errors.FailedPreconditionError) as info:
        hvd.allreduce(x, op=hvd.Sum, name=name, process_set=ps)
    message = str(info.value)
    field = "collective" if op["mismatch"] == "sparse" else op["mismatch"]
    assert f"ranks disagree on {field}" in message, (op, message)
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


def _joined_allreduce(hvd, key, members, active, reduce_op, named, ps, what):
    """An allreduce among ``members`` of which only ``active`` still work: the others have
    joined and contribute the op's identity (zeros for Sum and Average, which still divides
    by the number of members; nothing for Min, Max and Product)."""
    r = hvd.rank()
    input_kind = "product" if reduce_op == "Product" else "sum"
    inputs = {q: rank_input(key, q, (4,), "float32", input_kind) for q in members}
    got = hvd.allreduce(tf.constant(inputs[r]), op=getattr(hvd, reduce_op),
                        name=key.replace("/", ".") if named else None, process_set=ps)
    if reduce_op in ("Sum", "Average"):
        zeros = np.zeros(4, np.float32)
        per_rank = [inputs[q] if q in active else zeros for q in members]
    else:
        per_rank = [inputs[q] for q in members if q in active]
    expected = reduce_reference(per_rank, "float32", reduce_op, len(members))
    assert_matches(got.numpy(), expected, "float32", reduce_op, what)


def _join_phase(hvd, rnd, steps, join_ops, sets):
    """Rank q runs steps[q] steps, then joins; a step is an allreduce in the world and one in
    each set the rank belongs to (named or not), where the joined ranks contribute the
    identity, and the collectives that cannot run without them are refused on every active
    rank. Unnamed collectives pair again after the join (the next round has some)."""
    n, r = hvd.size(), hvd.rank()
    for s in range(steps[r]):
        reduce_op, refused, named = join_ops[s]
        key = f"rand/{SEED}/{rnd}/join/{s}"
        active = [q for q in range(n) if steps[q] > s]
        if refused is not None and len(active) < n:
            _refused_under_join(hvd, refused, key, active)
        what = (f"seed {SEED}, round {rnd}, join step {s} ({reduce_op}), active ranks "
                f"{active}, on rank {r}")
        _joined_allreduce(hvd, key, list(range(n)), active, reduce_op, named,
                          hvd.global_process_set, what)
        for set_name in sorted(sets):
            ps = sets[set_name]
            if r in ps.ranks:
                _joined_allreduce(hvd, f"{key}/{set_name}", ps.ranks, active, reduce_op, named,
                                  ps, f"{what}, set {set_name} {ps.ranks}")
    last = hvd.join()
    # Every rank's unnamed collectives pair again, in the world and in each set.
    for ps in [hvd.global_process_set] + [sets[name] for name in sorted(sets)]:
        if r in ps.ranks:
            got = hvd.allreduce(tf.constant(1.0), op=hvd.Sum, process_set=ps)
            assert float(got) == len(ps.ranks), (f"seed {SEED}, round {rnd}, after join", ps.ranks)
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
        _join_phase(hvd, rnd, steps, join_ops, sets)
    # The job goes on after the joins.
    assert float(hvd.allreduce(tf.constant(1.0), op=hvd.Sum, name="rand.after")) == n

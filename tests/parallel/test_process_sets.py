"""Process sets: collectives among a subset of the ranks, registered at run time.

The sets used here, by world size: evens (ranks 0, 2, ...), odds (1, 3, ...) from 2 ranks on,
and head (all ranks but the last) from 3 ranks on. odds leaves out rank 0, so its coordinator
is another world rank. Every rank registers and removes the same sets in the same order.
"""

import numpy as np
import pytest
import tensorflow as tf

from fixtures.reference import WORLD, assert_matches, rank_input, reduce_reference

SET_NAMES = ["evens"] + (["odds"] if WORLD >= 2 else []) + (["head"] if WORLD >= 3 else [])


def _ranks(name, size):
    return {"evens": list(range(0, size, 2)), "odds": list(range(1, size, 2)),
            "head": list(range(size - 1))}[name]


@pytest.fixture(scope="module")
def sets(hvd):
    if hvd.size() == 1:
        yield {}
        return
    registered = {name: hvd.add_process_set(_ranks(name, hvd.size())) for name in SET_NAMES}
    yield registered
    for ps in registered.values():
        assert hvd.remove_process_set(ps)


def _fresh_ranks(sets, size):
    """A proper subset of the ranks that no registered set has (the same on every rank)."""
    import itertools

    taken = [ps.ranks for ps in sets.values()]
    for k in range(1, size):
        for ranks in itertools.combinations(range(size), k):
            if list(ranks) not in taken:
                return list(ranks)
    return None


def _member_sets(sets):
    return [(name, ps) for name, ps in sets.items() if ps.included()]


def test_global_process_set(hvd):
    ps = hvd.global_process_set
    assert ps.process_set_id == 0 and ps.ranks == list(range(hvd.size()))
    assert ps.size() == hvd.size() and ps.rank() == hvd.rank() and ps.included()
    assert int(hvd.process_set_included_op(0)) == 1
    got = hvd.allreduce(tf.constant(1.0), op=hvd.Sum, process_set=ps, name="ps.global")
    assert float(got) == hvd.size()


@pytest.mark.skipif(WORLD < 2, reason="a proper subset needs at least two ranks")
def test_registered_sets_answer_queries(hvd, sets):
    ids = [ps.process_set_id for ps in sets.values()]
    assert ids == sorted(ids) and len(set(ids)) == len(ids) and 0 not in ids
    for name, ps in sets.items():
        ranks = _ranks(name, hvd.size())
        assert ps.ranks == ranks and ps.size() == len(ranks)
        assert ps.included() == (hvd.rank() in ranks)
        assert ps.rank() == (ranks.index(hvd.rank()) if hvd.rank() in ranks else -1)
        assert repr(ps) == f"ProcessSet(process_set_id={ps.process_set_id}, ranks={ranks})"

        @tf.function
        def traced():
            return (hvd.size_op(process_set_id=ps.process_set_id),
                    hvd.process_set_included_op(process_set_id=ps.process_set_id))

        size_value, included = traced()
        assert int(size_value) == len(ranks) and int(included) == int(ps.included())


@pytest.mark.skipif(WORLD < 2, reason="a proper subset needs at least two ranks")
@pytest.mark.parametrize("dtype", ["float32", "int32", "bfloat16"])
@pytest.mark.parametrize("op", ["Sum", "Average", "Max"])
@pytest.mark.parametrize("shape", [(1,), (7,), (3, 5)], ids=["1", "7", "3x5"])
def test_allreduce_in_sets_matches_numpy(hvd, sets, dtype, op, shape):
    for name, ps in _member_sets(sets):
        key = f"ps.allreduce/{name}/{dtype}/{op}/{shape}"
        inputs = [rank_input(key, r, shape, dtype) for r in ps.ranks]
        got = hvd.allreduce(tf.constant(inputs[ps.rank()]), op=getattr(hvd, op), name=key,
                            process_set=ps)
        expected = reduce_reference(inputs, dtype, op, ps.size())
        assert_matches(got.numpy(), expected, dtype, op, what=key)


@pytest.mark.skipif(WORLD < 2, reason="a proper subset needs at least two ranks")
def test_every_collective_in_sets(hvd, sets):
    for name, ps in _member_sets(sets):
        me, n = ps.rank(), ps.size()
        grouped = hvd.grouped_allreduce([tf.fill([3], float(hvd.rank())), tf.ones([2, 2])],
                                        op=hvd.Sum, process_set=ps, name=f"ps.grouped/{name}")
        np.testing.assert_array_equal(grouped[0].numpy(), [sum(ps.ranks)] * 3)
        np.testing.assert_array_equal(grouped[1].numpy(), np.full([2, 2], n))

        gathered = hvd.allgather(tf.fill([hvd.rank() + 1, 2], hvd.rank()), process_set=ps)
        expected = np.concatenate([np.full([r + 1, 2], r, np.int32) for r in ps.ranks])
        np.testing.assert_array_equal(gathered.numpy(), expected)

        for root in ps.ranks:  # world ranks, as in Horovod
            got = hvd.broadcast(tf.constant([hvd.rank(), 7]), root_rank=root, process_set=ps)
            np.testing.assert_array_equal(got.numpy(), [root, 7])

        splits = [(me + q) % 3 for q in range(n)]  # member q gets (me + q) % 3 rows
        sent = tf.fill([sum(splits)], hvd.rank())
        received, received_splits = hvd.alltoall(sent, splits=splits, process_set=ps)
        expected_splits = [(q + me) % 3 for q in range(n)]
        np.testing.assert_array_equal(received_splits.numpy(), expected_splits)
        np.testing.assert_array_equal(
            received.numpy(), np.concatenate([np.full([k], r, np.int32)
                                              for r, k in zip(ps.ranks, expected_splits)]))

        rows = 2 * n + 1  # does not divide: the first member gets one more row
        scattered = hvd.reducescatter(tf.ones([rows, 2]) * (hvd.rank() + 1), op=hvd.Sum,
                                      process_set=ps)
        mine = rows // n + (1 if me < rows % n else 0)
        np.testing.assert_array_equal(scattered.numpy(),
                                      np.full([mine, 2], sum(r + 1 for r in ps.ranks)))
        hvd.barrier(process_set=ps)

        objects = hvd.allgather_object({"rank": hvd.rank()}, process_set=ps)
        assert objects == [{"rank": r} for r in ps.ranks]
        assert hvd.broadcast_object(hvd.rank(), root_rank=ps.ranks[-1], process_set=ps) == ps.ranks[-1]
        v = tf.Variable([float(hvd.rank())] * 2)
        hvd.broadcast_variables([v], root_rank=ps.ranks[0], process_set=ps)
        np.testing.assert_array_equal(v.numpy(), [ps.ranks[0]] * 2)


@pytest.mark.skipif(WORLD < 2, reason="a proper subset needs at least two ranks")
def test_sets_do_not_wait_for_each_other(hvd, sets):
    """evens and odds run different numbers of collectives, unnamed, inside tf.function; the
    world then meets again in step."""
    count = {"evens": 5, "odds": 3}
    for name in ("evens", "odds"):
        ps = sets[name]
        if not ps.included():
            continue

        @tf.function
        def chain(t):
            for _ in range(count[name]):
                t = hvd.allreduce(t, op=hvd.Sum, process_set=ps)
            return t

        got = chain(tf.constant(1.0))
        assert float(got) == ps.size() ** count[name]
    # Unnamed: the per-kind counters of the world are not advanced by the sets' calls.
    assert float(hvd.allreduce(tf.constant(1.0), op=hvd.Sum)) == hvd.size()


@pytest.mark.skipif(WORLD < 3, reason="overlapping sets need three ranks")
def test_overlapping_sets_run_concurrently_in_one_step(hvd, sets):
    """Rank 0 is in evens and head: one tf.function submits both sets' collectives and one of
    the world's, independent of each other, so its lanes run them at the same time."""
    mine = _member_sets(sets)

    @tf.function
    def step(x):
        out = {name: hvd.allreduce(x * (i + 1), op=hvd.Sum, process_set=ps,
                                   name=f"ps.concurrent.{name}")
               for i, (name, ps) in enumerate(sorted(sets.items())) if ps.included()}
        out["world"] = hvd.allreduce(x, op=hvd.Sum, name="ps.concurrent.world")
        return out

    for repeat in range(3):
        got = step(tf.fill([1000], float(hvd.rank() + 1)))
        for i, (name, ps) in enumerate(sorted(sets.items())):
            if ps.included():
                expected = (i + 1) * sum(r + 1 for r in ps.ranks)
                np.testing.assert_array_equal(got[name].numpy(), np.full([1000], expected))
        world = sum(r + 1 for r in range(hvd.size()))
        np.testing.assert_array_equal(got["world"].numpy(), np.full([1000], world))
    assert len(mine) >= 1


@pytest.mark.skipif(WORLD < 2, reason="a proper subset needs at least two ranks")
def test_gradients_stay_in_the_set(hvd, sets):
    """Gradients run in the forward op's set and follow Horovod's definitions there
    (kerashvd/collectives/gradients.py): every member computes the same loss of the
    collective's output."""
    for name, ps in _member_sets(sets):
        k, me = ps.size(), ps.rank()
        x = tf.constant([1.0, 2.0]) * (hvd.rank() + 1)
        y = tf.tile(x, [k])
        root = ps.ranks[-1]
        with tf.GradientTape(persistent=True) as tape:
            tape.watch([x, y])
            reduced = hvd.allreduce(x, op=hvd.Sum, process_set=ps, name=f"ps.grad.ar/{name}")
            gathered = hvd.allgather(x, process_set=ps, name=f"ps.grad.ag/{name}")
            sent = hvd.broadcast(x, root_rank=root, process_set=ps, name=f"ps.grad.bc/{name}")
            scattered = hvd.reducescatter(y, op=hvd.Sum, process_set=ps,
                                          name=f"ps.grad.rs/{name}")
            loss_a = tf.reduce_sum(reduced * reduced)
            loss_g = tf.reduce_sum(gathered * tf.range(2 * k, dtype=tf.float32))
            loss_b = tf.reduce_sum(sent * [3.0, 5.0])
            loss_s = tf.reduce_sum(scattered * [7.0, 11.0])
        # allreduce: d/dx of sum((sum_r x_r)^2) is 2 * sum_r x_r, summed again over the members.
        total = np.array([1.0, 2.0]) * sum(r + 1 for r in ps.ranks)
        np.testing.assert_allclose(tape.gradient(loss_a, x).numpy(), 2 * total * k)
        # allgather: this member's rows carry weights 2*me and 2*me + 1 in every member's loss;
        # the incoming gradients are averaged over the set.
        np.testing.assert_allclose(tape.gradient(loss_g, x).numpy(), [2 * me, 2 * me + 1])
        # broadcast: the averaged gradient on the root, zeros on the other members.
        np.testing.assert_allclose(tape.gradient(loss_b, x).numpy(),
                                   [3.0, 5.0] if hvd.rank() == root else [0.0, 0.0])
        # reducescatter (Sum): the allgathered gradient times the set's size.
        np.testing.assert_allclose(tape.gradient(loss_s, y).numpy(), np.tile([7.0, 11.0], k) * k)


@pytest.mark.skipif(WORLD < 2, reason="a proper subset needs at least two ranks")
def test_distributed_tape_reduces_within_the_set(hvd, sets):
    ps = sets["evens"]
    w = tf.Variable([1.0, 1.0])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(w * float(hvd.rank() + 1))
    tape = hvd.DistributedGradientTape(tape, process_set=ps, name="ps.tape")
    grad = tape.gradient(loss, [w])[0]
    if ps.included():
        expected = np.mean([r + 1 for r in ps.ranks])
    else:
        expected = hvd.rank() + 1  # outside the set: the local gradient, as in Horovod
    np.testing.assert_allclose(grad.numpy(), [expected] * 2)


@pytest.mark.keras
@pytest.mark.skipif(WORLD < 2, reason="a proper subset needs at least two ranks")
def test_fit_with_an_optimizer_reducing_in_a_set(hvd, sets):
    from kerashvd.training.keras_compat import keras

    ps = sets["odds"]
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1, use_bias=False,
                                                                    kernel_initializer="ones")])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), process_set=ps),
                  loss="mse")
    x = np.full([4, 3], hvd.rank() + 1, np.float32)
    model.fit(x, np.zeros([4, 1], np.float32), batch_size=4, epochs=1, verbose=0)
    # One SGD step on mean((x w)^2) with w = 1: the gradient is 2 * (3c) * c per weight for
    # inputs c; members average it over the set.
    grads = {r: 2 * 3 * (r + 1) ** 2 for r in range(hvd.size())}
    if ps.included():
        step = np.mean([grads[r] for r in ps.ranks])
    else:
        step = grads[hvd.rank()]
    np.testing.assert_allclose(model.get_weights()[0][:, 0], [1 - 0.1 * step] * 3, rtol=1e-6)


def test_bad_process_sets_are_refused(hvd, sets):
    with pytest.raises(ValueError, match="at least one rank"):
        hvd.ProcessSet([])
    with pytest.raises(ValueError, match="distinct"):
        hvd.ProcessSet([0, 0])
    with pytest.raises(TypeError, match="ints"):
        hvd.ProcessSet([0.5])
    with pytest.raises(ValueError, match=r"in \[0, "):
        hvd.add_process_set([hvd.size()])
    unregistered = hvd.ProcessSet([0])
    with pytest.raises(ValueError, match="not registered"):
        hvd.allreduce(tf.constant(1.0), process_set=unregistered)
    with pytest.raises(TypeError, match="ProcessSet"):
        hvd.allreduce(tf.constant(1.0), process_set=[0])
    assert hvd.remove_process_set(unregistered) is False
    assert hvd.remove_process_set(hvd.global_process_set) is False
    # Every rank gets the same answer: the engine compares the calls first.
    with pytest.raises(ValueError, match="global process set"):
        hvd.add_process_set(range(hvd.size()))
    for name, ps in sets.items():
        with pytest.raises(ValueError, match="already registered"):
            hvd.add_process_set(ps)
        with pytest.raises(ValueError, match="already exists"):
            hvd.add_process_set(list(ps.ranks))
        if not ps.included():
            with pytest.raises(ValueError, match=f"rank {hvd.rank()} is not in"):
                hvd.allreduce(tf.constant(1.0), process_set=ps)
        else:
            outsider = next((r for r in range(hvd.size()) if r not in ps.ranks), None)
            if outsider is not None:
                with pytest.raises(ValueError, match="root_rank must be"):
                    hvd.broadcast(tf.constant(1), root_rank=outsider, process_set=ps)


@pytest.mark.skipif(WORLD < 2, reason="a disagreement needs at least two ranks")
def test_ranks_that_disagree_on_a_registration_all_fail(hvd, sets):
    mine = [hvd.rank()]  # every rank asks for a different set
    with pytest.raises(ValueError) as info:
        hvd.add_process_set(mine)
    message = str(info.value)
    assert "disagree on add_process_set" in message
    for r in range(hvd.size()):
        assert f"rank {r} called add_process_set([{r}])" in message
    # Nothing was registered, and registration still works.
    fresh = _fresh_ranks(sets, hvd.size())
    if fresh is not None:
        ps = hvd.add_process_set(fresh)
        assert ps.process_set_id is not None
        assert hvd.remove_process_set(ps)


@pytest.mark.skipif(WORLD < 4, reason="needs a set of two ranks that leaves out rank 0")
def test_mismatch_in_a_set_names_world_ranks(hvd, sets):
    ps = sets["odds"]  # world ranks 1 and 3
    if not ps.included():
        return
    with pytest.raises(tf.errors.FailedPreconditionError) as info:
        hvd.allreduce(tf.ones([hvd.rank()]), name="ps.mismatch", process_set=ps)
    message = str(info.value)
    assert "rank 1 [1]" in message and "rank 3 [3]" in message, message
    # The set goes on working.
    assert float(hvd.allreduce(tf.constant(1.0), op=hvd.Sum, process_set=ps)) == 2


@pytest.mark.skipif(WORLD < 2, reason="a proper subset needs at least two ranks")
def test_removed_set_fails_clearly(hvd, sets):
    fresh = _fresh_ranks(sets, hvd.size())
    if fresh is None:  # 2 ranks: every proper subset is registered; remove one, add it back
        name, ps = next(iter(sets.items()))
    else:
        name, ps = None, hvd.add_process_set(fresh)
    ranks = list(ps.ranks)
    hvd.remove_process_set(ps)
    assert ps.process_set_id is None
    with pytest.raises(ValueError, match="not registered"):
        hvd.allreduce(tf.constant(1.0), process_set=ps)
    with pytest.raises(tf.errors.InvalidArgumentError, match="not registered"):
        hvd.size_op(process_set_id=10_000)
    if name is not None:
        sets[name] = hvd.add_process_set(ranks)  # the later tests use it


@pytest.mark.skipif(WORLD < 2, reason="a proper subset needs at least two ranks")
def test_a_set_with_a_hand_made_id_is_refused(hvd, sets):
    """A ProcessSet given another set's id (or an unknown one) would name some ranks while its
    collectives ran among others, a silent wrong answer: every rank raises ValueError, from
    the queries and from the collectives alike, before anything is queued."""
    registered = sets["evens"]
    alias = hvd.ProcessSet(list(range(hvd.size())))
    alias.process_set_id = registered.process_set_id
    unknown = hvd.ProcessSet([0])
    unknown.process_set_id = 10_000
    for ps, text in ((alias, "whose ranks differ"), (unknown, "no process set with id 10000")):
        with pytest.raises(ValueError, match=text):
            ps.size()
        with pytest.raises(ValueError, match=text):
            hvd.allreduce(tf.constant(1.0), op=hvd.Sum, process_set=ps)
    # The registered object still works.
    if registered.included():
        got = hvd.allreduce(tf.constant(1.0), op=hvd.Sum, process_set=registered)
        assert float(got) == registered.size()


def test_init_arguments_of_horovod(hvd):
    MPI = pytest.importorskip("mpi4py.MPI", reason="mpi4py is optional; hvd.init(comm) needs it")

    hvd.init(MPI.COMM_WORLD)  # already running: a no-op, like hvd.init()
    hvd.init(process_sets="dynamic")
    with pytest.raises(ValueError, match="only None or MPI.COMM_WORLD"):
        hvd.init(comm=[0])
    with pytest.raises(ValueError, match="already initialized"):
        hvd.init(process_sets=[[0]])


@pytest.mark.skipif(WORLD < 2, reason="a proper subset needs at least two ranks")
def test_timeline_rows_of_a_set_name_the_set(hvd, sets, tmp_path):
    import json

    ps = sets["evens"]
    path = tmp_path / "timeline-{rank}.json"
    hvd.start_timeline(str(path))
    try:
        hvd.allreduce(tf.ones([4]), name="ps.timeline")
        if ps.included():  # the same name in the set: a row of its own
            hvd.allreduce(tf.ones([4]), name="ps.timeline", process_set=ps)
    finally:
        hvd.stop_timeline()
    with open(str(path).replace("{rank}", str(hvd.rank()))) as f:
        rows = {e["args"]["name"] for e in json.load(f) if e["name"] == "thread_name"}
    assert "ps.timeline" in rows, rows
    in_set = f"process_set.{ps.process_set_id}/ps.timeline"
    assert (in_set in rows) == ps.included(), rows

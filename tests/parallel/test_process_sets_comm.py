"""Process sets given as mpi4py communicators (Horovod's ``ProcessSet(comm)``).

Each rank passes its own communicator, or MPI.COMM_NULL, and one registration registers every
distinct communicator passed. Every test leaves no set registered behind it.
"""

import pytest
import tensorflow as tf

from fixtures.reference import WORLD

MPI = pytest.importorskip("mpi4py.MPI")

needs_two = pytest.mark.skipif(WORLD < 2, reason="a proper subset needs at least two ranks")


def _parity(size):
    return [list(range(0, size, 2)), list(range(1, size, 2))]


@needs_two
def test_split_communicators_register_one_set_each(hvd):
    world = MPI.COMM_WORLD
    ps = hvd.ProcessSet(world.Split(color=world.rank % 2, key=world.rank))
    assert ps.process_set_id is None and ps.ranks == _parity(hvd.size())[hvd.rank() % 2]
    assert hvd.add_process_set(ps) is ps
    mine = _parity(hvd.size())[hvd.rank() % 2]
    assert ps.ranks == mine and ps.included() and ps.rank() == mine.index(hvd.rank())
    got = hvd.allreduce(tf.constant(float(hvd.rank())), op=hvd.Sum, process_set=ps,
                        name="comm.parity")
    assert float(got) == sum(mine)
    # The other parity's set was registered in the same call, on every rank.
    for ranks in _parity(hvd.size()):
        with pytest.raises(ValueError, match="already exists"):
            hvd.add_process_set(ranks)
    ids = ps.process_set_id
    assert hvd.remove_process_set(ps) and ps.process_set_id is None
    # Both sets are gone: they can be registered again, as rank lists.
    again = [hvd.add_process_set(ranks) for ranks in _parity(hvd.size())]
    assert all(p.process_set_id > ids for p in again)
    for p in again:
        assert hvd.remove_process_set(p)


@needs_two
def test_comm_null_ranks_get_the_set_without_being_members(hvd):
    world = MPI.COMM_WORLD
    head = list(range(hvd.size() - 1))
    comm = world.Create_group(world.Get_group().Incl(head))
    assert (comm == MPI.COMM_NULL) == (hvd.rank() not in head)
    ps = hvd.add_process_set(hvd.ProcessSet(comm))
    assert ps.ranks == head and ps.included() == (hvd.rank() in head)
    if ps.included():
        got = hvd.allreduce(tf.constant(1.0), op=hvd.Sum, process_set=ps, name="comm.head")
        assert float(got) == len(head)
    else:
        with pytest.raises(ValueError, match="is not in"):
            hvd.allreduce(tf.constant(1.0), process_set=ps)
    assert hvd.remove_process_set(ps)


def test_a_communicator_of_all_ranks_is_refused_on_every_rank(hvd):
    ps = hvd.ProcessSet(MPI.COMM_WORLD.Dup())
    assert ps.ranks == list(range(hvd.size()))
    with pytest.raises(ValueError, match="global process set"):
        hvd.add_process_set(ps)
    assert ps.process_set_id is None
    with pytest.raises(TypeError, match="ints"):
        hvd.ProcessSet([MPI.COMM_WORLD])


@needs_two
def test_inconsistent_communicators_fail_on_every_rank(hvd):
    world = MPI.COMM_WORLD
    parity = world.Split(color=world.rank % 2, key=world.rank)
    everyone = world.Split(color=0, key=world.rank)
    # Rank 0 names all ranks; the others name their parity: rank 1 disagrees with rank 0.
    ps = hvd.ProcessSet(everyone if hvd.rank() == 0 else parity)
    with pytest.raises(ValueError) as info:
        hvd.add_process_set(ps)
    message = str(info.value)
    assert "disagree on ProcessSet(comm) registration" in message, message
    assert f"rank 0 called ProcessSet(a communicator of ranks {list(range(hvd.size()))})" in message
    assert f"rank 1 called ProcessSet(a communicator of ranks {_parity(hvd.size())[1]})" in message
    assert ps.process_set_id is None
    # A rank list against communicators: also named, on every rank.
    with pytest.raises(ValueError, match="disagree") as info:
        hvd.add_process_set([0] if hvd.rank() == 0 else hvd.ProcessSet(parity))
    assert "rank 0 called add_process_set([0])" in str(info.value)
    # Registration still works.
    ps = hvd.add_process_set(hvd.ProcessSet(parity))
    assert hvd.remove_process_set(ps)


@needs_two
def test_init_takes_communicator_process_sets_like_horovod(hvd):
    world = MPI.COMM_WORLD
    ps = hvd.ProcessSet(world.Split(color=world.rank % 2, key=world.rank))
    hvd.shutdown()
    hvd.init(world, process_sets=[ps])
    try:
        assert ps.process_set_id is not None and ps.included()
        got = hvd.allreduce(tf.constant(1.0), op=hvd.Sum, process_set=ps, name="comm.init")
        assert float(got) == len(ps.ranks)
    finally:
        hvd.remove_process_set(ps)

"""Process sets: collectives among a subset of the ranks, as in Horovod.

Every collective takes ``process_set=`` (default :data:`global_process_set`, all ranks). A
set's collectives run among its members only, on their own communicator and background
thread, so collectives of different sets run concurrently and do not wait for each other.

Sets are registered collectively: every rank registers the same sets in the same order,
members or not, either at ``init(process_sets=[...])`` or later with
:func:`add_process_set` (Horovod's "dynamic" process sets, always available here), and
removes them the same way with :func:`remove_process_set`. A set can also be given as an
mpi4py communicator, as in Horovod: each rank passes its own (say from ``Split``), and one
registration registers them all. Ranks that disagree, or a rank that never calls, get an
error on every rank (after the peer timeout for a missing rank), not a hang.

Inside a set, ``root_rank`` (broadcast) is a world rank, as in Horovod; ``Average`` divides
by the set's size; allgather, alltoall and reducescatter order their parts by world rank.

Example:

>>> import kerashvd as hvd
>>> hvd.init()
>>> evens = hvd.add_process_set(range(0, hvd.size(), 2))
>>> if evens.included():
...     total = hvd.allreduce(tf.constant(1.0), op=hvd.Sum, process_set=evens)  # evens.size()
>>> hvd.remove_process_set(evens)
True
"""

import threading

from ._engine import core as _core, require_init as _require_init
from .world import rank, size

__all__ = ["ProcessSet", "global_process_set", "add_process_set", "remove_process_set"]

_lock = threading.Lock()
_registered = {}  # process_set_id -> ProcessSet (not the global one)


class ProcessSet:
    """A group of ranks that run collectives among themselves.

    Args:
        ranks_or_comm: the world ranks of the members (any iterable of distinct ints), or an
            mpi4py communicator, as in Horovod. Ranks are kept in ascending order, which is the
            order of the members' parts in allgather, alltoall and reducescatter. With
            communicators, each rank passes its own (for example from ``COMM_WORLD.Split``),
            or ``MPI.COMM_NULL`` when it has none, and one registration registers every
            distinct communicator passed: a rank's object becomes the set of its own
            communicator, and with ``MPI.COMM_NULL`` the first set registered (the one with
            the lowest rank), of which it is not a member.

    Attributes:
        ranks: the members' world ranks, ascending.
        process_set_id: the id given at registration (0 for the global set; None while not
            registered).

    Raises:
        TypeError: for ranks that are not ints, or an intercommunicator.
        ValueError: for an empty or repeated rank list, or negative ranks.

    Example:

    >>> ps = hvd.ProcessSet([2, 0])
    >>> ps.ranks
    [0, 2]
    >>> from mpi4py import MPI
    >>> world = MPI.COMM_WORLD
    >>> halves = hvd.ProcessSet(world.Split(color=world.rank * 2 // world.size))
    >>> hvd.add_process_set(halves)  # on every rank: each gets the set of its own half
    """

    _comm_ranks = None  # for a communicator: its world ranks, [] for MPI.COMM_NULL

    def __init__(self, ranks_or_comm):
        self.process_set_id = None
        if hasattr(ranks_or_comm, "Get_group"):
            self._comm_ranks = _world_ranks_of(ranks_or_comm)
            self.ranks = list(self._comm_ranks)
            return
        try:
            values = list(ranks_or_comm)
        except TypeError:
            raise TypeError("ProcessSet needs an iterable of ranks or an mpi4py communicator; "
                            f"received {ranks_or_comm!r}") from None
        for r in values:
            if not isinstance(r, int) or isinstance(r, bool):
                raise TypeError(f"ProcessSet ranks must be ints; received {values!r}")
        if not values:
            raise ValueError("a process set needs at least one rank; received []")
        if len(set(values)) != len(values) or min(values) < 0:
            raise ValueError(f"ProcessSet ranks must be distinct and >= 0; received {values!r}")
        self.ranks = sorted(values)

    def _check_registered(self):
        """Raises ValueError unless this object is the registered set of its id: a set made
        by hand with another set's id (or a removed one) would name some ranks while its
        collectives run among others."""
        _require_init()
        if self.process_set_id is None:
            raise ValueError(f"{self!r} is not registered: pass it to "
                             "kerashvd.init(process_sets=[...]) or kerashvd.add_process_set().")
        with _lock:
            registered = _registered.get(self.process_set_id)
        if registered is None:
            raise ValueError(f"{self!r}: no process set with id {self.process_set_id} is "
                             "registered (it was removed, or the id was set by hand). Use the "
                             "object that kerashvd.add_process_set() or init() registered.")
        if registered.ranks != self.ranks:
            raise ValueError(f"{self!r} has the id of the registered set {registered!r}, whose "
                             "ranks differ. Use the object that kerashvd.add_process_set() or "
                             "init() registered; a set's id is kerashvd's, not to be set by hand.")

    def size(self):
        """Returns the number of members."""
        self._check_registered()
        return len(self.ranks)

    def rank(self):
        """Returns this process's index among the members, or -1 when it is not one."""
        self._check_registered()
        me = rank()
        return self.ranks.index(me) if me in self.ranks else -1

    def included(self):
        """Returns whether this process is a member."""
        return self.rank() >= 0

    def __repr__(self):
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})"

    def __eq__(self, other):
        return (isinstance(other, ProcessSet) and self.ranks == other.ranks
                and self.process_set_id == other.process_set_id)

    def __hash__(self):
        return hash((tuple(self.ranks), self.process_set_id))


class _GlobalProcessSet(ProcessSet):
    """All ranks (process set 0); its ranks are read from the running job."""

    def __init__(self):
        self.process_set_id = 0

    @property
    def ranks(self):
        return list(range(size())) if _core.is_initialized() else []

    def size(self):
        return size()

    def rank(self):
        return rank()

    def __eq__(self, other):
        return isinstance(other, _GlobalProcessSet)

    def __hash__(self):
        return hash(0)


global_process_set = _GlobalProcessSet()
"""The process set of all ranks (id 0): every collective's default ``process_set``."""


def add_process_set(process_set):
    """Registers a process set; every rank must call it with the same ranks, in the same order.

    Args:
        process_set: a :class:`ProcessSet` (not yet registered) or a list of world ranks. A
            ProcessSet made from a communicator is registered with those of the other ranks
            (see :class:`ProcessSet`): every rank passes one, each its own communicator's.

    Returns:
        The registered :class:`ProcessSet`, with its ``process_set_id``.

    Raises:
        ValueError: for a rank outside ``[0, size())``, a set already registered, one equal to
            an existing set, or when the ranks disagree about the call (raised on every rank).
        RuntimeError: when some rank does not call it within the peer timeout.

    Example:

    >>> odds = hvd.add_process_set([r for r in range(hvd.size()) if r % 2])
    """
    _require_init()
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    if isinstance(ps, _GlobalProcessSet) or ps.process_set_id is not None:
        raise ValueError(f"{ps!r} is already registered")
    if ps._comm_ranks is not None:
        return _add_split(ps)
    if ps.ranks[-1] >= size():
        raise ValueError(f"ProcessSet ranks must be in [0, {size()}); received {ps.ranks}")
    with _lock:
        # The engine compares all ranks' calls first, then refuses duplicates on every rank.
        ps.process_set_id = _core.add_process_set(ps.ranks)
        _registered[ps.process_set_id] = ps
    return ps


def remove_process_set(process_set):
    """Unregisters a process set; every rank must call it, in the same order as the others.

    Collectives of the set still pending fail. The global set cannot be removed. Sets
    registered together from communicators are removed together: each rank passes its own.

    Returns:
        True if the set was removed, False if it was not registered (or is the global set).
    """
    _require_init()
    if not isinstance(process_set, ProcessSet):
        raise TypeError(f"remove_process_set needs a ProcessSet; received {process_set!r}")
    with _lock:
        if process_set.process_set_id not in _registered:
            return False
        for set_id in _core.remove_process_set(process_set.process_set_id):
            _registered.pop(set_id).process_set_id = None
    return True


def _world_ranks_of(comm):
    """The world ranks of an mpi4py communicator's members (local: no communication)."""
    from mpi4py import MPI  # lazy: optional, only for communicator-made sets

    if comm == MPI.COMM_NULL:
        return []
    if comm.Is_inter():
        raise TypeError(f"ProcessSet needs an intracommunicator; received {comm!r}")
    group, world = comm.Get_group(), MPI.COMM_WORLD.Get_group()
    try:
        ranks = MPI.Group.Translate_ranks(group, list(range(group.Get_size())), world)
    finally:
        group.Free()
        world.Free()
    if MPI.UNDEFINED in ranks:
        raise ValueError(f"{comm!r} has processes outside MPI.COMM_WORLD")
    return sorted(ranks)


def _add_split(ps):
    """add_process_set of a ProcessSet made from a communicator (see ProcessSet)."""
    from mpi4py import MPI  # lazy: optional, only for communicator-made sets

    if (MPI.COMM_WORLD.Get_size(), MPI.COMM_WORLD.Get_rank()) != (size(), rank()):
        raise RuntimeError(
            f"mpi4py's COMM_WORLD (rank {MPI.COMM_WORLD.Get_rank()} of "
            f"{MPI.COMM_WORLD.Get_size()}) is not kerashvd's (rank {rank()} of {size()}): "
            "mpi4py is built against another MPI library. Pass the ranks instead.")
    with _lock:
        mine, registered = _core.add_split_process_sets(ps._comm_ranks)
        for i, (set_id, ranks) in enumerate(registered):
            # A rank without a communicator (COMM_NULL) gets the first set.
            obj = ps if i == max(mine, 0) else ProcessSet(ranks)
            obj.ranks, obj.process_set_id = list(ranks), set_id
            _registered[set_id] = obj
    return ps


def _register_at_init(process_sets):
    """init()'s ``process_sets``: a list of ProcessSets or rank lists, or "dynamic"."""
    if process_sets is None or process_sets == "dynamic":
        return
    if isinstance(process_sets, (str, ProcessSet)) or not hasattr(process_sets, "__iter__"):
        raise ValueError("init(process_sets=...) takes a list of ProcessSet objects (or rank "
                         f"lists), or \"dynamic\"; received {process_sets!r}")
    for ps in process_sets:
        add_process_set(ps)


def _forget_all():
    """Called by shutdown(): the engine's sets are gone, and their objects unregistered."""
    with _lock:
        for ps in _registered.values():
            ps.process_set_id = None
        _registered.clear()


def resolve(process_set, what):
    """The id of a collective's ``process_set``, checked: registered, with this rank a member."""
    if process_set is None or isinstance(process_set, _GlobalProcessSet):
        return 0
    if not isinstance(process_set, ProcessSet):
        raise TypeError(f"{what}: process_set must be a kerashvd.ProcessSet; received "
                        f"{process_set!r}")
    process_set._check_registered()  # this object is the registered set of its id
    # Membership is the engine's registry's to check (it checks each submission too).
    error = _core.process_set_caller_error(process_set.process_set_id, what)
    if error:
        from .invalid_argument import InvalidArgumentError  # imports TensorFlow (callers have)
        raise InvalidArgumentError(error)
    return process_set.process_set_id


def set_size(process_set_id):
    """Members of a registered process set (the world size for 0)."""
    return size() if process_set_id == 0 else len(_registered[process_set_id].ranks)


def set_rank(process_set_id):
    """This rank's index in a registered process set (-1 outside it)."""
    return rank() if process_set_id == 0 else _registered[process_set_id].rank()

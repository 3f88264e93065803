"""Where this process sits in the job: rank, size and the other topology queries.

Apart from :mod:`kerashvd.runtime.lifecycle` (which starts and stops the engine) so that
the modules below it (process sets) can ask without importing what starts the engine.
"""

from ._engine import core as _core, require_init

__all__ = ["cross_rank", "cross_size", "is_homogeneous", "is_initialized", "local_rank",
           "local_size", "mpi_threads_supported", "rank", "size"]


def is_initialized():
    """Returns whether :func:`init` has been called (and not undone by :func:`shutdown`).

    In a child process forked after ``init()`` (``os.fork()``, a ``multiprocessing`` worker
    with the ``'fork'`` start method) it is True, as the child holds a copy of its parent's
    state: ``rank()``, ``size()`` and the other topology queries answer for the parent's rank.
    But the child cannot use its parent's communicator: every collective, ``barrier()``,
    ``join()`` and ``init()`` there raises at once (``tf.errors.FailedPreconditionError`` from
    the collectives, ``RuntimeError`` from ``init()``), naming both processes. ``shutdown()``
    in the child only forgets the copy (``is_initialized()`` is then False); the parent is
    unaffected.
    """
    return _core.is_initialized()


def _topology(getter):
    require_init()
    return getter()


def size():
    """Returns the number of processes in the job."""
    return _topology(_core.size)


def rank():
    """Returns this process's rank, in ``[0, size())``."""
    return _topology(_core.rank)


def local_size():
    """Returns the number of processes on this host."""
    return _topology(_core.local_size)


def local_rank():
    """Returns this process's rank among the processes on this host."""
    return _topology(_core.local_rank)


def cross_size():
    """Returns the number of hosts that have a process with this process's local rank."""
    return _topology(_core.cross_size)


def cross_rank():
    """Returns this host's index among the hosts (for processes with the same local rank)."""
    return _topology(_core.cross_rank)


def mpi_threads_supported():
    """Returns whether MPI runs with MPI_THREAD_MULTIPLE, so user code may call MPI too."""
    return _topology(_core.mpi_threads_supported)


def is_homogeneous():
    """Returns whether every host runs the same number of ranks (the same on every rank)."""
    return _topology(_core.is_homogeneous)

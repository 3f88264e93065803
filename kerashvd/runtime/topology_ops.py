"""Horovod's ``rank_op``, ``size_op`` and friends: the topology as int32 tensors.

``kerashvd.rank()`` called while a ``tf.function`` is traced puts a constant in the graph; these
ops read the running engine each time the graph runs, so a traced function or an exported
SavedModel (loaded where kerashvd's ops are available) sees the job it runs in. Eagerly they
return a scalar tensor at once. Before ``kerashvd.init()`` an eager call raises
``kerashvd.NotInitializedError``, and a traced one, when it runs,
``tf.errors.FailedPreconditionError``; both say to call ``init()``.
"""

import tensorflow as tf

from ._op_library import OPS
from ._engine import require_init as _require_init

__all__ = ["rank_op", "size_op", "local_rank_op", "local_size_op", "cross_rank_op",
           "cross_size_op", "process_set_included_op"]


def _topology(what, name, process_set_id=0):
    if tf.executing_eagerly():
        _require_init()
    if not isinstance(process_set_id, int) or isinstance(process_set_id, bool) or process_set_id < 0:
        raise ValueError(f"process_set_id must be an int >= 0 (a ProcessSet's process_set_id); "
                         f"received {process_set_id!r}")
    return OPS.kerashvd_topology(what=what, process_set_id=process_set_id, name=name)


def rank_op(name=None):
    """This process's rank, as an int32 scalar tensor."""
    return _topology("rank", name)


def size_op(process_set_id=0, name=None):
    """The number of processes (of the process set with that id), as an int32 scalar tensor.

    An id that is not registered fails when the op runs (``InvalidArgumentError``).
    """
    return _topology("size", name, process_set_id)


def process_set_included_op(process_set_id=0, name=None):
    """1 if this process is in the process set with that id, else 0, as an int32 scalar tensor."""
    return _topology("process_set_included", name, process_set_id)


def local_rank_op(name=None):
    """This process's rank on its host, as an int32 scalar tensor."""
    return _topology("local_rank", name)


def local_size_op(name=None):
    """The number of processes on this host, as an int32 scalar tensor."""
    return _topology("local_size", name)


def cross_rank_op(name=None):
    """The index of this host among the hosts, as an int32 scalar tensor."""
    return _topology("cross_rank", name)


def cross_size_op(name=None):
    """The number of hosts, as an int32 scalar tensor."""
    return _topology("cross_size", name)


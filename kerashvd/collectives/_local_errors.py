"""A wrong argument on one rank fails the collective on every rank, instead of hanging them.

A collective's arguments are checked on each rank before it is submitted. Some checks can
fail on one rank only (alltoall splits, a root rank, an object that cannot be pickled, a
scalar where rows are needed), while the other ranks already wait in the collective. So a
rank whose check fails still submits the collective under its name, as a failed request
carrying its error message (``KerashvdReportError``, ops/core/controller.h), waits until
every rank has seen it, and then raises its own error. The other ranks' collective fails with
``tf.errors.InvalidArgumentError`` naming the collective, the rank and its message. Because
the failing rank takes its automatic name like the others, later unnamed collectives keep
matching across ranks.

Only the first collective of a call is reported: the others' later collectives of that call
are never issued, since the first one raised.

Bad alltoall splits and a call from outside the process set raise
:class:`~kerashvd.runtime.invalid_argument.InvalidArgumentError` (both
``tf.errors.InvalidArgumentError`` and ``ValueError``), which the runtime defines.
"""

import contextlib

import tensorflow as tf

from . import _names
from ..runtime._engine import core as _core
from ..runtime._op_library import OPS

# The engine's numbers of the collectives a rank may fail for all (kerashvd._core.OP_TYPES,
# ops/core/types.cc).
_OP_TYPES = {row["name"]: row["value"] for row in _core.OP_TYPES if row["reportable"]}
ALLREDUCE = _OP_TYPES["allreduce"]
ALLGATHER = _OP_TYPES["allgather"]
BROADCAST = _OP_TYPES["broadcast"]
ALLTOALL = _OP_TYPES["alltoall"]
REDUCESCATTER = _OP_TYPES["reducescatter"]


def report(collective, key, process_set_id, error):
    """Fails collective ``key`` (an OpType above) on every rank with this rank's ``error``.

    Returns once every rank of the process set has submitted ``key``. Runs eagerly, also
    while a ``tf.function`` is traced.
    """
    message = f"{type(error).__name__}: {error}"
    key = _names.key_at_run_time(key)  # reported eagerly, so with the thread in the key
    with tf.init_scope():
        try:
            OPS.kerashvd_report_error(message, tensor_name=key, collective=collective,
                                      process_set_id=process_set_id)
        except tf.errors.OpError:
            pass  # the collective failed everywhere, as it should


@contextlib.contextmanager
def shared_with_peers(collective, key, process_set_id,
                      errors=(TypeError, ValueError, NotImplementedError)):
    """Runs a collective's checks; an exception of ``errors`` raised in them is reported to
    the other ranks (:func:`report`) and then re-raised here. (Pickling runs arbitrary code, so
    the object collectives pass ``errors=Exception``.)"""
    try:
        yield
    except errors as err:
        report(collective, key, process_set_id, err)
        raise

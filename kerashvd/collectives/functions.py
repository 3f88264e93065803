"""Helpers built on the collectives: variables and Python objects."""

import io

import cloudpickle
import numpy as np
import tensorflow as tf

from . import _names
from ._local_errors import ALLGATHER, BROADCAST, shared_with_peers
from .tensors import allgather, broadcast, grouped_broadcast
from ..runtime.process_sets import global_process_set, resolve, set_size
from ..runtime._engine import require_init as _require_init
from ..runtime.world import rank


def broadcast_variables(variables, root_rank, name=None, process_set=global_process_set):
    """Assigns ``root_rank``'s values to ``variables`` on every rank.

    Variables are grouped by dtype, one grouped broadcast per dtype.

    Args:
        variables: ``tf.Variable``/``keras.Variable`` objects, in the same order on every rank.
        root_rank: the rank whose values win.
        name: a prefix for the collectives' names.
        process_set: the ranks that take part (default all); ``root_rank`` is a world rank.

    Example:

    >>> import kerashvd as hvd
    >>> v = tf.Variable(float(hvd.rank()))
    >>> hvd.broadcast_variables([v], root_rank=0); float(v.numpy())
    0.0
    """
    _require_init()
    variables = list(variables)
    by_dtype = {}
    for index, v in enumerate(variables):
        by_dtype.setdefault(tf.as_dtype(v.dtype).name, []).append(index)
    prefix = _names.tensor_name("broadcast_variables", name,
                                resolve(process_set, "broadcast_variables"))
    for dtype_name in sorted(by_dtype):
        indices = by_dtype[dtype_name]
        values = grouped_broadcast([tf.convert_to_tensor(variables[i]) for i in indices],
                                   root_rank, name=f"{prefix}.{dtype_name}",
                                   process_set=process_set)
        for i, value in zip(indices, values):
            variables[i].assign(value)


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Returns ``root_rank``'s Python object on every rank (pickled with cloudpickle).

    Raises:
        Exception: whatever pickling raises, on the root, when ``obj`` cannot be pickled;
            the other ranks then raise ``tf.errors.InvalidArgumentError`` naming the root and
            that error.

    Example:

    >>> import kerashvd as hvd
    >>> hvd.broadcast_object({"epoch": hvd.rank()}, root_rank=0)
    {'epoch': 0}
    """
    _require_init()
    ps = resolve(process_set, "broadcast_object")
    key = _names.tensor_name("broadcast_object", name, ps)
    payload = b""
    if rank() == root_rank:
        # The other ranks wait in the size broadcast: a pickling error must reach them.
        with shared_with_peers(BROADCAST, _names.tensor_name("broadcast", key + ".size", ps), ps,
                               errors=Exception):
            payload = cloudpickle.dumps(obj)
    length = broadcast(tf.constant([len(payload)], tf.int64), root_rank, name=key + ".size",
                       process_set=process_set)
    data = np.frombuffer(payload, np.uint8) if rank() == root_rank else np.zeros(int(length[0]), np.uint8)
    data = broadcast(tf.constant(data), root_rank, name=key + ".data", process_set=process_set)
    return cloudpickle.loads(data.numpy().tobytes())


def allgather_object(obj, name=None, process_set=global_process_set):
    """Returns the list of every rank's (every member's) Python object, in rank order.

    Raises:
        Exception: whatever pickling raises, on a rank whose ``obj`` cannot be pickled; the
            other ranks then raise ``tf.errors.InvalidArgumentError`` naming that rank and its
            error.

    Example:

    >>> import kerashvd as hvd
    >>> hvd.allgather_object(hvd.rank()) == list(range(hvd.size()))
    True
    """
    _require_init()
    ps = resolve(process_set, "allgather_object")
    key = _names.tensor_name("allgather_object", name, ps)
    # The other ranks wait in the size allgather: a pickling error must reach them.
    with shared_with_peers(ALLGATHER, _names.tensor_name("allgather", key + ".size", ps), ps,
                           errors=Exception):
        payload = np.frombuffer(cloudpickle.dumps(obj), np.uint8)
    sizes = allgather(tf.constant([payload.size], tf.int64), name=key + ".size",
                      process_set=process_set).numpy()
    data = allgather(tf.constant(payload), name=key + ".data", process_set=process_set).numpy().tobytes()
    out, offset = [], 0
    for n in sizes:
        out.append(cloudpickle.loads(data[offset:offset + int(n)]))
        offset += int(n)
    assert len(out) == set_size(ps)
    return out


def broadcast_object_fn(root_rank=0, session=None, name=None, process_set=global_process_set):
    """Returns a function ``fn(obj)`` that broadcasts ``obj`` from ``root_rank`` (Horovod's API).

    Each call of ``fn`` is one :func:`broadcast_object` with its own name. ``session`` is
    accepted for Horovod compatibility and must be None (there are no TF1 sessions here).

    Example:

    >>> import kerashvd as hvd
    >>> bcast = hvd.broadcast_object_fn(root_rank=0)
    >>> bcast({"seed": hvd.rank()})
    {'seed': 0}
    """
    if session is not None:
        raise ValueError("broadcast_object_fn(session=...) is for TensorFlow 1 sessions, which "
                         "kerashvd does not support; leave session=None")
    prefix = _names.tensor_name("broadcast_object_fn", name, resolve(process_set, "broadcast_object_fn"))
    calls = iter(range(1 << 62))

    def fn(obj):
        return broadcast_object(obj, root_rank, name=f"{prefix}.{next(calls)}",
                                process_set=process_set)

    return fn


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """Horovod's in-place broadcast: assigns ``root_rank``'s values to ``variables``.

    The same as :func:`broadcast_variables` (which also assigns in place); returns the
    variables.

    Example:

    >>> import kerashvd as hvd
    >>> v = tf.Variable(float(hvd.rank()))
    >>> float(hvd.broadcast_([v], root_rank=0)[0].numpy())
    0.0
    """
    variables = list(variables)
    broadcast_variables(variables, root_rank, name=name, process_set=process_set)
    return variables

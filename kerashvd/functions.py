"""Helpers built on the collectives: variables and Python objects."""

import io

import cloudpickle
import numpy as np
import tensorflow as tf

from . import _names
from .collectives import allgather, broadcast, grouped_broadcast
from .runtime import _require_init, size


def broadcast_variables(variables, root_rank, name=None):
    """Assigns ``root_rank``'s values to ``variables`` on every rank.

    Variables are grouped by dtype, one grouped broadcast per dtype.

    Args:
        variables: ``tf.Variable``/``keras.Variable`` objects, in the same order on every rank.
        root_rank: the rank whose values win.
        name: a prefix for the collectives' names.

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
    prefix = _names.tensor_name("broadcast_variables", name)
    for dtype_name in sorted(by_dtype):
        indices = by_dtype[dtype_name]
        values = grouped_broadcast([tf.convert_to_tensor(variables[i]) for i in indices],
                                   root_rank, name=f"{prefix}.{dtype_name}")
        for i, value in zip(indices, values):
            variables[i].assign(value)


def broadcast_object(obj, root_rank=0, name=None):
    """Returns ``root_rank``'s Python object on every rank (pickled with cloudpickle).

    Example:

    >>> import kerashvd as hvd
    >>> hvd.broadcast_object({"epoch": hvd.rank()}, root_rank=0)
    {'epoch': 0}
    """
    _require_init()
    from .runtime import rank
    key = _names.tensor_name("broadcast_object", name)
    payload = cloudpickle.dumps(obj) if rank() == root_rank else b""
    length = broadcast(tf.constant([len(payload)], tf.int64), root_rank, name=key + ".size")
    data = np.frombuffer(payload, np.uint8) if rank() == root_rank else np.zeros(int(length[0]), np.uint8)
    data = broadcast(tf.constant(data), root_rank, name=key + ".data")
    return cloudpickle.loads(data.numpy().tobytes())


def allgather_object(obj, name=None):
    """Returns the list of every rank's Python object, in rank order.

    Example:

    >>> import kerashvd as hvd
    >>> hvd.allgather_object(hvd.rank()) == list(range(hvd.size()))
    True
    """
    _require_init()
    key = _names.tensor_name("allgather_object", name)
    payload = np.frombuffer(cloudpickle.dumps(obj), np.uint8)
    sizes = allgather(tf.constant([payload.size], tf.int64), name=key + ".size").numpy()
    data = allgather(tf.constant(payload), name=key + ".data").numpy().tobytes()
    out, offset = [], 0
    for n in sizes:
        out.append(cloudpickle.loads(data[offset:offset + int(n)]))
        offset += int(n)
    assert len(out) == size()
    return out

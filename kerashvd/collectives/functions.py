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

    Variables are grouped by dtype, one grouped broadcast per dtype. Eagerly (and inside a
    ``tf.function``, which runs the assignments with the function) the values are assigned
    when it returns. In TensorFlow 1 graph mode (building a ``tf.Graph`` for a
    ``tf.compat.v1.Session``) it only adds ops to the graph, as Horovod's does: it returns the
    op that broadcasts and assigns when the session runs it, on every rank.

    Args:
        variables: ``tf.Variable``/``keras.Variable`` objects, in the same order on every rank.
        root_rank: the rank whose values win.
        name: a prefix for the collectives' names.
        process_set: the ranks that take part (default all); ``root_rank`` is a world rank.

    Returns:
        None when executing eagerly; otherwise the op (``tf.group`` of the assignments) that
        ``sess.run`` must run.

    Example:

    >>> import kerashvd as hvd
    >>> v = tf.Variable(float(hvd.rank()))
    >>> hvd.broadcast_variables([v], root_rank=0); float(v.numpy())
    0.0
    >>> with tf.Graph().as_default():  # TensorFlow 1 graph mode
    ...     w = tf.compat.v1.get_variable("w", initializer=float(hvd.rank()))
    ...     sync = hvd.broadcast_variables([w], root_rank=0)
    ...     with tf.compat.v1.Session() as sess:
    ...         sess.run(w.initializer); sess.run(sync); sess.run(w)
    0.0
    """
    assigned = _assign_broadcast(list(variables), root_rank, name, process_set,
                                 "broadcast_variables")
    if tf.executing_eagerly():
        return None
    # Keras 3 before 3.4 returns None from a variable's assign; inside a tf.function the
    # assignment runs all the same (automatic control dependencies).
    return tf.group(*[a for a in assigned if a is not None])


def _assign_broadcast(variables, root_rank, name, process_set, what):
    """Assigns root's values to ``variables`` (see broadcast_variables); returns what each
    ``assign`` returned, in the variables' order (in graph mode: the assigned values, which
    run the broadcast and the assignment when a session evaluates them)."""
    _require_init()
    by_dtype = {}
    for index, v in enumerate(variables):
        by_dtype.setdefault(tf.as_dtype(v.dtype).name, []).append(index)
    prefix = _names.tensor_name(what, name, resolve(process_set, what))
    assigned = [None] * len(variables)
    for dtype_name in sorted(by_dtype):
        indices = by_dtype[dtype_name]
        values = grouped_broadcast([tf.convert_to_tensor(variables[i]) for i in indices],
                                   root_rank, name=f"{prefix}.{dtype_name}",
                                   process_set=process_set)
        for i, value in zip(indices, values):
            assigned[i] = variables[i].assign(value)
    return assigned


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

    Eagerly, each call of ``fn`` is one :func:`broadcast_object` with its own name. In
    TensorFlow 1 graph mode, or with a ``session``, the broadcast ops are built once in the
    session's graph and each call runs them, as in Horovod.

    Args:
        root_rank: the rank whose object every rank gets.
        session: a ``tf.compat.v1.Session`` (or any session with ``run`` and ``graph``, such
            as a ``MonitoredSession``) to run the broadcasts with; default: eagerly, or in
            graph mode the default session.
        name: a prefix for the collectives' names.
        process_set: the ranks that take part (default all); ``root_rank`` is a world rank.

    Raises:
        ValueError: for a ``session`` that is not a session, or in graph mode without one.

    Example:

    >>> import kerashvd as hvd
    >>> bcast = hvd.broadcast_object_fn(root_rank=0)
    >>> bcast({"seed": hvd.rank()})
    {'seed': 0}
    """
    prefix = _names.tensor_name("broadcast_object_fn", name, resolve(process_set, "broadcast_object_fn"))
    if session is None and _graph_mode():
        session = tf.compat.v1.get_default_session()
        if session is None:
            raise ValueError("broadcast_object_fn in TensorFlow 1 graph mode needs the session "
                             "that runs it: pass session=sess, or call it inside "
                             "`with sess.as_default():`")
    if session is not None:
        return _session_object_broadcast(root_rank, session, prefix, process_set)
    calls = iter(range(1 << 62))

    def fn(obj):
        return broadcast_object(obj, root_rank, name=f"{prefix}.{next(calls)}",
                                process_set=process_set)

    return fn


def _session_object_broadcast(root_rank, session, prefix, process_set):
    """broadcast_object_fn with a session: the size and the bytes are broadcast by two ops
    built once in the session's graph, fed with this call's values. A root that cannot pickle
    its object sends the size -1, so the other ranks raise instead of waiting for bytes."""
    if not (callable(getattr(session, "run", None)) and hasattr(session, "graph")):
        raise ValueError("broadcast_object_fn(session=...) takes a tf.compat.v1.Session (or a "
                         f"session with run() and graph); received {session!r}")
    with session.graph.as_default():
        size_in = tf.compat.v1.placeholder(tf.int64, [1])
        data_in = tf.compat.v1.placeholder(tf.uint8, [None])
        size_out = broadcast(size_in, root_rank, name=prefix + ".size", process_set=process_set)
        data_out = broadcast(data_in, root_rank, name=prefix + ".data", process_set=process_set)

    def fn(obj):
        if rank() == root_rank:
            try:
                payload = cloudpickle.dumps(obj)
            except Exception:
                session.run(size_out, {size_in: [-1]})
                raise
            session.run(size_out, {size_in: [len(payload)]})
            data = np.frombuffer(payload, np.uint8)
        else:
            length = int(session.run(size_out, {size_in: [0]})[0])
            if length < 0:
                raise ValueError(f"broadcast_object_fn {prefix!r}: rank {root_rank} could not "
                                 "pickle its object (the error is raised there)")
            data = np.zeros(length, np.uint8)
        return cloudpickle.loads(session.run(data_out, {data_in: data}).tobytes())

    return fn


def broadcast_global_variables(root_rank):
    """Horovod's TensorFlow 1 broadcast: every global variable gets ``root_rank``'s value.

    TensorFlow 1 graph mode only (a ``tf.Graph`` run by a ``tf.compat.v1.Session``): returns
    the op that broadcasts and assigns ``tf.compat.v1.global_variables()`` when the session
    runs it, like :func:`broadcast_variables`. Eagerly and inside ``tf.function`` TensorFlow
    keeps no global variables, so it raises, as Horovod does, naming what to call instead.

    Args:
        root_rank: the rank whose values every rank gets.

    Returns:
        The op for ``sess.run``.

    Raises:
        RuntimeError: when executing eagerly or inside a ``tf.function``.

    Example:

    >>> import kerashvd as hvd
    >>> with tf.Graph().as_default():
    ...     w = tf.compat.v1.get_variable("w", initializer=float(hvd.rank()))
    ...     sync = hvd.broadcast_global_variables(0)
    ...     with tf.compat.v1.Session() as sess:
    ...         sess.run(w.initializer); sess.run(sync); sess.run(w)
    0.0
    """
    if not _graph_mode():
        raise RuntimeError(
            "hvd.broadcast_global_variables() works in TensorFlow 1 graph mode only (a "
            "tf.compat.v1.Session); eagerly and in tf.function TensorFlow keeps no global "
            "variables. Use hvd.broadcast_variables(model.variables + optimizer.variables, "
            "root_rank) instead, or hvd.callbacks.BroadcastGlobalVariablesCallback(root_rank) "
            "with Keras' fit.")
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank)


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """Horovod's in-place broadcast: assigns ``root_rank``'s values to ``variables``.

    The same as :func:`broadcast_variables` (which also assigns in place). In TensorFlow 1
    graph mode it returns the assigned values instead, as Horovod does: evaluating them in a
    session broadcasts, assigns and gives root's values.

    Returns:
        The variables (eagerly and in a ``tf.function``); in graph mode, one tensor per
        variable for ``sess.run``.

    Example:

    >>> import kerashvd as hvd
    >>> v = tf.Variable(float(hvd.rank()))
    >>> float(hvd.broadcast_([v], root_rank=0)[0].numpy())
    0.0
    """
    variables = list(variables)
    assigned = _assign_broadcast(variables, root_rank, name, process_set, "broadcast_")
    return assigned if _graph_mode() else variables


def _graph_mode():
    """Whether ops go into a TensorFlow 1 graph for a session to run: neither eager nor a
    ``tf.function`` (which runs what it holds, assignments included, when called)."""
    return not tf.executing_eagerly() and not tf.inside_function()

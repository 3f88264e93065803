"""Collective operations on TensorFlow tensors, eagerly or inside ``tf.function``.

Every function takes the tensor(s) first, then the operation's options, then ``name`` and
``process_set``. A collective is matched across ranks by its name (see ``_names``); every
rank of its process set (default: all ranks) must call the same collectives with the same
names, shapes and dtypes. Ranks that disagree get ``tf.errors.FailedPreconditionError`` on
every rank, as in Horovod. An argument that is wrong on one rank only raises there and fails
the collective on the other ranks too, with ``tf.errors.InvalidArgumentError`` naming that
rank (see ``_local_errors``).
"""

import functools

import numpy as np
import tensorflow as tf

from . import _names, _sparse
from ..runtime._engine import core as _core
from ._local_errors import (ALLGATHER, ALLREDUCE, ALLTOALL, BROADCAST, REDUCESCATTER,
                            shared_with_peers)
from ._xla_guard import check_not_xla
from ._ops import OPS
from .compression import Compression
from ..runtime.invalid_argument import InvalidArgumentError
from ..runtime.process_sets import global_process_set, resolve, set_size
from .reduce_ops import SCATTER_OPS, Average, resolve_op
from ..runtime._engine import require_init as _require_init

# The engine's dtypes (kerashvd._core.DTYPES, ops/core/types.cc), and those it reduces.
_ALL_DTYPES = {tf.as_dtype(row["name"]) for row in _core.DTYPES}
_REDUCE_DTYPES = {tf.as_dtype(row["name"]) for row in _core.DTYPES if row["reducible"]}
# Moved bit for bit as the signed type of their width by the collectives that only move data
# (broadcast, allgather): e.g. Keras' random-generator state is uint32 in some releases.
_CARRIED_AS = {tf.uint32: tf.int32, tf.uint64: tf.int64}
_MOVE_DTYPES = _ALL_DTYPES | set(_CARRIED_AS)


def _carried(tensors):
    """``tensors`` as the engine moves them, and the function that turns results back."""
    dtype = tensors[0].dtype if tensors else None
    if dtype not in _CARRIED_AS:
        return tensors, lambda results: results
    return ([tf.bitcast(t, _CARRIED_AS[dtype]) for t in tensors],
            lambda results: [tf.bitcast(r, dtype) for r in results])


def _collective(fn):
    """Marks a public collective: AutoGraph leaves it alone (it is plain graph-building code,
    and converting it costs time on every trace), and XLA is refused with a clear error."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        check_not_xla(f"kerashvd.{fn.__name__}")
        return fn(*args, **kwargs)

    return tf.autograph.experimental.do_not_convert(wrapper)


def _as_tensor(value, what, dtypes):
    try:
        tensor = tf.convert_to_tensor(value)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{what} needs a tensor or a value convertible to one; received "
                        f"{type(value).__name__}: {err}") from None
    if tensor.dtype not in dtypes:
        names = ", ".join(sorted(d.name for d in dtypes))
        raise TypeError(f"{what} does not support dtype {tensor.dtype.name}; supported: {names}")
    return tensor


def _require_rows(tensor, what):
    """Raises ValueError for a scalar where a first dimension is needed (when the rank is known)."""
    if tensor.shape.rank == 0:
        raise ValueError(f"{what} needs a tensor of rank >= 1 (it works along the first "
                         "dimension); received a scalar. Reshape it to [1] first.")
    return tensor


def _check_splits(splits, rows, n, what="alltoall"):
    """Validates alltoall splits known in Python (a list or an eager tensor) for n ranks.

    Returns them as ints, or None for a symbolic tensor (inside tf.function), which the kernel
    checks at run time. Raises InvalidArgumentError (also a ValueError) for bad splits.
    """
    if isinstance(splits, (tf.Tensor, tf.Variable)) and not tf.executing_eagerly():
        return None
    try:
        raw = splits.numpy() if hasattr(splits, "numpy") else splits
        values = [float(v) for v in np.asarray(raw).reshape(-1)]
        if np.ndim(raw) != 1:
            raise ValueError  # caught below
    except (TypeError, ValueError, NotImplementedError):
        if not tf.executing_eagerly():
            return None  # e.g. a list of symbolic tensors: the kernel checks them
        raise InvalidArgumentError(
            f"{what}: splits must be a list or vector of row counts, one per rank ({n}); "
            f"received {splits!r}") from None
    if len(values) != n:
        raise InvalidArgumentError(f"{what}: splits must have one entry per rank ({n}); "
                                   f"received {len(values)} entries: {_shown(values)}")
    if not all(np.isfinite(v) and v == int(v) for v in values):
        raise InvalidArgumentError(f"{what}: splits must be whole numbers of rows; received "
                                   f"{_shown(values)}")
    values = [int(v) for v in values]
    if any(v < 0 for v in values):
        raise InvalidArgumentError(f"{what}: splits must be >= 0; received {values}")
    if rows is not None and sum(values) != rows:
        raise InvalidArgumentError(f"{what}: splits sum to {sum(values)} but the tensor has "
                                   f"{rows} rows; they must be equal.")
    return values


def _shown(values):
    """Split values as a user wrote them: 2 rather than 2.0."""
    return "[" + ", ".join(str(int(v)) if np.isfinite(v) and v == int(v) else str(v)
                           for v in values) + "]"


def _split_tensor(splits, checked):
    """The splits input of the alltoall op: checked values, or a symbolic tensor as it is
    (the kernel accepts integer and float splits and checks them)."""
    if checked is not None:
        return tf.constant(checked, tf.int64)
    splits = tf.convert_to_tensor(splits)
    if splits.dtype in (tf.int32, tf.int64, tf.float32, tf.float64):
        return splits
    return tf.cast(splits, tf.float64 if splits.dtype.is_floating else tf.int64)


def _as_tensor_list(values, what, dtypes):
    if isinstance(values, (tf.Tensor, tf.Variable)) or not hasattr(values, "__iter__"):
        raise TypeError(f"{what} needs a list of tensors; received {type(values).__name__}")
    tensors = [_as_tensor(v, what, dtypes) for v in values]
    if len({t.dtype for t in tensors}) > 1:
        raise TypeError(f"{what} needs tensors of one dtype; received "
                        f"{sorted({t.dtype.name for t in tensors})}. Group them by dtype.")
    return tensors


@_collective
def allreduce(tensor, average=None, device_dense="", device_sparse="", compression=Compression.none,
              op=None, prescale_factor=1.0, postscale_factor=1.0, name=None,
              process_set=global_process_set):
    """Reduces a tensor over all ranks; every rank gets the result.

    Args:
        tensor: a tensor, or a ``tf.IndexedSlices``, whose values and indices are allgathered
            instead (op ``Sum`` or ``Average`` only, as in Horovod).
        average: deprecated Horovod argument; use ``op``.
        device_dense: accepted for Horovod compatibility; unused.
        device_sparse: the same.
        compression: a ``kerashvd.Compression`` applied around the collective.
        op: ``kerashvd.Average`` (default), ``Sum``, ``Min``, ``Max`` or ``Product``. Min and
            Max propagate NaN (see ``kerashvd.collectives.reduce_ops``).
        prescale_factor: multiplies the input before the reduction.
        postscale_factor: multiplies the result after the reduction.
        name: the key ranks match this collective by; default: a call counter (per thread,
            see ``kerashvd.collectives._names``).
        process_set: the ranks that take part (a registered ``kerashvd.ProcessSet``);
            default all. Average then divides by the set's size.

    Returns:
        A tensor of the input's shape and dtype (``tf.IndexedSlices`` for IndexedSlices).

    Raises:
        ValueError: for a bad ``op`` (checked first, before the tensor).
        NotImplementedError: for ``op=kerashvd.Adasum`` (as in Horovod), and for
            IndexedSlices with an op other than Sum and Average.
        TypeError: for an unsupported dtype.
        tf.errors.FailedPreconditionError: when ranks disagree on shape, dtype or op.
        tf.errors.InvalidArgumentError: when another rank's arguments were wrong.

    Example:

    >>> import kerashvd as hvd
    >>> hvd.init()
    >>> hvd.allreduce(tf.constant([1.0, 2.0]), op=hvd.Sum).numpy() / hvd.size()
    array([1., 2.], dtype=float32)
    """
    _require_init()
    ps = resolve(process_set, "allreduce")
    key = _names.tensor_name("allreduce", name, ps)
    if isinstance(tensor, tf.IndexedSlices):
        with shared_with_peers(ALLGATHER, key, ps):
            op = resolve_op(op, average)
            _sparse.check_op(op, "allreduce")  # the op first: it needs no values
            tensor = _sparse.with_values(tensor, _as_tensor(tensor.values, "allreduce",
                                                            _REDUCE_DTYPES))
        return _sparse.allreduce(tensor, op, key, ps, prescale_factor, postscale_factor)
    with shared_with_peers(ALLREDUCE, key, ps):
        op = resolve_op(op, average)
        tensor = _as_tensor(tensor, "allreduce", _REDUCE_DTYPES)
    compressed, context = compression.compress(tensor)
    reduced = OPS.kerashvd_allreduce(compressed, reduce_op=op, prescale_factor=prescale_factor,
                                     postscale_factor=postscale_factor, tensor_name=key,
                                     process_set_id=ps)
    return compression.decompress(reduced, context)


@_collective
def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="",
                      compression=Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, name=None, process_set=global_process_set):
    """Reduces a list of tensors as one unit: dense tensors fused into one collective.

    Args:
        tensors: a list of dense tensors of one dtype and/or ``tf.IndexedSlices`` (whose
            values and indices are allgathered, as by :func:`allreduce`).
        average: deprecated Horovod argument; use ``op``.
        device_dense: accepted for Horovod compatibility; unused.
        device_sparse: the same.
        compression: as for :func:`allreduce`.
        op: as for :func:`allreduce`.
        prescale_factor: as for :func:`allreduce`.
        postscale_factor: as for :func:`allreduce`.
        name: as for :func:`allreduce`.
        process_set: as for :func:`allreduce`.

    Returns:
        A list of reduced tensors (IndexedSlices for IndexedSlices), in the input's order.

    Raises:
        ValueError: as :func:`allreduce`.
        NotImplementedError: as :func:`allreduce`.
        TypeError: as :func:`allreduce`.
        tf.errors.FailedPreconditionError: as :func:`allreduce`.
        tf.errors.InvalidArgumentError: as :func:`allreduce`.

    Example:

    >>> import kerashvd as hvd
    >>> a, b = hvd.grouped_allreduce([tf.ones([2]), tf.zeros([3])])
    >>> a.shape, b.shape
    (TensorShape([2]), TensorShape([3]))
    """
    _require_init()
    ps = resolve(process_set, "grouped_allreduce")
    key = _names.tensor_name("grouped_allreduce", name, ps)
    if isinstance(tensors, (tf.Tensor, tf.Variable, tf.IndexedSlices)) or not hasattr(tensors, "__iter__"):
        raise TypeError(f"grouped_allreduce needs a list of tensors; received {type(tensors).__name__}")
    tensors = list(tensors)
    sparse = [i for i, t in enumerate(tensors) if isinstance(t, tf.IndexedSlices)]
    dense = [i for i, t in enumerate(tensors) if not isinstance(t, tf.IndexedSlices)]
    # The first collective is keyed `key` either way (see _sparse).
    with shared_with_peers(ALLREDUCE if dense or not sparse else ALLGATHER, key, ps):
        op = resolve_op(op, average)
        if sparse:
            _sparse.check_op(op, "grouped_allreduce")  # the op first: it needs no values
            for i in sparse:
                tensors[i] = _sparse.with_values(
                    tensors[i], _as_tensor(tensors[i].values, "grouped_allreduce", _REDUCE_DTYPES))
        dense_tensors = _as_tensor_list([tensors[i] for i in dense], "grouped_allreduce",
                                        _REDUCE_DTYPES)
    out = [None] * len(tensors)
    after = []  # the sparse collectives start once the dense one has (see _sparse)
    if dense:
        pairs = [compression.compress(t) for t in dense_tensors]
        reduced = OPS.kerashvd_grouped_allreduce([p[0] for p in pairs], reduce_op=op,
                                                 prescale_factor=prescale_factor,
                                                 postscale_factor=postscale_factor, tensor_name=key,
                                                 process_set_id=ps)
        for i, r, p in zip(dense, reduced, pairs):
            out[i] = compression.decompress(r, p[1])
        after = reduced
    if sparse:
        gathered = _sparse.grouped_allreduce([tensors[i] for i in sparse], op, key, ps,
                                             prescale_factor, postscale_factor, after=after)
        for i, g in zip(sparse, gathered):
            out[i] = g
    return out


@_collective
def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenates every rank's tensor along the first dimension, in rank order.

    The first dimension may differ between ranks; the others must agree.

    Args:
        tensor: a tensor of rank >= 1.
        name: the key ranks match this collective by.
        process_set: the ranks that take part (default all), concatenated in rank order.

    Returns:
        A tensor whose first dimension is the sum of all ranks' first dimensions.

    Example:

    >>> import kerashvd as hvd
    >>> hvd.allgather(tf.fill([hvd.rank() + 1], hvd.rank())).shape[0] == sum(range(1, hvd.size() + 1))
    True
    """
    _require_init()
    ps = resolve(process_set, "allgather")
    key = _names.tensor_name("allgather", name, ps)
    with shared_with_peers(ALLGATHER, key, ps):
        tensor = _require_rows(_as_tensor(tensor, "allgather", _MOVE_DTYPES), "allgather")
    (tensor,), back = _carried([tensor])
    return back([OPS.kerashvd_allgather(tensor, tensor_name=key, process_set_id=ps)])[0]


@_collective
def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """Allgathers a list of tensors of one dtype as one unit. Returns a list."""
    _require_init()
    ps = resolve(process_set, "grouped_allgather")
    key = _names.tensor_name("grouped_allgather", name, ps)
    with shared_with_peers(ALLGATHER, key, ps):
        tensors = [_require_rows(t, "grouped_allgather")
                   for t in _as_tensor_list(tensors, "grouped_allgather", _MOVE_DTYPES)]
    if not tensors:
        return []
    tensors, back = _carried(tensors)
    return back(OPS.kerashvd_grouped_allgather(tensors, tensor_name=key, process_set_id=ps))


@_collective
def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Returns ``root_rank``'s value of ``tensor`` on every rank.

    In a process set, ``root_rank`` is the world rank of one of its members (as in Horovod).

    Example:

    >>> import kerashvd as hvd
    >>> int(hvd.broadcast(tf.constant(hvd.rank()), root_rank=0))
    0
    """
    _require_init()
    ps = resolve(process_set, "broadcast")
    key = _names.tensor_name("broadcast", name, ps)
    with shared_with_peers(BROADCAST, key, ps):
        _check_root(root_rank, process_set)
        tensor = _as_tensor(tensor, "broadcast", _MOVE_DTYPES)
    (tensor,), back = _carried([tensor])
    return back([OPS.kerashvd_broadcast(tensor, root_rank=root_rank, tensor_name=key,
                                        process_set_id=ps)])[0]


@_collective
def grouped_broadcast(tensors, root_rank, name=None, process_set=global_process_set):
    """Broadcasts a list of tensors of one dtype as one unit. Returns a list."""
    _require_init()
    ps = resolve(process_set, "grouped_broadcast")
    key = _names.tensor_name("grouped_broadcast", name, ps)
    with shared_with_peers(BROADCAST, key, ps):
        _check_root(root_rank, process_set)
        tensors = _as_tensor_list(tensors, "grouped_broadcast", _MOVE_DTYPES)
    if not tensors:
        return []
    tensors, back = _carried(tensors)
    return back(OPS.kerashvd_grouped_broadcast(tensors, root_rank=root_rank, tensor_name=key,
                                               process_set_id=ps))


def _check_root(root_rank, process_set):
    ranks = (process_set or global_process_set).ranks
    if not isinstance(root_rank, int) or isinstance(root_rank, bool) or root_rank not in ranks:
        where = (f"in [0, {len(ranks)})" if ranks == global_process_set.ranks
                 else f"one of the process set's ranks {ranks}")
        raise ValueError(f"root_rank must be an int {where}; received root_rank={root_rank!r}")


@_collective
def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends ``splits[r]`` rows of ``tensor`` to each rank r and receives rows from every rank.

    Args:
        tensor: a tensor of rank >= 1.
        splits: rows to send to each rank (length ``size()``, whole numbers >= 0 summing to
            the first dimension; a list, an array or an integer or float tensor). Default:
            equal parts (the first dimension must divide by ``size()``).
        name: the key ranks match this collective by.
        process_set: the ranks that take part (default all); ``splits`` then has one entry
            per member, in rank order.

    Returns:
        The received rows in rank order when ``splits`` is None; otherwise a pair
        ``(received, received_splits)``.

    Raises:
        tf.errors.InvalidArgumentError: for splits that do not fit the tensor (as in Horovod;
            the error is also a ``ValueError``, except when the kernel checks symbolic splits
            inside ``tf.function`` at run time), when this rank is not in ``process_set``, and
            when another rank's splits were wrong.

    Example:

    >>> import kerashvd as hvd
    >>> out = hvd.alltoall(tf.range(hvd.size()))
    >>> out.numpy().tolist() == [hvd.rank()] * hvd.size()
    True
    """
    _require_init()
    ps = resolve(process_set, "alltoall")
    key = _names.tensor_name("alltoall", name, ps)
    n = set_size(ps)
    checked = None
    with shared_with_peers(ALLTOALL, key, ps):
        tensor = _require_rows(_as_tensor(tensor, "alltoall", _ALL_DTYPES), "alltoall")
        rows = tensor.shape[0] if tensor.shape.rank else None
        if splits is None:
            if rows is not None and rows % n != 0:
                raise InvalidArgumentError(
                    "alltoall without splits needs a first dimension divisible by the number "
                    f"of ranks ({n}); received {rows} rows. Pass splits= to send uneven parts.")
        else:
            checked = _check_splits(splits, rows, n)
    split_tensor = tf.zeros([0], tf.int64) if splits is None else _split_tensor(splits, checked)
    received, received_splits = OPS.kerashvd_alltoall(tensor, split_tensor, tensor_name=key,
                                                      process_set_id=ps)
    return received if splits is None else (received, received_splits)


@_collective
def reducescatter(tensor, op=Average, prescale_factor=1.0, postscale_factor=1.0, name=None,
                  process_set=global_process_set):
    """Reduces over ranks, then rank r keeps its part of the first dimension.

    With N rows and n ranks, the first ``N % n`` ranks get ``N // n + 1`` rows, the others
    ``N // n``.

    Args:
        tensor: a tensor of rank >= 1, the same shape on every rank.
        op: ``kerashvd.Average`` (default) or ``kerashvd.Sum``.
        process_set: the ranks that take part (default all); the rows are split among its
            members in rank order.

    Example:

    >>> import kerashvd as hvd
    >>> hvd.reducescatter(tf.ones([hvd.size(), 2]), op=hvd.Sum).shape
    TensorShape([1, 2])
    """
    _require_init()
    ps = resolve(process_set, "reducescatter")
    key = _names.tensor_name("reducescatter", name, ps)
    with shared_with_peers(REDUCESCATTER, key, ps):
        op = resolve_op(op, None, allowed=SCATTER_OPS)
        tensor = _require_rows(_as_tensor(tensor, "reducescatter", _REDUCE_DTYPES), "reducescatter")
    return OPS.kerashvd_reducescatter(tensor, reduce_op=op, prescale_factor=prescale_factor,
                                      postscale_factor=postscale_factor, tensor_name=key,
                                      process_set_id=ps)


@_collective
def grouped_reducescatter(tensors, op=Average, prescale_factor=1.0, postscale_factor=1.0, name=None,
                          process_set=global_process_set):
    """Reducescatter of a list of tensors of one dtype as one unit. Returns a list."""
    _require_init()
    ps = resolve(process_set, "grouped_reducescatter")
    key = _names.tensor_name("grouped_reducescatter", name, ps)
    with shared_with_peers(REDUCESCATTER, key, ps):
        op = resolve_op(op, None, allowed=SCATTER_OPS)
        tensors = [_require_rows(t, "grouped_reducescatter")
                   for t in _as_tensor_list(tensors, "grouped_reducescatter", _REDUCE_DTYPES)]
    if not tensors:
        return []
    return OPS.kerashvd_grouped_reducescatter(
        tensors, reduce_op=op, prescale_factor=prescale_factor, postscale_factor=postscale_factor,
        tensor_name=key, process_set_id=ps)


@_collective
def join():
    """Marks this rank as done and waits until every rank has joined.

    Until then this rank contributes the identity of the op to other ranks' allreduces and
    grouped allreduces (zeros for ``Sum`` and ``Average``, one for ``Product``, the lowest
    value (-inf for floats) for ``Max``, the highest (+inf) for ``Min``), so ranks with fewer
    batches can stop early. ``Average`` still divides by ``size()``. ``barrier()`` also
    completes with joined ranks. Broadcast, allgather, alltoall and reducescatter (and their
    grouped and object variants) need every rank's data and cannot run while a rank has joined.

    Returns:
        The rank that joined last.

    Raises:
        tf.errors.FailedPreconditionError: not from join() itself, but from a broadcast,
            allgather, alltoall or reducescatter that other ranks run while this rank has
            joined, on each of them, naming the collective, the tensor and the joined ranks.
    """
    _require_init()
    _names.new_epoch()
    return int(OPS.kerashvd_join(tensor_name="join"))


@_collective
def barrier(process_set=global_process_set):
    """Waits until every rank (of ``process_set``, default all) has reached this barrier."""
    _require_init()
    ps = resolve(process_set, "barrier")
    OPS.kerashvd_barrier(tensor_name=_names.tensor_name("barrier", None, ps), process_set_id=ps)

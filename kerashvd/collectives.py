"""Collective operations on TensorFlow tensors, eagerly or inside ``tf.function``.

Every function takes the tensor(s) first, then the operation's options, then ``name`` and
``process_set``. A collective is matched across ranks by its name (see ``_names``); every
rank of its process set (default: all ranks) must call the same collectives with the same
names, shapes and dtypes.
"""

import functools

import tensorflow as tf

from . import _names
from ._xla import check_not_xla
from ._ops import OPS
from .compression import Compression
from .process_sets import global_process_set, resolve, set_size
from .reduce_ops import Average, Sum, resolve_op
from .runtime import _require_init

_REDUCE_DTYPES = {tf.float16, tf.bfloat16, tf.float32, tf.float64, tf.int8, tf.uint8, tf.int32, tf.int64}
_ALL_DTYPES = _REDUCE_DTYPES | {tf.bool, tf.int16, tf.uint16}


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
    """Validates alltoall splits known in Python (a list or an eager tensor) for n ranks."""
    try:
        values = [int(v) for v in (splits.numpy() if hasattr(splits, "numpy") else splits)]
    except (TypeError, ValueError, AttributeError):
        return  # a symbolic tensor inside tf.function: the kernel checks it at run time
    if len(values) != n:
        raise ValueError(f"{what}: splits must have one entry per rank ({n}); received "
                         f"{len(values)} entries: {values}")
    if any(v < 0 for v in values):
        raise ValueError(f"{what}: splits must be >= 0; received {values}")
    if rows is not None and sum(values) != rows:
        raise ValueError(f"{what}: splits sum to {sum(values)} but the tensor has {rows} rows; "
                         "they must be equal.")


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
        tensor: a tensor (or ``tf.IndexedSlices``, which is allgathered instead).
        average: deprecated Horovod argument; use ``op``.
        device_dense, device_sparse: accepted for Horovod compatibility; unused.
        compression: a ``kerashvd.Compression`` applied around the collective.
        op: ``kerashvd.Average`` (default), ``Sum``, ``Min``, ``Max`` or ``Product``.
        prescale_factor: multiplies the input before the reduction.
        postscale_factor: multiplies the result after the reduction.
        name: the key ranks match this collective by; default: a call counter.
        process_set: the ranks that take part (a registered ``kerashvd.ProcessSet``);
            default all. Average then divides by the set's size.

    Returns:
        A tensor of the input's shape and dtype.

    Raises:
        TypeError: for an unsupported dtype. ValueError: for a bad ``op``.
        tf.errors.InvalidArgumentError: when ranks disagree on shape, dtype or op.

    Example:

    >>> import kerashvd as hvd
    >>> hvd.init()
    >>> hvd.allreduce(tf.constant([1.0, 2.0]), op=hvd.Sum).numpy() / hvd.size()
    array([1., 2.], dtype=float32)
    """
    _require_init()
    op = resolve_op(op, average)
    ps = resolve(process_set, "allreduce")
    key = _names.tensor_name("allreduce", name, ps)
    if isinstance(tensor, tf.IndexedSlices):
        return _allreduce_indexed_slices(tensor, op, key, ps)
    tensor = _as_tensor(tensor, "allreduce", _REDUCE_DTYPES)
    compressed, context = compression.compress(tensor)
    reduced = OPS.kerashvd_allreduce(compressed, reduce_op=op, prescale_factor=prescale_factor,
                                     postscale_factor=postscale_factor, tensor_name=key,
                                     process_set_id=ps)
    return compression.decompress(reduced, context)


def _allreduce_indexed_slices(slices, op, key, ps):
    if op not in (Average, Sum):
        raise ValueError("allreduce of tf.IndexedSlices supports op=Average or op=Sum only")
    values = OPS.kerashvd_allgather(slices.values, tensor_name=key + ".values", process_set_id=ps)
    indices = OPS.kerashvd_allgather(slices.indices, tensor_name=key + ".indices",
                                     process_set_id=ps)
    if op == Average:
        values = values / tf.cast(set_size(ps), values.dtype)
    return tf.IndexedSlices(values, indices, dense_shape=slices.dense_shape)


@_collective
def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="",
                      compression=Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, name=None, process_set=global_process_set):
    """Reduces a list of tensors of one dtype as one unit, fused into one collective.

    Args:
        tensors: a list of tensors of the same dtype.
        Others: as for :func:`allreduce`.

    Returns:
        A list of reduced tensors, in the input's order.

    Example:

    >>> import kerashvd as hvd
    >>> a, b = hvd.grouped_allreduce([tf.ones([2]), tf.zeros([3])])
    >>> a.shape, b.shape
    (TensorShape([2]), TensorShape([3]))
    """
    _require_init()
    op = resolve_op(op, average)
    ps = resolve(process_set, "grouped_allreduce")
    key = _names.tensor_name("grouped_allreduce", name, ps)
    tensors = _as_tensor_list(tensors, "grouped_allreduce", _REDUCE_DTYPES)
    if not tensors:
        return []
    pairs = [compression.compress(t) for t in tensors]
    reduced = OPS.kerashvd_grouped_allreduce([p[0] for p in pairs], reduce_op=op,
                                             prescale_factor=prescale_factor,
                                             postscale_factor=postscale_factor, tensor_name=key,
                                             process_set_id=ps)
    return [compression.decompress(r, p[1]) for r, p in zip(reduced, pairs)]


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
    tensor = _require_rows(_as_tensor(tensor, "allgather", _ALL_DTYPES), "allgather")
    return OPS.kerashvd_allgather(tensor, tensor_name=_names.tensor_name("allgather", name, ps),
                                  process_set_id=ps)


@_collective
def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """Allgathers a list of tensors of one dtype as one unit. Returns a list."""
    _require_init()
    ps = resolve(process_set, "grouped_allgather")
    tensors = [_require_rows(t, "grouped_allgather")
               for t in _as_tensor_list(tensors, "grouped_allgather", _ALL_DTYPES)]
    if not tensors:
        return []
    return OPS.kerashvd_grouped_allgather(
        tensors, tensor_name=_names.tensor_name("grouped_allgather", name, ps), process_set_id=ps)


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
    _check_root(root_rank, process_set)
    tensor = _as_tensor(tensor, "broadcast", _ALL_DTYPES)
    return OPS.kerashvd_broadcast(tensor, root_rank=root_rank,
                                  tensor_name=_names.tensor_name("broadcast", name, ps),
                                  process_set_id=ps)


@_collective
def grouped_broadcast(tensors, root_rank, name=None, process_set=global_process_set):
    """Broadcasts a list of tensors of one dtype as one unit. Returns a list."""
    _require_init()
    ps = resolve(process_set, "grouped_broadcast")
    _check_root(root_rank, process_set)
    tensors = _as_tensor_list(tensors, "grouped_broadcast", _ALL_DTYPES)
    if not tensors:
        return []
    return OPS.kerashvd_grouped_broadcast(
        tensors, root_rank=root_rank, tensor_name=_names.tensor_name("grouped_broadcast", name, ps),
        process_set_id=ps)


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
        splits: rows to send to each rank (length ``size()``, summing to the first
            dimension). Default: equal parts (the first dimension must divide by ``size()``).
        name: the key ranks match this collective by.
        process_set: the ranks that take part (default all); ``splits`` then has one entry
            per member, in rank order.

    Returns:
        The received rows in rank order when ``splits`` is None; otherwise a pair
        ``(received, received_splits)``.

    Example:

    >>> import kerashvd as hvd
    >>> out = hvd.alltoall(tf.range(hvd.size()))
    >>> out.numpy().tolist() == [hvd.rank()] * hvd.size()
    True
    """
    _require_init()
    ps = resolve(process_set, "alltoall")
    n = set_size(ps)
    tensor = _require_rows(_as_tensor(tensor, "alltoall", _ALL_DTYPES), "alltoall")
    rows = tensor.shape[0] if tensor.shape.rank else None
    if splits is None:
        if rows is not None and rows % n != 0:
            raise ValueError(f"alltoall without splits needs a first dimension divisible by the "
                             f"number of ranks ({n}); received {rows} rows. Pass splits= "
                             "to send uneven parts.")
    else:
        _check_splits(splits, rows, n)
    split_tensor = tf.zeros([0], tf.int64) if splits is None else tf.cast(splits, tf.int64)
    received, received_splits = OPS.kerashvd_alltoall(
        tensor, split_tensor, tensor_name=_names.tensor_name("alltoall", name, ps),
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
    op = resolve_op(op, None, allowed=(Average, Sum))
    ps = resolve(process_set, "reducescatter")
    tensor = _require_rows(_as_tensor(tensor, "reducescatter", _REDUCE_DTYPES), "reducescatter")
    return OPS.kerashvd_reducescatter(tensor, reduce_op=op, prescale_factor=prescale_factor,
                                      postscale_factor=postscale_factor,
                                      tensor_name=_names.tensor_name("reducescatter", name, ps),
                                      process_set_id=ps)


@_collective
def grouped_reducescatter(tensors, op=Average, prescale_factor=1.0, postscale_factor=1.0, name=None,
                          process_set=global_process_set):
    """Reducescatter of a list of tensors of one dtype as one unit. Returns a list."""
    _require_init()
    op = resolve_op(op, None, allowed=(Average, Sum))
    ps = resolve(process_set, "grouped_reducescatter")
    tensors = [_require_rows(t, "grouped_reducescatter")
               for t in _as_tensor_list(tensors, "grouped_reducescatter", _REDUCE_DTYPES)]
    if not tensors:
        return []
    return OPS.kerashvd_grouped_reducescatter(
        tensors, reduce_op=op, prescale_factor=prescale_factor, postscale_factor=postscale_factor,
        tensor_name=_names.tensor_name("grouped_reducescatter", name, ps), process_set_id=ps)


@_collective
def join():
    """Marks this rank as done and waits until every rank has joined.

    Until then this rank contributes zeros to other ranks' allreduces (and no rows to
    allgathers), so ranks with fewer batches can stop early. ``Average`` still divides by
    ``size()``.

    Returns:
        The rank that joined last.
    """
    _require_init()
    return int(OPS.kerashvd_join(tensor_name="join"))


@_collective
def barrier(process_set=global_process_set):
    """Waits until every rank (of ``process_set``, default all) has reached this barrier."""
    _require_init()
    ps = resolve(process_set, "barrier")
    OPS.kerashvd_barrier(tensor_name=_names.tensor_name("barrier", None, ps), process_set_id=ps)

"""allreduce of ``tf.IndexedSlices`` (sparse gradients), as in Horovod.

A sum of sparse tensors is their concatenation: every rank's values and indices are
allgathered instead of reduced, and ``Average`` divides the gathered values by the process
set's size. Other reductions have no such form and raise ``NotImplementedError``, as in
Horovod; ``prescale_factor`` and ``postscale_factor`` multiply the values (the reduction is a
sum, so they commute with it).
"""

import tensorflow as tf

from ._ops import OPS
from ..runtime.process_sets import set_size
from .reduce_ops import Average, Sum, op_name


def check_op(op, what):
    """Raises NotImplementedError unless ``op`` can reduce IndexedSlices."""
    if op not in (Average, Sum):
        raise NotImplementedError(
            f"{what} of tf.IndexedSlices supports op=Average or op=Sum only; received "
            f"op={op_name(op)}. Reduce a dense tensor instead (tf.convert_to_tensor(slices), or "
            "sparse_as_dense=True for DistributedOptimizer / DistributedGradientTape).")


def _scaled(values, op, process_set_id, prescale, postscale):
    if op == Average:
        values = values / tf.cast(set_size(process_set_id), values.dtype)
    factor = prescale * postscale
    return values if factor == 1.0 else values * tf.cast(factor, values.dtype)


def allreduce(slices, op, key, process_set_id, prescale=1.0, postscale=1.0):
    """Values and indices allgathered under ``key.values`` and ``key.indices``."""
    values = OPS.kerashvd_allgather(slices.values, tensor_name=key + ".values",
                                    process_set_id=process_set_id)
    indices = OPS.kerashvd_allgather(slices.indices, tensor_name=key + ".indices",
                                     process_set_id=process_set_id)
    return tf.IndexedSlices(_scaled(values, op, process_set_id, prescale, postscale), indices,
                            dense_shape=slices.dense_shape)


def _dtype_name(values):
    """The dtype name ``values`` has or converts to; "" when it converts to nothing (the
    caller's checks then raise)."""
    dtype = getattr(values, "dtype", None)
    try:
        return tf.as_dtype(dtype).name if dtype is not None else tf.convert_to_tensor(values).dtype.name
    except (TypeError, ValueError):
        return ""


def values_key(key, slices_list):
    """The name of the first collective :func:`grouped_allreduce` issues. Works before the
    values are checked (they may still be lists), so that a failed check reaches the peers
    under that name."""
    return f"{key}.values.{min(_dtype_name(s.values) for s in slices_list)}"


def with_values(slices, values):
    """``slices`` with its values replaced by ``values`` (the checked tensor)."""
    return tf.IndexedSlices(values, slices.indices, dense_shape=slices.dense_shape)


def grouped_allreduce(slices_list, op, key, process_set_id, prescale=1.0, postscale=1.0):
    """Every IndexedSlices of a grouped allreduce: one grouped allgather of the values per
    values dtype (``key.values.<dtype>``, in dtype-name order), then one of all the indices
    (``key.indices``, as int64). Returns them in ``slices_list``'s order."""
    by_dtype = {}
    for i, s in enumerate(slices_list):
        by_dtype.setdefault(s.values.dtype.name, []).append(i)
    values = [None] * len(slices_list)
    for dtype_name in sorted(by_dtype):
        at = by_dtype[dtype_name]
        gathered = OPS.kerashvd_grouped_allgather(
            [slices_list[i].values for i in at], tensor_name=f"{key}.values.{dtype_name}",
            process_set_id=process_set_id)
        for i, g in zip(at, gathered):
            values[i] = _scaled(g, op, process_set_id, prescale, postscale)
    indices = OPS.kerashvd_grouped_allgather([tf.cast(s.indices, tf.int64) for s in slices_list],
                                             tensor_name=f"{key}.indices",
                                             process_set_id=process_set_id)
    return [tf.IndexedSlices(v, tf.cast(i, s.indices.dtype), dense_shape=s.dense_shape)
            for v, i, s in zip(values, indices, slices_list)]

"""allreduce of ``tf.IndexedSlices`` (sparse gradients), as in Horovod.

A sum of sparse tensors is their concatenation: every rank's values and indices are
allgathered instead of reduced, and ``Average`` divides the gathered values by the process
set's size. Other reductions have no such form and raise ``NotImplementedError``, as in
Horovod; ``prescale_factor`` and ``postscale_factor`` multiply the values (the reduction is a
sum, so they commute with it).

Names, so that ranks that disagree get the mismatch error rather than a stall: the first
collective of a call is keyed by the call's own name, which is also the dense path's name, so
IndexedSlices on one rank and a dense tensor on another meet in the engine (an allgather
against an allreduce: "ranks disagree on collective"). Each later collective of the call
starts only once the previous one has completed (a control dependency inside
``tf.function``), so after a failed first collective no rank is left with a second one that
the others never submit.
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
    """Values allgathered under ``key``, then indices under ``key.indices``."""
    values = OPS.kerashvd_allgather(slices.values, tensor_name=key, process_set_id=process_set_id)
    with tf.control_dependencies([values]):
        indices = OPS.kerashvd_allgather(slices.indices, tensor_name=key + ".indices",
                                         process_set_id=process_set_id)
    return tf.IndexedSlices(_scaled(values, op, process_set_id, prescale, postscale), indices,
                            dense_shape=slices.dense_shape)


def with_values(slices, values):
    """``slices`` with its values replaced by ``values`` (the checked tensor)."""
    return tf.IndexedSlices(values, slices.indices, dense_shape=slices.dense_shape)


def grouped_allreduce(slices_list, op, key, process_set_id, prescale=1.0, postscale=1.0,
                      after=()):
    """Every IndexedSlices of a grouped allreduce, one collective after another (each once
    the previous, and ``after``, completed): one grouped allgather of all the indices (as
    int64), keyed ``key`` when it is the call's first collective (``after`` empty) and
    ``key.indices`` otherwise; then one grouped allgather of the values per values dtype, in
    dtype-name order, the i-th keyed ``key.values.<i>``. Ranks that differ in the number of
    IndexedSlices then disagree on the indices' number of tensors, and ranks that differ in
    their dtypes disagree on the first values group where they differ: a mismatch error on
    every rank either way. Returns them in ``slices_list``'s order."""
    by_dtype = {}
    for i, s in enumerate(slices_list):
        by_dtype.setdefault(s.values.dtype.name, []).append(i)
    with tf.control_dependencies(list(after)):
        indices = OPS.kerashvd_grouped_allgather(
            [tf.cast(s.indices, tf.int64) for s in slices_list],
            tensor_name=f"{key}.indices" if after else key, process_set_id=process_set_id)
    previous = indices
    values = [None] * len(slices_list)
    for group, dtype_name in enumerate(sorted(by_dtype)):
        at = by_dtype[dtype_name]
        with tf.control_dependencies(list(previous)):
            previous = OPS.kerashvd_grouped_allgather(
                [slices_list[i].values for i in at], tensor_name=f"{key}.values.{group}",
                process_set_id=process_set_id)
        for i, g in zip(at, previous):
            values[i] = _scaled(g, op, process_set_id, prescale, postscale)
    return [tf.IndexedSlices(v, tf.cast(i, s.indices.dtype), dense_shape=s.dense_shape)
            for v, i, s in zip(values, indices, slices_list)]

"""Gradients of the collectives, registered where the ops are defined.

The definitions are Horovod's (horovod/tensorflow/mpi_ops.py), so that scripts written for
Horovod train the same way. Each gradient is itself a collective in the forward op's process
set (n members). With g the incoming gradient of this rank:
- allreduce: the same reduction of g, with the same scale factors (Sum stays Sum, Average
  stays Average): the gradient of the sum of the ranks' losses.
- allgather: the Average allreduce of g, then the rows this rank contributed: the gradient of
  the mean of the ranks' losses (1/n times that of their sum).
- broadcast: the Average allreduce of g on the root, zeros on the other ranks: again the
  gradient of the mean of the ranks' losses.
- reducescatter: the allgather of g, times n for op=Sum (times 1 for op=Average), times
  prescale_factor * postscale_factor: n times the gradient of the sum of the ranks' losses
  (Horovod's scaling, kept for compatibility).
- alltoall: g sent back along the received splits: the gradient of the sum of the losses.
Grouped variants are the same per tensor. Their gradients may have several dtypes (a float32
``output_gradients`` for a float64 output, say), while one grouped op takes one dtype: the
gradient runs one grouped collective per dtype, in order of first appearance.

Names. Every rank's backward pass must key its collectives alike, and one forward op can be
differentiated several times (a persistent tape asked twice, two tapes over one op), each
call making its own collectives, so the name depends on the call: the first gradient of
forward op ``<key>`` in a graph is ``<key>.grad``, the next ``<key>.grad.call1``, and so on
(counted per outermost graph, as SyncBatchNormalization counts its calls, so that a rank
that retraces a function more often than another still agrees with it; a process-wide
counter would not). Eagerly each gradient runs to completion before the next starts, so it
is always ``<key>.grad``. Several dtypes add ``.<dtype>`` to the name of each group's op.

Code that needs the gradient of the sum of the ranks' losses through an allgather (layers
that gather statistics, such as SyncBatchNormalization) multiplies it back with
:func:`scale_gradient`.
"""

import weakref

import tensorflow as tf

from . import _names
from ..runtime._op_library import OPS
from ..runtime.process_sets import set_rank, set_size
from ..runtime.world import rank
from .reduce_ops import Average, Sum


def scale_gradient(tensor, factor):
    """Returns ``tensor`` unchanged; its gradient is multiplied by ``factor`` on the way back.

    ``scale_gradient(allgather(x), size())`` gives ``x`` the gradient of the sum of the ranks'
    losses (an allgather's gradient averages over the ranks, as in Horovod).
    """

    @tf.custom_gradient
    def identity(x):
        return tf.identity(x), lambda dy: dy * tf.cast(factor, dy.dtype)

    return identity(tensor)


# Outermost graph -> {forward key: gradient calls made in it} (see "Names" above).
_grad_calls = weakref.WeakKeyDictionary()


def _outermost_graph():
    graph = tf.compat.v1.get_default_graph()
    while getattr(graph, "outer_graph", None) is not None:
        graph = graph.outer_graph
    return graph


def _name(op):
    """The key of one gradient call of ``op``: the same on every rank, new for each call."""
    forward = op.get_attr("tensor_name").decode()
    if tf.executing_eagerly():
        return _names.derived(forward, "grad")
    calls = _grad_calls.setdefault(_outermost_graph(), {})
    n = calls.get(forward, 0)
    calls[forward] = n + 1
    return _names.derived(forward, "grad" if n == 0 else f"grad.call{n}")


def _per_dtype(grouped_op, tensors, name):
    """Runs ``grouped_op(tensors_of_one_dtype, name)`` once per dtype among ``tensors``;
    returns the outputs in the order of ``tensors``."""
    groups = {}
    for i, t in enumerate(tensors):
        groups.setdefault(t.dtype, []).append(i)
    out = [None] * len(tensors)
    for dtype, positions in groups.items():
        key = name if len(groups) == 1 else f"{name}.{dtype.name}"
        for i, result in zip(positions, grouped_op([tensors[i] for i in positions], key)):
            out[i] = result
    return out


def _set(op):
    return op.get_attr("process_set_id")


def _thread(op):
    """The forward op's ``thread`` input, which its gradient's collectives take too: they
    pair by the same calling thread (``_names``, "Threads")."""
    n = op.get_attr("thread_tags")
    return list(op.inputs[len(op.inputs) - n:]) if n else []


def _gradient(op_type):
    """``tf.RegisterGradient(op_type)`` for a function that returns the gradients of the
    data inputs; the ``thread`` input, a string, gets none."""
    def register(function):
        def gradients(op, *grads):
            out = function(op, *grads)
            out = list(out) if isinstance(out, (list, tuple)) else [out]
            return out + [None] * op.get_attr("thread_tags")
        tf.RegisterGradient(op_type)(gradients)
        return function
    return register


def _scales(op):
    return {"prescale_factor": op.get_attr("prescale_factor"),
            "postscale_factor": op.get_attr("postscale_factor")}


@_gradient("KerashvdAllreduce")
def _allreduce_grad(op, grad):
    return OPS.kerashvd_allreduce(grad, reduce_op=op.get_attr("reduce_op"), tensor_name=_name(op),
                                  process_set_id=_set(op), thread=_thread(op), **_scales(op))


@_gradient("KerashvdGroupedAllreduce")
def _grouped_allreduce_grad(op, *grads):
    return _per_dtype(lambda ts, key: OPS.kerashvd_grouped_allreduce(
        ts, reduce_op=op.get_attr("reduce_op"), tensor_name=key, process_set_id=_set(op),
        thread=_thread(op), **_scales(op)), grads, _name(op))


def _own_rows(op, reduced, first_dims):
    # num= because the number of ranks is not known from first_dims' shape inside tf.function.
    return tf.split(reduced, first_dims, num=set_size(_set(op)), axis=0)[set_rank(_set(op))]


@_gradient("KerashvdAllgather")
def _allgather_grad(op, grad):
    name, ps = _name(op), _set(op)
    averaged = OPS.kerashvd_allreduce(grad, reduce_op=Average, tensor_name=name, process_set_id=ps,
                                      thread=_thread(op))
    dims = OPS.kerashvd_allgather(tf.shape(op.inputs[0], out_type=tf.int64)[:1],
                                  tensor_name=name + ".dims", process_set_id=ps, thread=_thread(op))
    return _own_rows(op, averaged, dims)


@_gradient("KerashvdGroupedAllgather")
def _grouped_allgather_grad(op, *grads):
    name, ps = _name(op), _set(op)
    averaged = _per_dtype(lambda ts, key: OPS.kerashvd_grouped_allreduce(
        ts, reduce_op=Average, tensor_name=key, process_set_id=ps, thread=_thread(op)), grads,
        name)
    dims = OPS.kerashvd_grouped_allgather(
        [tf.shape(x, out_type=tf.int64)[:1] for x in op.inputs[:len(grads)]],
        tensor_name=name + ".dims", process_set_id=ps, thread=_thread(op))
    return [_own_rows(op, a, d) for a, d in zip(averaged, dims)]


def _on_root_only(op, averaged):
    """The root keeps the averaged gradient; other ranks get zeros that still depend on it.

    The zeros must be computed from the allreduce's output: with tf.zeros_like the allreduce
    would be pruned from the graph on non-root ranks inside tf.function, and the root would
    wait for them forever. Multiplying by zero keeps it (TF folds x * 0 only in aggressive
    mode, because of NaN semantics).
    """
    if rank() == op.get_attr("root_rank"):
        return averaged
    zero = lambda a: a * tf.constant(0, a.dtype)  # noqa: E731
    return [zero(a) for a in averaged] if isinstance(averaged, list) else zero(averaged)


@_gradient("KerashvdBroadcast")
def _broadcast_grad(op, grad):
    return _on_root_only(op, OPS.kerashvd_allreduce(grad, reduce_op=Average, tensor_name=_name(op),
                                                    process_set_id=_set(op), thread=_thread(op)))


@_gradient("KerashvdGroupedBroadcast")
def _grouped_broadcast_grad(op, *grads):
    averaged = _per_dtype(lambda ts, key: OPS.kerashvd_grouped_allreduce(
        ts, reduce_op=Average, tensor_name=key, process_set_id=_set(op), thread=_thread(op)),
        grads, _name(op))
    return _on_root_only(op, averaged)


def _scatter_grad(op, grads):
    gathered = _per_dtype(lambda ts, key: OPS.kerashvd_grouped_allgather(
        ts, tensor_name=key, process_set_id=_set(op), thread=_thread(op)), grads,
        _name(op))
    scale = op.get_attr("prescale_factor") * op.get_attr("postscale_factor")
    if op.get_attr("reduce_op") == Sum:
        scale *= set_size(_set(op))
    if scale != 1.0:
        gathered = [g * tf.cast(scale, g.dtype) for g in gathered]
    return gathered


@_gradient("KerashvdReducescatter")
def _reducescatter_grad(op, grad):
    return _scatter_grad(op, [grad])[0]


@_gradient("KerashvdGroupedReducescatter")
def _grouped_reducescatter_grad(op, *grads):
    return _scatter_grad(op, grads)


@_gradient("KerashvdAlltoall")
def _alltoall_grad(op, grad, unused_splits_grad):
    back, _ = OPS.kerashvd_alltoall(grad, op.outputs[1], tensor_name=_name(op),
                                    process_set_id=_set(op), thread=_thread(op))
    return back, None

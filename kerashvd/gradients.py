"""Gradients of the collectives, registered where the ops are defined.

Each gradient is itself a collective in the forward op's process set, keyed by the forward
op's name plus ``.grad`` so every rank's backward pass matches up:
- allreduce: the same reduction of the incoming gradient (Sum stays Sum, Average stays Average).
- allgather: the summed gradient's slice that came from this rank.
- broadcast: the summed gradient on the root, zeros elsewhere.
- reducescatter: the allgathered gradient (divided by size for Average).
- alltoall: the gradient sent back along the received splits.
"""

import tensorflow as tf

from ._ops import OPS
from .reduce_ops import Average, Sum


def _name(op):
    return op.get_attr("tensor_name").decode() + ".grad"


def _set(op):
    return op.get_attr("process_set_id")


def _scales(op):
    return {"prescale_factor": op.get_attr("prescale_factor"),
            "postscale_factor": op.get_attr("postscale_factor")}


@tf.RegisterGradient("KerashvdAllreduce")
def _allreduce_grad(op, grad):
    return OPS.kerashvd_allreduce(grad, reduce_op=op.get_attr("reduce_op"), tensor_name=_name(op),
                                  process_set_id=_set(op), **_scales(op))


@tf.RegisterGradient("KerashvdGroupedAllreduce")
def _grouped_allreduce_grad(op, *grads):
    return OPS.kerashvd_grouped_allreduce(list(grads), reduce_op=op.get_attr("reduce_op"),
                                          tensor_name=_name(op), process_set_id=_set(op),
                                          **_scales(op))


def _own_rows(op, summed, first_dims):
    from .process_sets import set_rank, set_size
    # num= because the number of ranks is not known from first_dims' shape inside tf.function.
    return tf.split(summed, first_dims, num=set_size(_set(op)), axis=0)[set_rank(_set(op))]


@tf.RegisterGradient("KerashvdAllgather")
def _allgather_grad(op, grad):
    name, ps = _name(op), _set(op)
    summed = OPS.kerashvd_allreduce(grad, reduce_op=Sum, tensor_name=name, process_set_id=ps)
    dims = OPS.kerashvd_allgather(tf.shape(op.inputs[0], out_type=tf.int64)[:1],
                                  tensor_name=name + ".dims", process_set_id=ps)
    return _own_rows(op, summed, dims)


@tf.RegisterGradient("KerashvdGroupedAllgather")
def _grouped_allgather_grad(op, *grads):
    name, ps = _name(op), _set(op)
    summed = OPS.kerashvd_grouped_allreduce(list(grads), reduce_op=Sum, tensor_name=name,
                                            process_set_id=ps)
    dims = OPS.kerashvd_grouped_allgather(
        [tf.shape(x, out_type=tf.int64)[:1] for x in op.inputs], tensor_name=name + ".dims",
        process_set_id=ps)
    return [_own_rows(op, s, d) for s, d in zip(summed, dims)]


def _on_root_only(op, summed):
    """The root keeps the summed gradient; other ranks get zeros that still depend on it.

    The zeros must be computed from the allreduce's output: with tf.zeros_like the allreduce
    would be pruned from the graph on non-root ranks inside tf.function, and the root would
    wait for them forever. Multiplying by zero keeps it (TF folds x * 0 only in aggressive
    mode, because of NaN semantics).
    """
    from .runtime import rank
    if rank() == op.get_attr("root_rank"):
        return summed
    zero = lambda s: s * tf.constant(0, s.dtype)  # noqa: E731
    return [zero(s) for s in summed] if isinstance(summed, list) else zero(summed)


@tf.RegisterGradient("KerashvdBroadcast")
def _broadcast_grad(op, grad):
    return _on_root_only(op, OPS.kerashvd_allreduce(grad, reduce_op=Sum, tensor_name=_name(op),
                                                    process_set_id=_set(op)))


@tf.RegisterGradient("KerashvdGroupedBroadcast")
def _grouped_broadcast_grad(op, *grads):
    summed = OPS.kerashvd_grouped_allreduce(list(grads), reduce_op=Sum, tensor_name=_name(op),
                                            process_set_id=_set(op))
    return _on_root_only(op, list(summed))


def _scatter_grad(op, grads):
    from .process_sets import set_size
    gathered = OPS.kerashvd_grouped_allgather(list(grads), tensor_name=_name(op),
                                              process_set_id=_set(op))
    if op.get_attr("reduce_op") == Average:
        gathered = [g / tf.cast(set_size(_set(op)), g.dtype) for g in gathered]
    scale = op.get_attr("prescale_factor") * op.get_attr("postscale_factor")
    if scale != 1.0:
        gathered = [g * tf.cast(scale, g.dtype) for g in gathered]
    return gathered


@tf.RegisterGradient("KerashvdReducescatter")
def _reducescatter_grad(op, grad):
    return _scatter_grad(op, [grad])[0]


@tf.RegisterGradient("KerashvdGroupedReducescatter")
def _grouped_reducescatter_grad(op, *grads):
    return _scatter_grad(op, grads)


@tf.RegisterGradient("KerashvdAlltoall")
def _alltoall_grad(op, grad, unused_splits_grad):
    back, _ = OPS.kerashvd_alltoall(grad, op.outputs[1], tensor_name=_name(op),
                                    process_set_id=_set(op))
    return back, None

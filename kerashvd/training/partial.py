"""Local layers: Horovod's ``PartialDistributedOptimizer`` and ``PartialDistributedGradientTape``.

Some layers are meant to differ between ranks: model-parallel parts, a per-rank head or
embedding shard. Their gradients must not be averaged. These two functions build the usual
distributed optimizer or tape and register ``local_layers``: every trainable weight of
theirs is local (as with ``register_local_var`` / ``register_local_source``), read at each
step, so that the layers of a model built lazily (no ``keras.Input``, or subclassed) can be
registered before ``fit`` creates their weights. Local gradients are applied on their own
rank, divided by ``size()`` unless ``scale_local_gradients=False``.

Pass the same layers as ``local_variables`` to ``BroadcastGlobalVariablesCallback`` (or
``broadcast_model_state``) so that the start-of-training broadcast leaves them alone too.
"""

import sys

from ..collectives.compression import Compression
from ..collectives.reduce_ops import Average


def _layer_classes():
    classes = []
    for module in ("keras", "tf_keras"):
        layers = getattr(sys.modules.get(module), "layers", None)
        if layers is not None and hasattr(layers, "Layer"):
            classes.append(layers.Layer)
    return tuple(classes)


def _local_layers(local_layers):
    """``local_layers`` (a layer, a list of layers, or None) as a list of layers."""
    if local_layers is None:
        return []
    classes = _layer_classes()
    if classes and isinstance(local_layers, classes):
        local_layers = [local_layers]
    if not isinstance(local_layers, (list, tuple)) or not all(
            classes and isinstance(layer, classes) for layer in local_layers):
        raise ValueError("local_layers must be a Keras layer or a list of Keras layers; "
                         f"received local_layers={local_layers!r}")
    return list(local_layers)


def PartialDistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",  # noqa: N802
                                compression=Compression.none, sparse_as_dense=False,
                                gradient_predivide_factor=1.0, op=Average,
                                backward_passes_per_step=1, average_aggregated_gradients=False,
                                groups=None, local_layers=None, scale_local_gradients=True,
                                process_set=None, bucket_cap_mb=None):
    """A :class:`kerashvd.DistributedOptimizer` that leaves ``local_layers`` rank-local.

    Arguments are those of ``DistributedOptimizer`` (Horovod's order), plus:

    Args:
        local_layers: a Keras layer or a list of them. Their trainable weights' gradients
            are applied on each rank without any collective. The weights are read at each
            step, so layers of a model built lazily (at its first call in ``fit``) work.
        scale_local_gradients: divide those local gradients by ``size()`` (default True).

    Returns:
        The ``DistributedOptimizer``; more variables can be added with its
        ``register_local_var``.

    Raises:
        ValueError: when ``local_layers`` holds something other than Keras layers.

    Example:

    >>> head = keras.layers.Dense(10, name="per_rank_head")
    >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), head])
    >>> opt = hvd.PartialDistributedOptimizer(keras.optimizers.SGD(0.1), local_layers=[head])
    """
    layers = _local_layers(local_layers)
    from .optimizer import DistributedOptimizer  # lazy: imports Keras and TensorFlow

    distributed = DistributedOptimizer(
        optimizer, name=name, device_dense=device_dense, device_sparse=device_sparse,
        compression=compression, sparse_as_dense=sparse_as_dense,
        backward_passes_per_step=backward_passes_per_step, op=op,
        gradient_predivide_factor=gradient_predivide_factor,
        average_aggregated_gradients=average_aggregated_gradients, groups=groups,
        scale_local_gradients=scale_local_gradients, process_set=process_set,
        bucket_cap_mb=bucket_cap_mb)
    for layer in layers:
        distributed._reducer.register_local_layer(layer)
    return distributed


def PartialDistributedGradientTape(gradtape, device_dense="", device_sparse="",  # noqa: N802
                                   compression=Compression.none, sparse_as_dense=False,
                                   op=Average, gradient_predivide_factor=1.0, num_groups=0,
                                   groups=None, local_layers=None, scale_local_gradients=True,
                                   name=None, process_set=None, bucket_cap_mb=None):
    """A :class:`kerashvd.DistributedGradientTape` that leaves ``local_layers`` rank-local.

    Arguments are those of ``DistributedGradientTape``, plus ``local_layers`` and
    ``scale_local_gradients`` as in :func:`PartialDistributedOptimizer`.

    Raises:
        ValueError: when ``local_layers`` holds something other than Keras layers.
    """
    layers = _local_layers(local_layers)
    from .tape import DistributedGradientTape  # lazy: imports TensorFlow

    tape = DistributedGradientTape(
        gradtape, device_dense=device_dense, device_sparse=device_sparse,
        compression=compression, sparse_as_dense=sparse_as_dense, op=op,
        gradient_predivide_factor=gradient_predivide_factor, num_groups=num_groups,
        groups=groups, name=name, scale_local_gradients=scale_local_gradients,
        process_set=process_set, bucket_cap_mb=bucket_cap_mb)
    for layer in layers:
        tape._reducer.register_local_layer(layer)
    return tape

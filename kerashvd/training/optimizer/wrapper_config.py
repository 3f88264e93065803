"""The wrapper's own arguments in ``get_config``/``from_config``, shared by both Keras versions.

A serialized ``DistributedOptimizer`` is these plain values plus the inner optimizer, which
each Keras serializes its own way (``keras3.py``, ``keras2.py``). Variable lists (``groups``
of variables, variables registered as local) are not serialized: register them again.
"""

from ...collectives.compression import Compression

_COMPRESSION_NAMES = {getattr(Compression, name): name for name in ("none", "fp16", "bf16")}


def wrapper_config(optimizer):
    """Returns ``optimizer``'s wrapper arguments (all but the inner optimizer).

    Raises:
        ValueError: for a custom compressor, which has no serializable name.
    """
    compression = _COMPRESSION_NAMES.get(optimizer.compression)
    if compression is None:
        raise ValueError("Cannot serialize DistributedOptimizer with the custom compression "
                         f"{optimizer.compression.__name__}; only Compression.none, .fp16 and "
                         ".bf16 have names")
    return {
        "name": optimizer.name,
        "compression": compression,
        "sparse_as_dense": optimizer.sparse_as_dense,
        "backward_passes_per_step": optimizer.backward_passes_per_step,
        "op": optimizer.op,
        "gradient_predivide_factor": optimizer.gradient_predivide_factor,
        "average_aggregated_gradients": optimizer.average_aggregated_gradients,
        "num_groups": optimizer.num_groups,
        "scale_local_gradients": optimizer.scale_local_gradients,
    }


def wrapper_arguments(config):
    """``DistributedOptimizer`` keyword arguments from :func:`wrapper_config`'s output."""
    arguments = dict(config)
    compression = arguments.pop("compression", "none")
    arguments["compression"] = (getattr(Compression, compression)
                                if isinstance(compression, str) else compression)
    return arguments

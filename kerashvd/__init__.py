"""kerashvd: data-parallel training for Keras 3 and TensorFlow 2 on many CPUs and GPUs.

>>> import kerashvd as hvd
>>> hvd.init()
>>> hvd.allreduce(tf.constant(1.0), op=hvd.Sum)  # == hvd.size() on every rank
"""

from . import _loader

_loader.preload_mpi()

from .runtime import (  # noqa: E402
    NotInitializedError,
    build_info,
    cross_rank,
    cross_size,
    init,
    is_initialized,
    local_rank,
    local_size,
    mpi_built,
    mpi_threads_supported,
    nccl_built,
    rank,
    shutdown,
    size,
)
from .reduce_ops import Average, Max, Min, Product, Sum  # noqa: E402
from .compression import Compression  # noqa: E402
from .collectives import (  # noqa: E402
    allgather,
    allreduce,
    alltoall,
    barrier,
    broadcast,
    grouped_allgather,
    grouped_allreduce,
    grouped_broadcast,
    grouped_reducescatter,
    join,
    reducescatter,
)
from . import gradients as _gradients  # noqa: E402,F401  (registers the ops' gradients)
from .functions import allgather_object, broadcast_object, broadcast_variables  # noqa: E402
from .timeline import start_timeline, stop_timeline  # noqa: E402
from .launcher.run_fn import run  # noqa: E402
from .optimizer import DistributedOptimizer  # noqa: E402
from .tape import DistributedGradientTape  # noqa: E402
from .saving import load_model  # noqa: E402
from . import data  # noqa: E402
from . import callbacks  # noqa: E402  (the top-level callbacks/ directory; imports keras)

__version__ = "0.1.0"

__all__ = [
    "Average",
    "Compression",
    "DistributedGradientTape",
    "DistributedOptimizer",
    "Max",
    "Min",
    "NotInitializedError",
    "Product",
    "Sum",
    "allgather",
    "allgather_object",
    "allreduce",
    "alltoall",
    "barrier",
    "broadcast",
    "broadcast_object",
    "broadcast_variables",
    "build_info",
    "callbacks",
    "cross_rank",
    "cross_size",
    "data",
    "grouped_allgather",
    "grouped_allreduce",
    "grouped_broadcast",
    "grouped_reducescatter",
    "init",
    "is_initialized",
    "join",
    "load_model",
    "local_rank",
    "local_size",
    "mpi_built",
    "mpi_threads_supported",
    "nccl_built",
    "rank",
    "reducescatter",
    "run",
    "shutdown",
    "size",
    "start_timeline",
    "stop_timeline",
]

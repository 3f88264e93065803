"""kerashvd: data-parallel training for Keras 3 and TensorFlow 2 on many CPUs and GPUs.

>>> import kerashvd as hvd
>>> hvd.init()
>>> hvd.allreduce(tf.constant(1.0), op=hvd.Sum)  # == hvd.size() on every rank

The runtime (init, rank, size, ...) loads without TensorFlow; everything that needs TensorFlow
or Keras is imported on first use, so ``kerashvdrun`` and ``kerashvd.run`` start quickly. The
installed TensorFlow's version is checked at import all the same.
"""

import importlib
import os
import sys


def _find_installed_files():
    """Lets a source checkout's ``kerashvd/`` find the installed build's generated files.

    ``python -m pytest`` or ``python -m kerashvd.bench`` run from the repository root put the
    checkout first on ``sys.path``, so this package is imported from the sources, which hold no
    compiled modules, no ``_build_info`` and no ``kerashvd.callbacks`` (it ships from the
    top-level ``callbacks/``). Those then come from the installed copy further down the path.
    """
    here = os.path.realpath(os.path.dirname(__file__))
    if os.path.exists(os.path.join(here, "_build_info.py")):
        return
    for entry in sys.path:
        candidate = os.path.realpath(os.path.join(entry or os.getcwd(), "kerashvd"))
        if candidate != here and os.path.exists(os.path.join(candidate, "_build_info.py")):
            if candidate not in __path__:  # noqa: F821
                __path__.append(candidate)  # noqa: F821  (the package's own __path__)
            return


_find_installed_files()

# TensorFlow's pooling CPU allocator: without it every large collective output is a fresh
# mmap that page-faults on first touch, which costs ~30% of a 64 MiB allreduce. It only takes
# effect if set before TensorFlow creates its CPU allocator; set the variable to "false" to
# keep TensorFlow's default.
os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")

# TensorFlow's C++ INFO lines (CPU features, devices created) are left out unless asked for:
# TF_CPP_MIN_LOG_LEVEL=0 shows them, and also the startup notices that kerashvdrun and
# kerashvd.run leave out of every rank's output (kerashvd/launcher/_supervisor.py). Only takes
# effect if set before TensorFlow is imported; kerashvdrun passes it on to the ranks.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

from . import _loader  # noqa: E402

_loader.preload_mpi()
_loader.check_tf_version()

from . import _keras_hook  # noqa: E402

_keras_hook.install()  # keras.models.load_model knows kerashvd's classes once Keras is imported

from .reduce_ops import Adasum, Average, Max, Min, Product, Sum  # noqa: E402
from .runtime import (  # noqa: E402
    NotInitializedError,
    build_info,
    ccl_built,
    cross_rank,
    cuda_built,
    ddl_built,
    gloo_built,
    gloo_enabled,
    is_homogeneous,
    cross_size,
    init,
    is_initialized,
    local_rank,
    local_size,
    mpi_built,
    mpi_enabled,
    mpi_threads_supported,
    nccl_built,
    rank,
    rocm_built,
    shutdown,
    size,
)

__version__ = "0.1.0"

# Public name -> module that defines it (a module itself when the name is a submodule).
_LAZY = {
    "Compression": ".compression",
    "allgather": ".collectives",
    "allreduce": ".collectives",
    "alltoall": ".collectives",
    "barrier": ".collectives",
    "broadcast": ".collectives",
    "grouped_allgather": ".collectives",
    "grouped_allreduce": ".collectives",
    "grouped_broadcast": ".collectives",
    "grouped_reducescatter": ".collectives",
    "join": ".collectives",
    "reducescatter": ".collectives",
    "allgather_object": ".functions",
    "broadcast_object": ".functions",
    "broadcast_object_fn": ".functions",
    "broadcast_": ".functions",
    "broadcast_variables": ".functions",
    "start_timeline": ".timeline",
    "stop_timeline": ".timeline",
    "straggler_report": ".straggler",
    "run": ".launcher.run_fn",
    "rank_op": ".topology_ops",
    "size_op": ".topology_ops",
    "local_rank_op": ".topology_ops",
    "local_size_op": ".topology_ops",
    "cross_rank_op": ".topology_ops",
    "cross_size_op": ".topology_ops",
    "ProcessSet": ".process_sets",
    "global_process_set": ".process_sets",
    "add_process_set": ".process_sets",
    "remove_process_set": ".process_sets",
    "process_set_included_op": ".topology_ops",
    "DistributedOptimizer": ".optimizer",
    "DistributedGradientTape": ".tape",
    "PartialDistributedOptimizer": ".partial",
    "PartialDistributedGradientTape": ".partial",
    "SyncBatchNormalization": ".sync_batch_norm",
    "load_model": ".saving",
    "HorovodInternalError": ".exceptions",
    "HostsUpdatedInterrupt": ".exceptions",
    "data": ".data",
    "callbacks": ".callbacks",
    "elastic": ".elastic",
}

__all__ = sorted([
    "Adasum", "Average", "Max", "Min", "Product", "Sum", "NotInitializedError", "build_info",
    "ccl_built", "cross_rank", "cross_size", "cuda_built", "ddl_built", "gloo_built",
    "gloo_enabled", "init", "is_homogeneous", "is_initialized", "local_rank", "local_size",
    "mpi_built", "mpi_enabled", "mpi_threads_supported", "nccl_built", "rank", "rocm_built",
    "shutdown", "size",
    *_LAZY,
])


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'kerashvd' has no attribute {name!r}")
    module = importlib.import_module(_LAZY[name], __name__)
    value = module if module.__name__.endswith("." + name) else getattr(module, name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))

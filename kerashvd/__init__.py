"""kerashvd: data-parallel training for Keras 3 and TensorFlow 2 on many CPUs and GPUs.

>>> import kerashvd as hvd
>>> hvd.init()
>>> hvd.allreduce(tf.constant(1.0), op=hvd.Sum)  # == hvd.size() on every rank

``import kerashvd`` only imports: it loads no native library, imports neither TensorFlow nor
Keras, and changes neither ``os.environ`` nor the import system (a source checkout imported
ahead of a regular install only finds its build files: :func:`_find_build_files`). Each public name is imported
on first use: the runtime (init, rank, size, ...) loads the compiled engine without
TensorFlow (and checks that the installed TensorFlow is the one kerashvd was built for);
everything that needs TensorFlow or Keras imports it then. What ``init()`` adds to that is in
its docstring.
"""

import importlib
import os
import sys


def _find_build_files():
    """Lets a source checkout's ``kerashvd/`` find the files that only a build makes.

    A regular or editable (``pip install -e .``) install needs nothing here: the package
    holds, or its import finder maps, the compiled modules, ``_build_info`` and
    ``kerashvd.callbacks`` (which ships from the top-level ``callbacks/``). But with a regular
    install, ``python -m pytest`` from the repository root (the CI's and the README's test
    command) and every child process the tests start there put the checkout first on
    ``sys.path``; its ``kerashvd/`` has none of those files. They then come from the installed
    copy further down ``sys.path``, which is added to this package's ``__path__``. Nothing
    outside the package can do this for those child processes (``PYTHONSAFEPATH`` would also
    drop a script's own folder, and Python 3.10 lacks it). No other state changes.
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


_find_build_files()

__version__ = "0.1.0"

# Public name -> module that defines it (a module itself when the name is a submodule).
_LAZY = {
    **dict.fromkeys([
        "NotInitializedError", "build_info", "ccl_built", "cross_rank", "cross_size",
        "cuda_built", "ddl_built", "gloo_built", "gloo_enabled", "init", "is_homogeneous",
        "is_initialized", "local_rank", "local_size", "mpi_built", "mpi_enabled",
        "mpi_threads_supported", "nccl_built", "rank", "rocm_built", "shutdown", "size"],
        ".runtime.lifecycle"),
    **dict.fromkeys(["Adasum", "Average", "Max", "Min", "Product", "Sum"],
                    ".collectives.reduce_ops"),
    "Compression": ".collectives.compression",
    "allgather": ".collectives.tensors",
    "allreduce": ".collectives.tensors",
    "alltoall": ".collectives.tensors",
    "barrier": ".collectives.tensors",
    "broadcast": ".collectives.tensors",
    "grouped_allgather": ".collectives.tensors",
    "grouped_allreduce": ".collectives.tensors",
    "grouped_broadcast": ".collectives.tensors",
    "grouped_reducescatter": ".collectives.tensors",
    "join": ".collectives.tensors",
    "reducescatter": ".collectives.tensors",
    "allgather_object": ".collectives.functions",
    "broadcast_object": ".collectives.functions",
    "broadcast_object_fn": ".collectives.functions",
    "broadcast_": ".collectives.functions",
    "broadcast_variables": ".collectives.functions",
    "broadcast_global_variables": ".collectives.functions",
    "start_timeline": ".timeline",
    "stop_timeline": ".timeline",
    "straggler_report": ".straggler",
    "run": ".launcher.run_fn",
    "rank_op": ".runtime.topology_ops",
    "size_op": ".runtime.topology_ops",
    "local_rank_op": ".runtime.topology_ops",
    "local_size_op": ".runtime.topology_ops",
    "cross_rank_op": ".runtime.topology_ops",
    "cross_size_op": ".runtime.topology_ops",
    "ProcessSet": ".runtime.process_sets",
    "global_process_set": ".runtime.process_sets",
    "add_process_set": ".runtime.process_sets",
    "remove_process_set": ".runtime.process_sets",
    "process_set_included_op": ".runtime.topology_ops",
    "DistributedOptimizer": ".training.optimizer",
    "DistributedGradientTape": ".training.tape",
    "PartialDistributedOptimizer": ".training.partial",
    "PartialDistributedGradientTape": ".training.partial",
    "SyncBatchNormalization": ".training.sync_batch_norm",
    "load_model": ".training.saving",
    "HorovodInternalError": ".runtime.exceptions",
    "HostsUpdatedInterrupt": ".runtime.exceptions",
    "data": ".data",
    "callbacks": ".callbacks",
    "elastic": ".elastic",
}

__all__ = sorted(_LAZY)


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'kerashvd' has no attribute {name!r}")
    module = importlib.import_module(_LAZY[name], __name__)
    if _LAZY[name] == ".runtime.lifecycle":
        _join_layers(module)
    value = module if module.__name__.endswith("." + name) else getattr(module, name)
    globals()[name] = value
    return value


def _join_layers(lifecycle):
    """Adds to ``init()`` the step that belongs to a layer above the runtime.

    The runtime never imports the layers above it (the contracts under ``[tool.importlinter]``
    in ``pyproject.toml``), so the package, which stands above them all, joins them: when Keras
    is imported already, ``init()`` registers kerashvd's Keras classes for
    ``keras.saving.load_model`` (``kerashvd/training/_keras_classes.py``, a module that imports
    neither TensorFlow nor Keras).
    """
    from .training import _keras_classes

    lifecycle.after_init(_keras_classes.register_if_keras_imported)


def __dir__():
    return sorted(set(globals()) | set(__all__))

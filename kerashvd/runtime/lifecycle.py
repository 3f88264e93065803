"""Process-level API: start and stop the engine, and where this process sits in the job."""

import sys

from .. import _private_api
from . import gpu_pinning, launch_env, tf_defaults, tf_threads
from . import process_sets as _process_sets
from ._loader import build_record
from ._engine import NotInitializedError, core as _core, require_init as _require_init
from .config import build_config
from .world import (cross_rank, cross_size, is_homogeneous, is_initialized, local_rank,
                    local_size, mpi_threads_supported, rank, size)

__all__ = ["NotInitializedError", "build_info", "ccl_built", "cross_rank", "cross_size",
           "cuda_built", "ddl_built", "gloo_built", "gloo_enabled", "init", "is_homogeneous",
           "is_initialized", "local_rank", "local_size", "mpi_built", "mpi_enabled",
           "mpi_threads_supported", "nccl_built", "rank", "rocm_built", "shutdown", "size"]


def init(comm=None, process_sets=None, pin_gpu=None, **settings):
    """Starts kerashvd in this process: MPI, and the engine's background thread.

    Works under ``kerashvdrun``, ``mpiexec``, ``srun --mpi=pmi2`` and as a single process
    under plain ``python`` (size 1). Calling it again while running is a no-op. With several
    ranks on this host it also makes each rank see only its own GPU (``pin_gpu``) and stops
    TensorFlow's idle threads from spinning (``KERASHVD_TF_THREAD_SPINNING``, see
    ``kerashvd.runtime.tf_threads``); both take effect only if TensorFlow has run no op yet. When
    TensorFlow is not imported yet, it sets TensorFlow's environment defaults that kerashvd
    prefers where unset (``kerashvd.runtime.tf_defaults``; ranks that ``kerashvdrun`` starts
    get them in any case); the pooling allocator's also after ``import tensorflow``, until
    TensorFlow runs its first op. When the Keras that ``tf.keras`` uses is imported already,
    ``kerashvd.init`` registers kerashvd's Keras classes for ``keras.saving.load_model``
    (otherwise ``kerashvd.load_model`` or any use of ``DistributedOptimizer`` does; see
    ``kerashvd/training/_keras_classes.py``): a step the package adds with :func:`after_init`.

    Args:
        comm: Horovod's argument: None or ``mpi4py.MPI.COMM_WORLD`` (kerashvd always runs on
            all ranks of the MPI world; use ``process_sets`` for collectives among a subset).
        process_sets: process sets to register (``kerashvd.ProcessSet`` objects or lists of
            ranks), the same list on every rank; they get ids 1, 2, ... in this order. The
            string ``"dynamic"`` is accepted for Horovod compatibility: sets can always be
            added later with ``kerashvd.add_process_set``.
        pin_gpu: with several ranks on this host and several visible GPUs, keep only GPU
            ``local_rank()`` (modulo their number) visible to this rank's TensorFlow, as
            Horovod's scripts do by hand (see ``kerashvd.runtime.gpu_pinning``). Default: True, or
            ``KERASHVD_PIN_GPU`` (0 or 1) when set.
        **settings: engine settings overriding their ``KERASHVD_*`` variables, one keyword
            per row of the engine's table (``kerashvd.runtime.config.SETTINGS``: its variable, unit,
            default and help), e.g. ``cycle_time_ms=5``, ``fusion_threshold_bytes=0``,
            ``hierarchical_allreduce=True`` (``"auto"``, ``"on"`` or True, ``"off"`` or
            False; see docs/settings.md, "Hierarchical collectives"). ``kerashvdrun --help``
            lists them as flags.

    Raises:
        ValueError: for an unknown setting or ``KERASHVD_*`` variable, or a bad value.
        RuntimeError: when MPI cannot start, when the launcher started several processes
            but each is alone in its MPI world (e.g. ``srun`` without ``--mpi=pmi2``; see
            ``kerashvd.runtime.launch_env``), or in a child process forked after ``init()`` (see
            :func:`is_initialized`).

    Example:

    >>> import kerashvd as hvd
    >>> hvd.init()
    >>> hvd.rank() < hvd.size()
    True
    """
    _core.check_not_forked("init()")
    _check_comm(comm)
    if _core.is_initialized():
        if settings or pin_gpu is not None or process_sets not in (None, "dynamic"):
            raise ValueError(
                "kerashvd is already initialized; settings and process sets can only be given "
                "to the first init() (add sets with kerashvd.add_process_set). Call "
                f"kerashvd.shutdown() first to change them. Received: {settings}, "
                f"process_sets={process_sets!r}")
        return
    pin = gpu_pinning.setting(pin_gpu)
    imported = "tensorflow" in sys.modules  # see kerashvd/runtime/tf_defaults.py
    tf_defaults.apply_unread(imported, imported and _private_api.eager_context_started())
    config = build_config(settings)
    _core.init(config)
    _settings[:] = [config]
    _starts[0] += 1
    try:
        launch_env.check_world_size(_core.size())
    except RuntimeError:
        _core.shutdown()  # a world of one: no other rank is waiting for this one
        raise
    gpu_pinning.apply(_core.local_rank(), _core.local_size(), pin)
    # Several ranks per host: TensorFlow's idle threads must not spin (see tf_threads).
    tf_threads.apply(_core.local_size())
    try:
        _process_sets._register_at_init(process_sets)
    except BaseException:
        shutdown()  # every rank fails the same registration, so every rank gets here
        raise
    for hook in list(_after_init):
        hook()


_after_init = []  # what init() calls last, in order (see after_init)
_settings = []  # the running engine's settings (one _core.Config), empty before init()
_starts = [0]  # init() calls that started the engine in this process


def engine_start():
    """How many times ``init()`` has started the engine in this process (0 before the first):
    what a cache of per-engine state keys on."""
    return _starts[0]


def engine_setting(key):
    """The text of this rank's setting ``key`` (a key of ``kerashvd.runtime.config.SETTINGS``,
    e.g. ``"autotune"`` -> ``"1"``) in the running engine, as ``init()`` resolved it from its
    keywords and the environment; None before ``init()`` and after ``shutdown()``. Another rank
    may run with another value where its environment differs.
    """
    if not _settings or not _core.is_initialized():
        return None
    return _core.setting_text(_settings[0], key)


def after_init(hook):
    """Has every later :func:`init` that starts the engine call ``hook()`` as its last step.

    This is how a layer above the runtime adds a step to ``init()`` (the runtime never imports
    one): ``kerashvd/__init__.py`` adds the registration of kerashvd's Keras classes, which
    lives in ``kerashvd.training``. A hook added again is not added twice.

    Args:
        hook: a function of no argument; what it raises, ``init()`` raises.

    Example:

    >>> from kerashvd.runtime import lifecycle
    >>> lifecycle.after_init(lambda: print("engine started"))
    >>> lifecycle.init()
    engine started
    """
    if hook not in _after_init:
        _after_init.append(hook)


def _check_comm(comm):
    if comm is None:
        return
    try:
        from mpi4py import MPI  # lazy: optional, and only for comm=

        world = MPI.Comm.Compare(comm, MPI.COMM_WORLD) in (MPI.IDENT, MPI.CONGRUENT)
    except Exception:  # noqa: BLE001  (not an mpi4py communicator, or no mpi4py)
        world = False
    if not world:
        raise ValueError(
            "kerashvd.init(comm=...) accepts only None or MPI.COMM_WORLD: kerashvd runs on all "
            "ranks of the MPI world. For collectives among some ranks, register them as a "
            f"process set (init(process_sets=[...])). Received comm={comm!r}")


def shutdown():
    """Stops the engine on every rank. Pending collectives fail; ``init()`` may be called again.

    Example:

    >>> import kerashvd as hvd
    >>> hvd.init(); hvd.shutdown(); hvd.is_initialized()
    False
    """
    _core.shutdown()
    _settings.clear()
    _process_sets._forget_all()


def mpi_enabled():
    """Returns whether MPI is in use: True once :func:`init` has run (MPI is kerashvd's only
    control plane; Horovod's Gloo alternative does not exist here)."""
    return is_initialized()


def mpi_built():
    """Returns True: this kerashvd has the MPI backend (CPU tensors, control plane)."""
    return bool(build_record.MPI_BUILT)


def nccl_built():
    """Returns whether this kerashvd was built with the NCCL backend for GPU tensors."""
    return bool(build_record.NCCL_BUILT)


def cuda_built():
    """Returns whether this kerashvd was built with CUDA (for its NCCL backend)."""
    return bool(build_record.CUDA_VERSION)


def _not_built(name, what):
    def query():
        return False

    query.__name__ = name
    query.__doc__ = (f"Returns False: kerashvd has no {what}. Horovod has this query; it is "
                     f"here so that scripts written for Horovod run unchanged.")
    return query


gloo_built = _not_built("gloo_built", "Gloo controller (MPI is its only control plane)")
gloo_enabled = _not_built("gloo_enabled", "Gloo controller (MPI is its only control plane)")
rocm_built = _not_built("rocm_built", "ROCm backend")
ccl_built = _not_built("ccl_built", "oneCCL backend")
ddl_built = _not_built("ddl_built", "IBM DDL backend")


def build_info():
    """Returns what this kerashvd was compiled with.

    Returns:
        A dict with ``tensorflow_version`` (the TF the ops were compiled against),
        ``mpi_built``, ``mpi_source``, ``nccl_built``, ``cuda_version`` and ``compiler``.

    Example:

    >>> import kerashvd as hvd
    >>> sorted(hvd.build_info())[:2]
    ['compiler', 'cuda_version']
    """
    return {
        "tensorflow_version": build_record.TF_VERSION,
        "mpi_built": bool(build_record.MPI_BUILT),
        "mpi_source": build_record.MPI_SOURCE,
        "nccl_built": bool(build_record.NCCL_BUILT),
        "cuda_version": build_record.CUDA_VERSION or None,
        "compiler": build_record.CXX_COMPILER,
    }


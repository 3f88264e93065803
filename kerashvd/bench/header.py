"""The '#' lines that open each benchmark's output: when, where and with what it ran.

A benchmark's numbers mean little without the machine and software that produced them, so the
output carries them, and the documentation states expectations instead of dated figures.
:func:`environment` collects the facts of one process (a rank that has imported TensorFlow
and kerashvd); :func:`lines` turns them, with the run's ranks and command, into the header.

Example:

>>> from kerashvd.bench import header
>>> env = header.environment()
>>> for line in header.lines(env, ["python", "-m", "kerashvd.bench"], 1, [env["host"]]):
...     print(line)
# date: 2026-11-26 20:15:02 UTC (start)
# host: node1; CPUs: 2 (os.cpu_count), 2 usable by this process (affinity)
...
"""

import datetime
import os
import shlex
import socket

# Environment variables that change what a benchmark measures, recorded when set.
_VARIABLES = ("TF_CPU_ALLOCATOR_USE_BFC", "OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS",
              "TF_NUM_INTEROP_THREADS", "CUDA_VISIBLE_DEVICES", "NCCL_DEBUG", "FI_PROVIDER")
# Prefixes of more such variables: MPICH's settings (its algorithms, transport).
_PREFIXES = ("KERASHVD_", "MPIR_CVAR_")
# What kerashvdrun gives every rank for its own use: not settings.
_LAUNCHER_VARIABLES = ("KERASHVD_RESTART_COUNT", "KERASHVD_ELASTIC")


def now():
    """The current time in UTC, for :func:`lines`' ``started``."""
    return datetime.datetime.now(datetime.timezone.utc)


def environment():
    """Facts about this process's machine and software, as a JSON-serializable dict.

    Returns:
        A dict with ``host``, ``cpus`` (``os.cpu_count()``), ``affinity`` (CPUs this process may
        run on), ``tensorflow``, ``keras``, ``kerashvd`` (versions), ``build``
        (``kerashvd.build_info()``), ``mpi`` (the MPI library's version line, from mpi4py, or
        None without mpi4py), ``load`` (the host's 1-minute load average, or None) and
        ``variables`` (the ``KERASHVD_*`` and ``MPIR_CVAR_*`` settings and the other variables
        in ``_VARIABLES`` that are set).
    """
    import importlib.metadata
    import sys

    import tensorflow as tf

    import kerashvd

    keras = sys.modules.get("keras")
    try:
        keras_version = keras.__version__ if keras is not None else \
            importlib.metadata.version("keras")
    except importlib.metadata.PackageNotFoundError:
        keras_version = None
    try:
        from mpi4py import MPI

        mpi = " ".join(MPI.Get_library_version().strip().splitlines()[0].split())
    except ImportError:
        mpi = None
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {
        "host": socket.gethostname(), "cpus": os.cpu_count(), "affinity": affinity,
        "tensorflow": tf.__version__, "keras": keras_version, "kerashvd": kerashvd.__version__,
        "build": kerashvd.build_info(), "mpi": mpi, "load": load,
        "variables": {k: v for k, v in sorted(os.environ.items())
                      if (k.startswith(_PREFIXES) and k not in _LAUNCHER_VARIABLES)
                      or k in _VARIABLES},
    }


def lines(env, command, ranks, hosts, started=None):
    """The header's lines, each starting with '# '.

    Args:
        env: :func:`environment` of the process that reports (rank 0).
        command: the command line, a list of arguments.
        ranks: the ranks of the run, a number or a text such as ``"1 and 2"``.
        hosts: the host name of every rank of the (largest) run, in rank order.
        started: when the run started (default: now), a timezone-aware ``datetime``; see
            :func:`now`.

    Returns:
        A list of strings without newlines.
    """
    started = started or now()
    per_node = {h: hosts.count(h) for h in dict.fromkeys(hosts)}
    nodes = ", ".join(f"{h} ({n})" for h, n in per_node.items())
    build = env["build"]
    built = (f"built for TensorFlow {build['tensorflow_version']} with {build['compiler']}; "
             f"MPI {'yes (' + build['mpi_source'] + ')' if build['mpi_built'] else 'no'}; "
             f"NCCL {'yes, CUDA ' + str(build['cuda_version']) if build['nccl_built'] else 'no'}")
    variables = ", ".join(f"{k}={v}" for k, v in env["variables"].items()) or "none set"
    affinity = env["affinity"]
    return [
        f"# date: {started.astimezone(datetime.timezone.utc):%Y-%m-%d %H:%M:%S} UTC (start)",
        f"# host: {env['host']}; CPUs: {env['cpus']} (os.cpu_count)"
        + (f", {affinity} usable by this process (affinity)" if affinity is not None else "")
        + (f"; load average {env['load']:.2f} (1 min, at start)"
           if env.get("load") is not None else ""),
        f"# ranks: {ranks} on {len(per_node)} node{'s' if len(per_node) != 1 else ''}: {nodes}",
        f"# versions: TensorFlow {env['tensorflow']}, Keras {env['keras']}, kerashvd "
        f"{env['kerashvd']} ({built}); MPI library: {env['mpi'] or 'unknown (no mpi4py)'}",
        f"# settings: {variables}",
        f"# command: {shlex.join(command)}",
    ]

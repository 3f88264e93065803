"""Catches ranks that a launcher started as separate MPI worlds of one process ("split worlds").

kerashvd's MPI (the ``mpich`` package) finds its peers through the PMI wire protocol of the
launcher: hydra's ``mpiexec`` (what ``kerashvdrun`` runs), ``srun --mpi=pmi2``, or any other
PMI-1/PMI-2 server. A launcher that starts N processes without such a server (plain ``srun``
on a cluster whose ``MpiDefault`` is ``none`` or ``pmix``, Open MPI's ``mpirun``) leaves each
process alone in a world of size 1: every rank then trains the whole model on its own, silently.

:func:`check_world_size` compares the size MPI reports with what the launcher's environment
announces for this launch, and raises on every rank (each is a world of one, so each checks
itself, before any collective could wait for the others). Environments that are not an error:

- a batch script's own ``python train.py`` (``sbatch -n 4``): SLURM sets ``SLURM_NTASKS=4``
  there, but no ``SLURM_STEP_NUM_TASKS``, which only ``srun`` sets for the tasks of a step;
- a notebook kernel or a shell inside an allocation, likewise;
- ``kerashvdrun`` or the ``mpich`` package's ``mpiexec`` inside an allocation: hydra's
  ``PMI_SIZE`` names the real world size, and its own ``srun`` of one proxy per node sets
  ``SLURM_STEP_NUM_TASKS`` to the number of nodes.
"""

import os

_INDEPENDENT_HINT = ("If the tasks are meant to be independent single-process runs, remove {var} "
                     "from the environment before kerashvd.init()")


def _count(environ, name):
    text = environ.get(name, "").strip()
    return int(text) if text.isdigit() else None


def _announced(environ):
    """Returns (variable, N, how to fix) for the launcher that started this process, or None.

    The first launcher found wins, in this order: a PMI server (hydra, srun --mpi=pmi2, flux,
    ...; its size is the truth for the MPI library), Open MPI, MVAPICH's mpirun_rsh, srun.
    """
    pmi = _count(environ, "PMI_SIZE")
    if pmi is not None:
        return ("PMI_SIZE", pmi,
                "The launcher runs a PMI server, but kerashvd's MPI did not join it: check "
                "that kerashvd loads the MPI library of the `mpich` package (kerashvd."
                "build_info()['mpi_source']) and that nothing else preloads another MPI.")
    for name, launcher in (("OMPI_COMM_WORLD_SIZE", "Open MPI's mpirun"),
                           ("MV2_COMM_WORLD_SIZE", "MVAPICH's mpirun_rsh")):
        n = _count(environ, name)
        if n is not None:
            return (name, n,
                    f"{launcher} cannot start kerashvd's MPI (MPICH, from the `mpich` package): "
                    f"launch with kerashvdrun -np {n} python ... (or that package's "
                    f"mpiexec -n {n}); under SLURM, use srun --mpi=pmi2.")
    n = _count(environ, "SLURM_STEP_NUM_TASKS")
    if n is not None:
        mpi_type = environ.get("SLURM_MPI_TYPE")
        because = (f"SLURM_MPI_TYPE={mpi_type} is not a PMI kerashvd's MPI speaks"
                   if mpi_type and mpi_type != "pmi2" else
                   "srun gave the tasks no PMI-2 server (the cluster's MpiDefault is not pmi2)")
        return ("SLURM_STEP_NUM_TASKS", n,
                f"{because}. Launch with srun --mpi=pmi2 -n {n} python ... (or export "
                f"SLURM_MPI_TYPE=pmi2 before srun), or run kerashvdrun -np {n} python ... in the "
                f"batch script (not under srun). "
                + _INDEPENDENT_HINT.format(var="SLURM_STEP_NUM_TASKS") + ".")
    return None


def check_world_size(mpi_size, environ=None):
    """Raises when the launcher started several processes but MPI put this one alone.

    Args:
        mpi_size: the size of the MPI world this process joined.
        environ: the environment to read (default ``os.environ``).

    Raises:
        RuntimeError: when ``mpi_size`` is 1 and the launcher's environment announces more
            processes; the message names the variable, both sizes and the fix.

    Example:

    >>> check_world_size(1, {"SLURM_STEP_NUM_TASKS": "1"})  # srun -n 1: fine
    >>> check_world_size(1, {"SLURM_STEP_NUM_TASKS": "2"})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    RuntimeError: kerashvd.init(): the launcher started 2 processes (SLURM_STEP_NUM_TASKS=2)...
    """
    if mpi_size != 1:
        return
    announced = _announced(os.environ if environ is None else environ)
    if announced is None:
        return
    variable, n, fix = announced
    if n > 1:
        raise RuntimeError(
            f"kerashvd.init(): the launcher started {n} processes ({variable}={n}) but MPI put "
            f"this one in a world of its own (size 1): every process would train alone, "
            f"unsynchronized. {fix}")

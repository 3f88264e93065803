"""Builds the command line of a job: the launcher's options, then one supervisor per rank.

Every rank runs ``python -I _supervisor.py [--report HOST:PORT --token T] -- command...``:
the supervisor starts the real command, and when it fails tells the launcher, which then
stops the whole job (hydra alone lets the other ranks run on after a rank exits non-zero).

Two launchers: hydra's ``mpiexec`` (this machine or a host list), and, inside a SLURM
allocation, ``srun --mpi=pmi2``, which gives each rank the CPUs (``--cpus-per-task``) and
GPUs the allocation binds to a task, where hydra's one ``srun`` task per node would confine
all the node's ranks to one task's share.
"""

import os
import sys

SUPERVISOR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_supervisor.py")
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_worker.py")


def mpiexec_command(mpiexec, np, rank_command, *, env=None, hosts=None,
                    report_address=None, token=None, prefix_output=False, python=None,
                    mpi_args=(), launcher_args=()):
    """Returns the argv that starts ``rank_command`` on ``np`` supervised ranks.

    Args:
        mpiexec: path of hydra's ``mpiexec``.
        np: number of ranks, >= 1.
        rank_command: argv every rank runs, e.g. ``["python", "train.py"]``.
        env: ``{name: value}`` passed to every rank with ``-genv``.
        hosts: list of :class:`~kerashvd.launcher.hosts.Host`, or ``None`` for this machine.
        report_address: ``"host:port"`` of the launcher's
            :class:`~kerashvd.launcher.reports.ReportServer`, or ``None``.
        token: the report server's token (required with ``report_address``).
        prefix_output: prefix every output line of a rank with ``[rank] ``.
        python: interpreter that runs the supervisor (default: this one).
        mpi_args: extra hydra options, placed before ``-n``.
        launcher_args: hydra options that choose how ranks on other hosts are started,
            placed before ``-hosts`` (from :class:`~kerashvd.launcher.ssh.SshLaunch`).

    Returns:
        A list of strings for ``subprocess``.

    Example:

    >>> mpiexec_command("mpiexec", 2, ["python", "x.py"])[:7]
    ['mpiexec', '-launcher', 'fork', '-rmk', 'user', '-n', '2']
    """
    argv = [mpiexec, *launcher_args]
    if hosts:
        argv += ["-hosts", ",".join(str(h) for h in hosts)]
    else:
        # This machine only, even inside a SLURM or PBS allocation, where hydra would
        # otherwise start its proxies with srun (which waits forever inside an srun step).
        argv += ["-launcher", "fork", "-rmk", "user"]
    argv += list(mpi_args)
    argv += ["-n", str(np)]
    for name, value in (env or {}).items():
        argv += ["-genv", name, str(value)]
    return argv + _supervised(rank_command, report_address, token, prefix_output, python)


def srun_command(srun, np, rank_command, *, env=None, report_address=None, token=None,
                 prefix_output=False, python=None, srun_args=(), environ=None):
    """Returns the argv that starts ``rank_command`` on ``np`` supervised SLURM tasks.

    ``srun --mpi=pmi2 -n NP``: PMI-2 is the protocol kerashvd's MPI (the ``mpich`` package)
    finds its peers with. Inside an ``srun`` step (a job step's shell, or a notebook started
    with ``srun``) the ranks' step also gets ``--overlap``, without which it would wait for
    the CPUs the enclosing step holds. The job's ``--cpus-per-task`` is passed on (``srun``
    stopped inheriting it in SLURM 22.05) unless ``srun_args`` give one. ``--kill-on-bad-exit=1``
    ends every task once one fails, even before MPI starts (SLURM's default lets the others wait
    in ``MPI_Init`` for ever), unless ``srun_args`` choose otherwise. ``env`` reaches the
    ranks through ``env NAME=VALUE``.

    Args:
        srun: path of SLURM's ``srun``.
        np: number of tasks (ranks), >= 1.
        rank_command: argv every rank runs.
        env: ``{name: value}`` set in every rank.
        report_address, token, prefix_output, python: as for :func:`mpiexec_command`.
        srun_args: extra ``srun`` options, placed before ``-n``.
        environ: the environment to read ``SLURM_STEP_ID`` and ``SLURM_CPUS_PER_TASK`` from
            (default ``os.environ``).

    Returns:
        A list of strings for ``subprocess``.

    Example:

    >>> srun_command("srun", 2, ["python", "x.py"], environ={})[:5]
    ['srun', '--mpi=pmi2', '--kill-on-bad-exit=1', '-n', '2']
    """
    environ = os.environ if environ is None else environ
    argv = [srun, "--mpi=pmi2"]
    if not any(a in ("-K", "--kill-on-bad-exit") or a.startswith(("-K", "--kill-on-bad-exit="))
               for a in srun_args):
        argv.append("--kill-on-bad-exit=1")
    if environ.get("SLURM_STEP_ID") is not None:
        argv.append("--overlap")
    cpus = environ.get("SLURM_CPUS_PER_TASK")
    if cpus and not any(a in ("-c", "--cpus-per-task") or a.startswith("--cpus-per-task=")
                        for a in srun_args):
        argv.append(f"--cpus-per-task={cpus}")  # srun >= 22.05 does not inherit sbatch's -c
    argv += list(srun_args) + ["-n", str(np)]
    command = list(rank_command)
    if env:
        command = ["env", *(f"{name}={value}" for name, value in env.items()), *command]
    return argv + _supervised(command, report_address, token, prefix_output, python)


def _supervised(rank_command, report_address, token, prefix_output, python):
    argv = [python or sys.executable, "-I", SUPERVISOR]
    if report_address:
        argv += ["--report", report_address, "--token", token]
    if prefix_output:
        argv.append("--prefix-output")
    return argv + ["--", *rank_command]

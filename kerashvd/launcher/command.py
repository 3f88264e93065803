"""Builds the ``mpiexec`` command line of a job: hydra options, then one supervisor per rank.

Every rank runs ``python -I _supervisor.py [--report HOST:PORT --token T] -- command...``:
the supervisor starts the real command, and when it fails tells the launcher, which then
stops the whole job (hydra alone lets the other ranks run on after a rank exits non-zero).
"""

import os
import sys

SUPERVISOR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_supervisor.py")
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_worker.py")


def mpiexec_command(mpiexec, np, rank_command, *, env=None, hosts=None, slurm=False,
                    report_address=None, token=None, prefix_output=False, python=None,
                    mpi_args=()):
    """Returns the argv that starts ``rank_command`` on ``np`` supervised ranks.

    Args:
        mpiexec: path of hydra's ``mpiexec``.
        np: number of ranks, >= 1.
        rank_command: argv every rank runs, e.g. ``["python", "train.py"]``.
        env: ``{name: value}`` passed to every rank with ``-genv``.
        hosts: list of :class:`~kerashvd.launcher.hosts.Host`, or ``None`` for hydra's default
            (this machine, or the SLURM allocation when ``slurm``).
        slurm: use hydra's SLURM launcher and resource manager (``-launcher slurm -rmk slurm``).
        report_address: ``"host:port"`` of the launcher's
            :class:`~kerashvd.launcher.reports.ReportServer`, or ``None``.
        token: the report server's token (required with ``report_address``).
        prefix_output: prefix every output line of a rank with ``[rank] ``.
        python: interpreter that runs the supervisor (default: this one).
        mpi_args: extra hydra options, placed before ``-n``.

    Returns:
        A list of strings for ``subprocess``.

    Example:

    >>> mpiexec_command("mpiexec", 2, ["python", "x.py"])[:3]
    ['mpiexec', '-n', '2']
    """
    argv = [mpiexec]
    if slurm:
        argv += ["-launcher", "slurm", "-rmk", "slurm"]
    if hosts:
        argv += ["-hosts", ",".join(str(h) for h in hosts)]
    argv += list(mpi_args)
    argv += ["-n", str(np)]
    for name, value in (env or {}).items():
        argv += ["-genv", name, str(value)]
    argv += [python or sys.executable, "-I", SUPERVISOR]
    if report_address:
        argv += ["--report", report_address, "--token", token]
    if prefix_output:
        argv.append("--prefix-output")
    argv.append("--")
    argv += list(rank_command)
    return argv

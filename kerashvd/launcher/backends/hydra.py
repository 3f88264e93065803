"""What the two hydra backends share (``hydra_local.py``, ``hydra_ssh.py``): finding MPICH
hydra's ``mpiexec``, its command line, and what keeps an elastic world's survivors alive.

kerashvd is built against the ``mpich`` wheel's MPI, whose ranks find each other through the
PMI server of hydra's ``mpiexec``; hydra starts one proxy per host (forked here, over ssh
elsewhere), and the proxies start the ranks.
"""

import os
import shutil

from ...runtime._mpich import mpich_file
from ..errors import LaunchError
from .base import Backend, Launch, Supervision


def find_mpiexec():
    """Returns the path of ``mpiexec``: the ``mpich`` wheel's, else the first on ``PATH``.

    Returns:
        An absolute path.

    Raises:
        LaunchError: when neither the ``mpich`` package nor ``PATH`` provides ``mpiexec``.

    Example:

    >>> find_mpiexec().endswith("mpiexec")
    True
    """
    path = mpich_file("bin/mpiexec")
    if not (path and os.access(path, os.X_OK)):
        path = shutil.which("mpiexec")
    if path is None:
        raise LaunchError(
            "Could not find mpiexec: expected the `mpich` Python package (which ships "
            "bin/mpiexec) or an mpiexec on PATH; found neither. Install it with "
            "`pip install mpich`, or put an MPICH (hydra) mpiexec on PATH.")
    return path


def mpiexec_command(mpiexec, np, rank_command, *, env=None, hosts=None, mpi_args=(),
                    launcher_args=(), supervision=None):
    """Returns the argv that starts ``rank_command`` on ``np`` supervised ranks.

    Args:
        mpiexec: path of hydra's ``mpiexec``.
        np: number of ranks, >= 1.
        rank_command: argv every rank runs, e.g. ``["python", "train.py"]``.
        env: ``{name: value}`` passed to every rank with ``-genv``.
        hosts: list of :class:`~kerashvd.launcher.hosts.Host`, or ``None`` for this machine.
        mpi_args: extra hydra options, placed before ``-n``.
        launcher_args: hydra options that choose how ranks on other hosts are started,
            placed before ``-hosts``.
        supervision: a :class:`~kerashvd.launcher.backends.base.Supervision`, or ``None``
            for a supervisor without a launcher to report to.

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
    return argv + (supervision or Supervision()).wrap(rank_command)


class LocalLaunch(Launch):
    """A hydra job on this machine: its proxy and ranks are forked here."""

    def __init__(self, mpiexec, names_hosts=False):
        self._mpiexec = mpiexec
        self.names_hosts = names_hosts

    def command(self, np, rank_command, *, env, args, supervision):
        return mpiexec_command(self._mpiexec, np, rank_command, env=env, mpi_args=args,
                               supervision=supervision)


class HydraBackend(Backend):
    """The part of a hydra backend that does not depend on where the ranks run."""

    name = "mpiexec"

    def find_program(self):
        self.program = find_mpiexec()
        return self.program

    def elastic_args(self, ranks):
        # Without it hydra kills every rank ~0.1 s after one dies, before the survivors can
        # hand their commit over; kerashvdrun stops whatever does not end by itself.
        return ["-disable-auto-cleanup"]

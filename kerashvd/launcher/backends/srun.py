"""Backend: inside a SLURM allocation, every rank is a SLURM task started by
``srun --mpi=pmi2``.

Chosen when ``SLURM_JOB_ID`` is set and the command line names no hosts (no ``-H``,
``--hostfile`` or ``--host-discovery-script``). PMI-2 is the protocol kerashvd's MPI (the
``mpich`` package) finds its peers with, and ``srun`` gives each rank the CPUs
(``--cpus-per-task``) and GPUs the allocation binds to a task, where hydra's one ``srun``
task per node would confine all the node's ranks to one task's share. ``-np`` defaults to the
allocation's tasks, and an elastic job's hosts are the allocation's nodes.
"""

import contextlib
import os
import re
import shutil
import subprocess

from ..discovery import DEFAULT_SCRIPT_TIMEOUT, DiscoveryError
from ..errors import LaunchError
from ..hosts import Host
from .base import Backend, Launch, Supervision


def srun_command(srun, np, rank_command, *, env=None, srun_args=(), environ=None,
                 supervision=None):
    """Returns the argv that starts ``rank_command`` on ``np`` supervised SLURM tasks.

    ``srun --mpi=pmi2 -n NP``. Inside an ``srun`` step (a job step's shell, or a notebook
    started with ``srun``) the ranks' step also gets ``--overlap``, without which it would wait
    for the CPUs the enclosing step holds. The job's ``--cpus-per-task`` is passed on (``srun``
    stopped inheriting it in SLURM 22.05) unless ``srun_args`` give one. ``--kill-on-bad-exit=1``
    ends every task once one fails, even before MPI starts (SLURM's default lets the others wait
    in ``MPI_Init`` for ever), unless ``srun_args`` choose otherwise. ``env`` reaches the
    ranks through ``env NAME=VALUE``.

    Args:
        srun: path of SLURM's ``srun``.
        np: number of tasks (ranks), >= 1.
        rank_command: argv every rank runs.
        env: ``{name: value}`` set in every rank.
        srun_args: extra ``srun`` options, placed before ``-n``.
        environ: the environment to read ``SLURM_STEP_ID`` and ``SLURM_CPUS_PER_TASK`` from
            (default ``os.environ``).
        supervision: a :class:`~kerashvd.launcher.backends.base.Supervision`, or ``None``.

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
    return argv + (supervision or Supervision()).wrap(command)


_TASKS = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")


def tasks_per_node(text):
    """Expands SLURM's ``SLURM_TASKS_PER_NODE`` (``"2(x3),1"``) into ``[2, 2, 2, 1]``.

    Raises:
        ValueError: for text of another form.

    Example:

    >>> tasks_per_node("2(x3),1")
    [2, 2, 2, 1]
    """
    counts = []
    for part in (text or "").split(","):
        match = _TASKS.match(part.strip())
        if not match:
            raise ValueError(f"SLURM_TASKS_PER_NODE={text!r} is not of the form '2(x3),1'")
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


def slurm_hosts(environ=None, slots_per_host=None, scontrol=None):
    """The nodes of this SLURM allocation as hosts, in SLURM's order.

    Args:
        environ: where to read ``SLURM_JOB_NODELIST`` and ``SLURM_TASKS_PER_NODE``
            (default ``os.environ``).
        slots_per_host: slots of every node; default: its tasks in the allocation.
        scontrol: the ``scontrol`` to expand the node list with (default: from PATH).

    Raises:
        DiscoveryError: the node list cannot be read or expanded.
    """
    environ = os.environ if environ is None else environ
    nodelist = environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST")
    if not nodelist:
        raise DiscoveryError("SLURM_JOB_NODELIST is not set: run inside an allocation, or give "
                             "the hosts with --host-discovery-script or -H")
    scontrol = scontrol or shutil.which("scontrol")
    if scontrol is None:
        raise DiscoveryError("scontrol is not on PATH: it expands SLURM_JOB_NODELIST "
                             f"({nodelist}) into the allocation's nodes")
    try:
        proc = subprocess.run([scontrol, "show", "hostnames", nodelist], capture_output=True,
                              text=True, timeout=DEFAULT_SCRIPT_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise DiscoveryError(f"scontrol show hostnames {nodelist} failed: {err}") from None
    names = proc.stdout.split()
    if proc.returncode != 0 or not names:
        raise DiscoveryError(f"scontrol show hostnames {nodelist} failed (exit "
                             f"{proc.returncode}): {proc.stderr.strip()}")
    if slots_per_host is not None:
        counts = [slots_per_host] * len(names)
    else:
        try:
            counts = tasks_per_node(environ.get("SLURM_TASKS_PER_NODE", "1"))
        except ValueError as err:
            raise DiscoveryError(f"{err}; give the slots with --slots-per-host") from None
        if len(counts) != len(names):
            raise DiscoveryError(
                f"SLURM_TASKS_PER_NODE gives {len(counts)} counts for {len(names)} nodes "
                f"({nodelist}); give the slots with --slots-per-host")
    return [Host(name, count) for name, count in zip(names, counts)]


class SrunLaunch(Launch):
    """A job of SLURM tasks: the ranks run on the allocation's nodes, so the report server
    listens on every interface, at this machine's host name."""

    local = False

    def __init__(self, srun, environ, names_hosts):
        self._srun = srun
        self._environ = environ
        self.names_hosts = names_hosts

    def command(self, np, rank_command, *, env, args, supervision):
        return srun_command(self._srun, np, rank_command, env=env, srun_args=args,
                            environ=self._environ, supervision=supervision)


class Srun(Backend):
    """SLURM tasks started by ``srun --mpi=pmi2`` (see the module docstring).

    Example:

    >>> from kerashvd.launcher.backends.base import Request
    >>> Srun.detect(Request(np=2, environ={"SLURM_JOB_ID": "42"}))
    True
    """

    name = "srun"

    @classmethod
    def detect(cls, request):
        return request.scheduler and bool(request.env.get("SLURM_JOB_ID")) and \
            request.hosts is None and request.discovery_script is None

    def default_np(self):
        environ = self.request.env
        ntasks = environ.get("SLURM_NTASKS") or environ.get("SLURM_NPROCS")
        return int(ntasks) if ntasks and ntasks.isdigit() and int(ntasks) >= 1 else None

    def default_hosts(self, np, max_np, slots_per_host):
        return slurm_hosts(self.request.env, slots_per_host), "the SLURM allocation"

    def find_program(self):
        self.program = shutil.which("srun") or ("srun" if self.request.dry_run else None)
        if self.program is None:
            raise LaunchError("SLURM_JOB_ID is set but srun is not on PATH: run kerashvdrun "
                              "where SLURM's client commands are, or give the hosts with -H.")
        return self.program

    def several_hosts(self):
        return self.request.env.get("SLURM_JOB_NUM_NODES", "1") not in ("", "1")

    def prepare(self, hosts, log=None):
        return contextlib.nullcontext(SrunLaunch(self.program, self.request.environ,
                                                 self.several_hosts()))

    def elastic_args(self, ranks):
        # --kill-on-bad-exit=0 and --no-kill: a failed rank or node must not end the step;
        # --overlap: a step that lost a node stays "completing" and would hold the CPUs of
        # the others; the ranks are placed one by one on the world's layout.
        return ["--kill-on-bad-exit=0", "--no-kill", "--overlap",
                f"--nodelist={','.join(ranks)}", "--distribution=arbitrary"]

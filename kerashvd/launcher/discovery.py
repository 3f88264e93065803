"""Where ranks may run now: the host sources of ``kerashvdrun``'s elastic mode.

Each source has ``find()``, which returns the hosts (a list of
:class:`~kerashvd.launcher.hosts.Host`) listed at that moment; the elastic driver
(``elastic_driver.py``) calls it about once a second while a job runs. Three sources:

- :class:`ScriptDiscovery` (``--host-discovery-script``, as in Horovod): an executable that
  prints one host a line, ``node1:4``, ``node1 slots=4`` or ``node1`` (then
  ``--slots-per-host`` slots). It runs with a time limit; when it fails or times out,
  ``find()`` raises :class:`DiscoveryError` and the driver keeps the hosts it knew.
- :class:`FixedHosts` (``-H``/``--hostfile`` in elastic mode): the same list every time.
- :func:`slurm_hosts`: the nodes of the SLURM allocation (``SLURM_JOB_NODELIST``, expanded by
  ``scontrol show hostnames``), each with its number of tasks (``SLURM_TASKS_PER_NODE``) as
  slots, or ``--slots-per-host``.
"""

import os
import re
import shutil
import subprocess

from .hosts import Host, parse_host_lines

DEFAULT_SCRIPT_TIMEOUT = 30.0


class DiscoveryError(RuntimeError):
    """The host discovery script failed; the message says how and names the script."""


class ScriptDiscovery:
    """Hosts printed by a discovery script (see the module docstring).

    Args:
        path: the executable (run with no arguments, from the working directory).
        slots_per_host: slots of a host printed without a count.
        timeout: seconds the script may run.

    Example: a script that prints ``node1:2`` and ``node2`` gives, with ``slots_per_host=4``,
    ``[Host(name='node1', slots=2), Host(name='node2', slots=4)]``.
    """

    fixed = False

    def __init__(self, path, slots_per_host=1, timeout=DEFAULT_SCRIPT_TIMEOUT):
        self.path = path
        self.slots_per_host = slots_per_host
        self.timeout = timeout

    def describe(self):
        return f"the host discovery script {self.path}"

    def find(self):
        """Runs the script; returns its hosts (possibly none).

        Raises:
            DiscoveryError: the script cannot run, exits non-zero, runs past the time limit
                or prints a line that is not a host.
        """
        where = f"--host-discovery-script {self.path}"
        try:
            proc = subprocess.run([os.path.abspath(self.path)], capture_output=True, text=True,
                                  errors="replace", stdin=subprocess.DEVNULL,
                                  timeout=self.timeout)
        except subprocess.TimeoutExpired:
            raise DiscoveryError(f"{where} did not finish within {self.timeout:g} s") from None
        except OSError as err:
            raise DiscoveryError(f"cannot run {where}: {err.strerror} (it must be an "
                                 "executable file, e.g. chmod +x it)") from None
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
            raise DiscoveryError(f"{where} exited with code {proc.returncode}: {last}")
        try:
            return parse_host_lines(proc.stdout.splitlines(), f"the output of {where}",
                                    self.slots_per_host)
        except ValueError as err:
            raise DiscoveryError(str(err)) from None


class FixedHosts:
    """The same hosts every time (``-H`` or ``--hostfile`` in elastic mode).

    ``fixed`` tells the driver that no host will come: it gives up at once, rather than
    waiting, when failures leave too few slots."""

    fixed = True

    def __init__(self, hosts, source="-H"):
        self.hosts = list(hosts)
        self.source = source

    def describe(self):
        return self.source

    def find(self):
        return list(self.hosts)


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


class SlurmAllocation(FixedHosts):
    """The allocation's nodes (:func:`slurm_hosts`, read once)."""

    def __init__(self, slots_per_host=None):
        super().__init__(slurm_hosts(slots_per_host=slots_per_host), "the SLURM allocation")

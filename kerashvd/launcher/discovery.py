"""Where ranks may run now: the host sources of ``kerashvdrun``'s elastic mode.

Each source has ``find()``, which returns the hosts (a list of
:class:`~kerashvd.launcher.hosts.Host`) listed at that moment; the elastic driver
(``elastic_driver.py``) calls it about once a second while a job runs. Two sources:

- :class:`ScriptDiscovery` (``--host-discovery-script``, as in Horovod): an executable that
  prints one host a line, ``node1:4``, ``node1 slots=4`` or ``node1`` (then
  ``--slots-per-host`` slots). It runs with a time limit; when it fails or times out,
  ``find()`` raises :class:`DiscoveryError` and the driver keeps the hosts it knew.
- :class:`FixedHosts` (``-H``/``--hostfile`` in elastic mode, or, without them, the hosts the
  launcher backend gives: the SLURM allocation's nodes, this machine): the same list every
  time.
"""

import os
import subprocess

from .hosts import parse_host_lines

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
    """The same hosts every time (``-H``, ``--hostfile``, or a backend's default hosts).

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

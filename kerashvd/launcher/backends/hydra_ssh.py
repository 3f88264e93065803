"""Backend: ranks on other hosts started over ssh by hydra's own ssh launcher
(``kerashvdrun -H``/``--hostfile`` naming another machine, an elastic job with a
``--host-discovery-script``, ``kerashvd.run(hosts=...)``).

How: ``mpiexec -launcher ssh -launcher-exec WRAPPER -localhost ADDRESS -hosts ...``. For each
remote host, hydra runs ``WRAPPER -x HOST "<dir of mpiexec>/hydra_pmi_proxy" ARGS...``; the
proxy connects back to mpiexec, receives the ranks' commands and environment, starts them
(each under its supervisor) and relays their output; hosts that are this machine get a forked
proxy. Why hydra's launcher rather than an ssh fan-out of kerashvd's own: the ranks of one MPI
world must be started by the process manager that wires them up (PMI), so an own fan-out
would still have to start hydra's proxies, and hydra already forwards the environment,
output, and SIGINT/SIGTERM to every proxy, and a proxy that loses mpiexec ends its ranks.
What hydra leaves open, kerashvd adds:

- ssh options. ``WRAPPER`` is a two-line shell script written per job into a private
  temporary directory (hydra takes one executable path, not a command line): ``exec ssh
  -o BatchMode=yes ...`` with the options of :class:`~kerashvd.launcher.ssh.SshSettings`.
- A check of every remote host before the job (:func:`~kerashvd.launcher.ssh.check_hosts`):
  every host that cannot run ranks is named in one ``LaunchError``, with the fix.
- MPICH segments left in ``/dev/shm`` on other hosts: when a rank dies before MPI_Finalize,
  hydra SIGKILLs the other ranks of its host and their supervisors, which then cannot remove
  the job's segment (``shm_segments.py``). The check lists each host's segments; after each
  job, :meth:`SshLaunch.finish` runs ``shm_segments.py`` on every remote host over ssh, which
  removes the dead ones that were not there before (as the launcher does on its own host).
- Where remote processes reach the launcher: hydra's proxies connect to mpiexec, and the
  supervisors to the launcher's report server, at
  :func:`~kerashvd.launcher.ssh.launch_address` -- the address this machine uses toward the
  remote hosts -- rather than at its host name, which on many machines resolves to a loopback
  address (``127.0.1.1`` in Debian's /etc/hosts).

A job whose hosts are all this machine (an elastic world after the other hosts were lost, or
a discovery script that lists only ``localhost``) is forked here, as by ``hydra_local.py``.
"""

import contextlib
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile

from .. import shm_segments
from ..hosts import is_local
from ..ssh import (CHECK_MARGIN, check_hosts, launch_address, on_every_host, remote_hosts,
                   usable_hosts)
from .base import Launch
from .hydra import HydraBackend, LocalLaunch, mpiexec_command


class SshLaunch(Launch):
    """A hydra job with ranks on other hosts (see the module docstring).

    Args:
        mpiexec: the path of hydra's ``mpiexec``.
        hosts: the job's hosts, in rank order.
        wrapper: the ssh wrapper script hydra runs.
        address: where remote processes reach this machine.
        ssh_argv: the ssh command the wrapper runs.
        segments: ``{remote host: its MPICH segments before the job}`` (empty when the hosts
            were not checked).
        python: the interpreter every host has.
    """

    local = False
    names_hosts = True

    def __init__(self, mpiexec, hosts, wrapper, address, ssh_argv, segments, python):
        self._mpiexec = mpiexec
        self.hosts = list(hosts)
        self.address = address
        self.ssh_argv = ssh_argv
        self.segments = segments
        self.python = python
        self.mpiexec_args = ["-launcher", "ssh", "-launcher-exec", wrapper, "-localhost", address]

    def command(self, np, rank_command, *, env, args, supervision):
        return mpiexec_command(self._mpiexec, np, rank_command, env=env, hosts=self.hosts,
                               mpi_args=args, launcher_args=self.mpiexec_args,
                               supervision=supervision)

    def describe(self):
        return f"other hosts are reached with: {shlex.join(self.ssh_argv)} HOST ..."

    def finish(self, log=None, unreachable=()):
        """Removes, on every checked remote host but the ``unreachable`` ones, the MPICH
        segments its ranks left (see the module docstring); bounded like the check. A host
        that cannot be reached is logged."""
        script = os.path.join(os.path.dirname(os.path.abspath(shm_segments.__file__)),
                              "shm_segments.py")
        timeout = shm_segments.SETTLE + CHECK_MARGIN

        def clean(host):
            remote = shlex.join([self.python, "-I", script, *sorted(self.segments[host])])
            try:
                proc = subprocess.run([*self.ssh_argv, host, remote], capture_output=True,
                                      text=True, errors="replace", stdin=subprocess.DEVNULL,
                                      timeout=timeout)
            except (subprocess.TimeoutExpired, OSError) as err:
                return f"{host}: {err}"
            if proc.returncode == 0:
                return None
            lines = proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"]
            return f"{host}: {lines[-1]}"

        hosts = sorted(set(self.segments) - set(unreachable))
        for problem in filter(None, on_every_host(hosts, clean) if hosts else []):
            if log is not None:
                log(f"could not remove the job's MPICH segments from /dev/shm on {problem}")


class SshHydra(HydraBackend):
    """Ranks on other hosts over ssh (see the module docstring).

    Example:

    >>> from kerashvd.launcher.backends.base import Request
    >>> from kerashvd.launcher.hosts import parse_hosts
    >>> SshHydra.detect(Request(np=2, hosts=parse_hosts("localhost:1,node2:1")))
    True
    """

    @classmethod
    def detect(cls, request):
        return request.discovery_script is not None or bool(remote_hosts(request.hosts))

    def several_hosts(self):
        return any(not is_local(h.name) for h in self.request.hosts or [])

    def reachable(self, names):
        # The check a job makes before it starts ranks there (ssh login, the same paths).
        local = [name for name in names if is_local(name)]
        remote = [name for name in names if not is_local(name)]
        return local + usable_hosts(remote, self.request.ssh, self.program)

    @contextlib.contextmanager
    def prepare(self, hosts, log=None):
        names = remote_hosts(hosts)
        if not names:
            yield LocalLaunch(self.program, names_hosts=self.several_hosts())
            return
        settings, dry_run = self.request.ssh, self.request.dry_run
        python = sys.executable
        settings.validate()
        segments = {} if dry_run else check_hosts(names, settings, self.program, python)
        ssh_argv = settings.argv(shutil.which("ssh") or "ssh")
        # A dry run resolves no name: this machine's host name stands for its address.
        address = socket.gethostname() if dry_run else launch_address(names)
        directory = tempfile.mkdtemp(prefix="kerashvd-ssh-")
        try:
            wrapper = os.path.join(directory, "ssh")
            with open(wrapper, "w") as f:
                f.write("#!/bin/sh\n# Run by hydra as: ssh -x HOST COMMAND... (see kerashvd/"
                        f"launcher/backends/hydra_ssh.py)\nexec {shlex.join(ssh_argv)} \"$@\"\n")
            os.chmod(wrapper, 0o700)
            yield SshLaunch(self.program, hosts, wrapper, address, ssh_argv, segments, python)
        finally:
            shutil.rmtree(directory, ignore_errors=True)

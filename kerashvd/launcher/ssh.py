"""ssh for ranks on other hosts: the ssh options every connection uses, where remote processes
reach this machine, and the check of every remote host before a job. Hydra's ssh launcher,
which starts the ranks with these, is the ``hydra_ssh`` backend (``backends/hydra_ssh.py``).

- ssh options (:class:`SshSettings`): BatchMode turns a password or host-key prompt, which
  would wait for ever in a job, into an error; ConnectTimeout bounds a dead host;
  ServerAlive* end the session (and so the host's ranks) when a host stops answering mid-job.
  ``--ssh-port``, ``--ssh-identity-file``, ``--ssh-config-file`` add ``-p``, ``-i``, ``-F``.
- A check of every remote host before the job (:func:`check_hosts`, in parallel, each bounded
  by the connect timeout plus :data:`CHECK_MARGIN`): one ssh command that must log in without
  a password and find this Python, kerashvd's supervisor, hydra's proxy and the working
  directory at the same paths, and that lists the host's MPICH segments. Every host that
  fails is named in one :class:`LaunchError`, with the fix. Without it, a wrong host shows as
  a hang or as hydra's messages about its proxy.
- :func:`launch_address`: the address this machine uses toward the remote hosts, where
  hydra's proxies and the ranks' supervisors connect back.
"""

import concurrent.futures
import dataclasses
import math
import os
import shlex
import shutil
import socket
import subprocess
import sys

from . import command as _command
from . import shm_segments
from .errors import LaunchError
from .hosts import is_local

DEFAULT_CONNECT_TIMEOUT = 10.0
CHECK_MARGIN = 20.0  # seconds a host may take to run the check once connected
_SERVER_ALIVE = ("ServerAliveInterval=10", "ServerAliveCountMax=3")
_OK = "kerashvd-ssh-check-ok"
_SSH_FAILED = 255  # ssh's exit status for its own errors

# ssh's error (its last line) -> what to do about it.
_HINTS = (
    ("Could not resolve hostname", "the name is unknown on this machine: check -H or the host "
     "file, and /etc/hosts or DNS"),
    ("Connection refused", "nothing accepts ssh there: start sshd on the host, or give its "
     "port with --ssh-port"),
    ("timed out", "the host did not answer: is it up and reachable from this machine?"),
    ("No route to host", "the host did not answer: is it up and reachable from this machine?"),
    ("Network is unreachable", "no route to the host from this machine"),
    ("Permission denied", "passwordless ssh is not set up: create a key (ssh-keygen) and "
     "install it on the host (ssh-copy-id HOST), or name the key with --ssh-identity-file"),
    ("Host key verification failed", "the host's key is not in known_hosts: connect once "
     "with `ssh HOST` and accept it, or add it with `ssh-keyscan HOST >> ~/.ssh/known_hosts`"),
)


@dataclasses.dataclass(frozen=True)
class SshSettings:
    """How to reach the remote hosts.

    Attributes:
        port: the hosts' ssh port (``ssh -p``), or ``None`` for ssh's default or config.
        identity_file: the private key (``ssh -i``), or ``None``.
        config_file: an ssh client configuration file used instead of ``~/.ssh/config``
            (``ssh -F``), or ``None``.
        connect_timeout: seconds to wait for a host to accept the connection.
    """

    port: int | None = None
    identity_file: str | None = None
    config_file: str | None = None
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT

    def validate(self):
        """Raises ValueError for a bad port or timeout, or a key or config file that is not
        a readable file (the message names the setting)."""
        if self.port is not None and (isinstance(self.port, bool) or
                                      not isinstance(self.port, int) or
                                      not 1 <= self.port <= 65535):
            raise ValueError(f"the ssh port must be an integer from 1 to 65535, received "
                             f"{self.port!r}")
        if not (isinstance(self.connect_timeout, (int, float)) and
                math.isfinite(self.connect_timeout) and self.connect_timeout > 0):
            raise ValueError(f"the ssh connect timeout must be a number of seconds > 0, "
                             f"received {self.connect_timeout!r}")
        for what, path in (("identity file", self.identity_file),
                           ("config file", self.config_file)):
            if path is not None and not os.access(path, os.R_OK):
                raise ValueError(f"the ssh {what} {path!r} does not exist or cannot be read")

    def argv(self, ssh="ssh"):
        """The ssh command line before the host, e.g. ``["ssh", "-o", "BatchMode=yes", ...]``.

        Example:

        >>> SshSettings(port=2222).argv()[:3]
        ['ssh', '-o', 'BatchMode=yes']
        """
        argv = [ssh, "-o", "BatchMode=yes",
                "-o", f"ConnectTimeout={max(1, math.ceil(self.connect_timeout))}"]
        for option in _SERVER_ALIVE:
            argv += ["-o", option]
        if self.config_file:
            argv += ["-F", os.path.abspath(self.config_file)]
        if self.identity_file:
            argv += ["-i", os.path.abspath(self.identity_file)]
        if self.port is not None:
            argv += ["-p", str(self.port)]
        return argv


def remote_hosts(hosts):
    """The names in ``hosts`` (a list of :class:`~kerashvd.launcher.hosts.Host`, or None)
    that are not this machine."""
    return [h.name for h in hosts or [] if not is_local(h.name)]


def launch_address(names):
    """The IP address of this machine toward the first of ``names`` that resolves (the
    source address of its route; no packet is sent), else this machine's host name."""
    for family in (socket.AF_INET, socket.AF_INET6):
        for name in names:
            try:
                infos = socket.getaddrinfo(name, 22, family, socket.SOCK_DGRAM)
            except (socket.gaierror, UnicodeError):
                continue
            with socket.socket(family, socket.SOCK_DGRAM) as probe:
                try:
                    probe.connect(infos[0][4])
                    return probe.getsockname()[0]
                except OSError:
                    continue
    return socket.gethostname()


def _required_paths(mpiexec, python):
    """What every host must have at the same path: (what, path, test) triples."""
    return [
        ("this Python", python, "-x"),
        ("kerashvd (its launcher's supervisor)", _command.SUPERVISOR, "-f"),
        ("MPICH's hydra_pmi_proxy", os.path.join(os.path.dirname(mpiexec), "hydra_pmi_proxy"),
         "-x"),
        ("the working directory", os.getcwd(), "-d"),
    ]


def _check_command(required):
    """A command for the remote login shell (sh, bash, zsh, ...) that prints ``missing N``
    for each required path it lacks, then the OK marker, then the files in /dev/shm."""
    tests = [f"test {test} {shlex.quote(path)} || echo missing {i}"
             for i, (_, path, test) in enumerate(required)]
    return "; ".join(tests + [f"echo {_OK}", f"ls -1 {shm_segments.SHM_DIR} 2>/dev/null"])


def _hint(error):
    for pattern, hint in _HINTS:
        if pattern.lower() in error.lower():
            return hint
    return None


def _check_host(host, argv, required, timeout):
    """Returns ``(problem, segments)``: ``problem`` is None when ``host`` is usable, else what
    is wrong with it and the fix; ``segments``, the MPICH segments in its /dev/shm."""
    try:
        proc = subprocess.run([*argv, host, _check_command(required)], capture_output=True,
                              text=True, errors="replace", stdin=subprocess.DEVNULL,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return (f"the ssh check did not finish within {timeout:g} s (the host connected but "
                "did not run the command: an overloaded host, or a login script waiting for "
                "input?)"), set()
    except OSError as err:
        return f"could not run ssh: {err}", set()
    lines = proc.stdout.splitlines()
    if _OK in lines:
        report, listing = lines[:lines.index(_OK)], lines[lines.index(_OK) + 1:]
        segments = {name for name in listing if name.startswith(shm_segments.PREFIX)}
        missing = [required[int(line.split()[1])] for line in report
                   if line.startswith("missing ") and line.split()[1].isdigit()]
        if not missing:
            return None, segments
        listed = "; ".join(f"{what} ({path})" for what, path, _ in missing)
        return (f"reached over ssh, but it lacks {listed}. Every host needs the same Python, "
                "kerashvd and working directory at the same paths (a shared file system, or "
                "the same installation on each host)"), segments
    error = [line for line in proc.stderr.splitlines() if line.strip()]
    error = error[-1] if error else f"ssh exited with code {proc.returncode} and no message"
    if proc.returncode != _SSH_FAILED:
        return (f"the check command failed there (exit {proc.returncode}): {error}; its login "
                "shell must run a POSIX `test ... || echo ...` command line"), set()
    hint = _hint(error)
    return f"ssh failed: {error}" + (f" -- {hint}" if hint else ""), set()


def check_hosts(names, settings, mpiexec, python=None):
    """Checks that every host in ``names`` can run ranks; raises LaunchError naming each that
    cannot, with the fix. Hosts are checked in parallel; each takes at most the connect
    timeout plus :data:`CHECK_MARGIN` seconds.

    Args:
        names: remote host names.
        settings: :class:`SshSettings`.
        mpiexec: the path of the mpiexec the job uses (its proxy must be on every host).
        python: the interpreter of the ranks' supervisors (default: this one).

    Returns:
        ``{host: the MPICH segments in its /dev/shm}``.
    """
    if not names:
        return {}
    ssh = find_ssh()
    argv = settings.argv(ssh)
    required = _required_paths(mpiexec, python or sys.executable)
    timeout = settings.connect_timeout + CHECK_MARGIN
    checked = on_every_host(names, lambda host: _check_host(host, argv, required, timeout))
    failed = [(host, problem) for host, (problem, _) in zip(names, checked) if problem]
    if failed:
        lines = "\n".join(f"  {host}: {problem}{'' if problem.endswith(('.', '?')) else '.'}"
                          for host, problem in failed)
        error = LaunchError(
            f"cannot start ranks on {len(failed)} of the {len(names)} remote host(s) over "
            f"ssh:\n{lines}\nRanks on other hosts are started with ssh, which must work "
            f"without a password or prompt: `{shlex.join(argv)} HOST true` must succeed from "
            "this machine.")
        error.hosts = [host for host, _ in failed]  # the elastic mode leaves them out
        raise error
    return {host: segments for host, (_, segments) in zip(names, checked)}


def usable_hosts(names, settings, mpiexec, python=None):
    """The hosts of ``names`` that pass :func:`check_hosts`'s check now (none raises)."""
    if not names:
        return []
    argv = settings.argv(find_ssh())
    required = _required_paths(mpiexec, python or sys.executable)
    timeout = settings.connect_timeout + CHECK_MARGIN
    checked = on_every_host(names, lambda host: _check_host(host, argv, required, timeout))
    return [host for host, (problem, _) in zip(names, checked) if problem is None]


def on_every_host(names, function):
    """``[function(name) for name in names]``, run in parallel."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(32, len(names))) as pool:
        return list(pool.map(function, names))


def find_ssh():
    """The path of the ``ssh`` client; raises LaunchError when there is none."""
    path = shutil.which("ssh")
    if path is None:
        raise LaunchError("ssh is not on PATH: ranks on other hosts are started over ssh. "
                          "Install the OpenSSH client (e.g. apt-get install openssh-client).")
    return path

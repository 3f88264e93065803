"""Hosts reachable over ssh, on one machine: the session fixture ``ssh_nodes`` (defined in
tests/multinode_cluster.py, which pytest loads as a plugin).

Each node is a network, UTS and mount namespace on a private bridge, made by
:class:`multinode_cluster.NodeNetwork` (the same nodes as the multi-node SLURM cluster's, but
without SLURM), running its own ``sshd``. What ``kerashvdrun -H`` needs from a cluster is
there: hosts with their own names, addresses and ``/dev/shm``, passwordless ssh between them,
and one file system (the same Python and kerashvd at the same paths everywhere, as on a
cluster with a shared home)::

    bridge khvd<tag>br = 10.A.B.1/24 (root namespace: no sshd)
        |-- khvd<tag>1  10.A.B.2  sshd on 10.A.B.2:22
        |-- khvd<tag>2  10.A.B.3  sshd on 10.A.B.3:22
        |-- khvd<tag>3  10.A.B.4  sshd, but this Python's directory is hidden (``lacking``)
        khvd<tag>x1 in /etc/hosts: 10.A.B.254, nothing behind it (``unreachable``)

The fixture makes everything ssh needs in its own temporary directory: a host key (one for
all nodes), a client key in ``authorized_keys``, a ``known_hosts`` naming every node, and an
ssh client configuration (``ssh_config``: that key, that known_hosts, ``StrictHostKeyChecking
yes``) that the tests hand to ``kerashvdrun --ssh-config-file`` or ``kerashvd.run(...,
ssh_config_file=...)``. Nothing under ``/etc/ssh`` or in root's ``~/.ssh`` is read or written;
teardown checks that ``~/.ssh`` is as it was. Each sshd runs with a private tmpfs on ``/run``
(for its ``/run/sshd``) and listens only on its node's address.

Teardown (checked, like the SLURM fixtures'): no process is left in the nodes' namespaces but
the sshd daemons, which are then stopped; the namespaces, links, bridge and /etc/hosts lines
are removed.

API::

    def test_x(ssh_nodes):
        ssh_nodes.nodes                 # the two full nodes, e.g. ["khvdabcd1", "khvdabcd2"]
        ssh_nodes.lacking, ssh_nodes.unreachable, ssh_nodes.addresses, ssh_nodes.ssh_config
        ssh_nodes.command(node, argv)   # argv that runs on `node` (its namespaces)
        ssh_nodes.run(node, argv, env=None, timeout=120)   # subprocess.run of that
        ssh_nodes.processes(node)       # [(pid, cmdline)] on the node, sshd itself left out
        ssh_nodes.segments(node)        # MPICH segments in the node's /dev/shm

Needs root, ``openssh-server`` and ``openssh-client`` (``sshd``, ``ssh``, ``ssh-keygen``),
``iproute2`` and util-linux; skips with the reason otherwise.
"""

import contextlib
import os
import pwd
import shlex
import shutil
import signal
import subprocess
import sys
import time

import psutil

from kerashvd.launcher import shm_segments
from multinode_cluster import NODE_MPI_ENV
from node_network import NodeNetwork, _cmdline, _ns_inode
from slurm_cluster import _die_with_pytest, _find

_TOOLS = ("sshd", "ssh", "ssh-keygen", "ip", "nsenter", "unshare")
_SSHD_CONFIG = """\
ListenAddress {address}
Port 22
HostKey {root}/host_key
AuthorizedKeysFile {root}/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
PidFile none
PrintMotd no
PrintLastLog no
MaxStartups 100
MaxSessions 100
LoginGraceTime 30
"""
_CLIENT_CONFIG = """\
Host *
    User {user}
    IdentityFile {root}/client_key
    IdentitiesOnly yes
    UserKnownHostsFile {root}/known_hosts
    GlobalKnownHostsFile /dev/null
    StrictHostKeyChecking yes
    CheckHostIP no
    LogLevel ERROR
"""


def _user_ssh_dir():
    return os.path.join(pwd.getpwuid(os.getuid()).pw_dir, ".ssh")


def _tree(path):
    """{relative path: (mode, size, mtime_ns)} of a directory tree, or None if it is absent."""
    if not os.path.lexists(path):
        return None
    found = {}
    for base, dirs, files in os.walk(path):
        for name in [""] + dirs + files:
            full = os.path.join(base, name) if name else base
            st = os.lstat(full)
            found[os.path.relpath(full, path)] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return found


class SshNodes:
    """Running nodes with sshd; see the module docstring."""

    def __init__(self, root):
        self.root = root
        self.network = NodeNetwork(root, 3, spare=1)
        self.nodes = self.network.nodes[:2]
        self.lacking = self.network.nodes[2]
        self.unreachable = self.network.spares[0]
        self.addresses = self.network.addresses
        self.ssh_config = os.path.join(root, "ssh_config")
        # The directory the `lacking` node does not have: this Python's (a venv's bin).
        self.hidden = os.path.dirname(sys.executable) if sys.prefix != sys.base_prefix else None
        self._daemons = {}  # node -> Popen of its sshd
        self._ssh_dir_before = _tree(_user_ssh_dir())

    def _keys(self):
        for name in ("host_key", "client_key"):
            subprocess.run([_find("ssh-keygen"), "-q", "-t", "ed25519", "-N", "", "-C",
                            f"kerashvd-test-{name}", "-f", os.path.join(self.root, name)],
                           check=True, capture_output=True, timeout=30)
        shutil.copy(os.path.join(self.root, "client_key.pub"),
                    os.path.join(self.root, "authorized_keys"))
        with open(os.path.join(self.root, "host_key.pub")) as f:
            host_key = " ".join(f.read().split()[:2])
        with open(os.path.join(self.root, "known_hosts"), "w") as f:
            for node in self.network.nodes:
                f.write(f"{node},{self.addresses[node]} {host_key}\n")
        with open(self.ssh_config, "w") as f:
            f.write(_CLIENT_CONFIG.format(user=pwd.getpwuid(os.getuid()).pw_name,
                                          root=self.root))

    def start(self):
        self.network.make()
        self._keys()
        for node in self.network.nodes:
            config = os.path.join(self.root, f"sshd_config.{node}")
            with open(config, "w") as f:
                f.write(_SSHD_CONFIG.format(address=self.addresses[node], root=self.root))
            setup = "mount -t tmpfs -o mode=755 tmpfs /run && mkdir -m 755 /run/sshd"
            if node == self.lacking and self.hidden:
                setup += f" && mount -t tmpfs -o mode=755 tmpfs {shlex.quote(self.hidden)}"
            argv = self.network.node_argv(node, [_find("sshd"), "-D", "-e", "-f", config],
                                          setup=setup)
            with open(os.path.join(self.root, f"sshd-{node}.out"), "wb") as log:
                self._daemons[node] = subprocess.Popen(
                    argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    start_new_session=True, preexec_fn=_die_with_pytest)
        deadline = time.monotonic() + 30
        for node, proc in self._daemons.items():
            while not self._listening(node):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"sshd of {node} did not start (exit {proc.poll()}):\n"
                                       + self._log(node))
                time.sleep(0.05)

    def _listening(self, node):
        """Whether the node's sshd listens (read from its namespace's /proc/net/tcp)."""
        port = f"{self.addresses[node]}:22"
        wanted = "".join(f"{int(p):02X}" for p in reversed(port.split(":")[0].split(".")))
        try:
            with open(f"/proc/{self._daemons[node].pid}/net/tcp") as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            return False
        return any(line.split()[1] == f"{wanted}:0016" and line.split()[3] == "0A"
                   for line in lines)

    def _log(self, node):
        with contextlib.suppress(OSError), open(os.path.join(self.root, f"sshd-{node}.out")) as f:
            return f.read()[-3000:]
        return ""

    # -- for the tests ------------------------------------------------------------------------

    def command(self, node, argv):
        """The argv that runs ``argv`` on ``node``: in its sshd's network, UTS and mount
        namespaces (its name, address and /dev/shm), as a login there would."""
        return [_find("nsenter"), "-t", str(self._daemons[node].pid), "--net", "--uts",
                "--mount", "--", "env", *(f"{k}={v}" for k, v in NODE_MPI_ENV.items()), *argv]

    def run(self, node, argv, env=None, timeout=120, **kwargs):
        """``subprocess.run`` of ``argv`` on ``node``, text output captured."""
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        return subprocess.run(self.command(node, argv), env=dict(os.environ, **(env or {})),
                              timeout=timeout, **kwargs)

    def processes(self, node):
        """[(pid, cmdline)] of the processes in ``node``'s network namespace but its sshd."""
        net = _ns_inode(self._daemons[node].pid, "net")
        found = []
        for pid in psutil.pids():  # psutil has no namespaces: /proc/PID/ns tells them
            if pid != self._daemons[node].pid and _ns_inode(pid, "net") == net:
                found.append((pid, _cmdline(pid)))
        return found

    def segments(self, node):
        """The MPICH shared-memory segments in ``node``'s /dev/shm."""
        return sorted(shm_segments.segments(f"/proc/{self._daemons[node].pid}/root/dev/shm"))

    # -- teardown -----------------------------------------------------------------------------

    def stop(self):
        """Stops the sshd daemons and removes the network; returns the problems found."""
        problems = []
        for node in self._daemons:
            left = self.processes(node)
            if left:
                problems.append(f"processes on {node} after the tests (killed): {left}")
                for pid, _ in left:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
        for proc in self._daemons.values():
            if proc.poll() is None:
                proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        deadline = time.monotonic() + 10
        while self.network.processes() and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in self.network.processes():
            problems.append(f"process in a node's namespace after sshd stopped (killed): "
                            f"{(pid, _cmdline(pid))}")
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        problems += self.network.remove()
        after = _tree(_user_ssh_dir())
        if after != self._ssh_dir_before:
            problems.append(f"{_user_ssh_dir()} changed during the tests: {self._ssh_dir_before}"
                            f" before, {after} after")
        return problems


def missing():
    """Why the nodes cannot run here, or None."""
    if os.geteuid() != 0:
        return "the ssh test nodes need root (namespaces, sshd)"
    missing = [name for name in _TOOLS if _find(name) is None]
    if missing:
        return (f"the ssh test nodes need {', '.join(missing)}: apt-get install "
                "openssh-server openssh-client iproute2 util-linux")
    return None

"""The "nodes" of the multi-node test fixtures: network, UTS and mount namespaces on a bridge,
their /etc/hosts lines, and the clean-up of what a killed pytest left (:class:`NodeNetwork`).

tests/multinode_cluster.py runs a SLURM cluster on such nodes and tests/ssh_nodes.py an sshd
on each; the facts the layout rests on are in multinode_cluster.py's docstring.
"""

import contextlib
import fcntl
import ipaddress
import os
import random
import shutil
import string
import subprocess
import time

import psutil

from slurm_cluster import _find

HOSTS = "/etc/hosts"
MARKER = "# kerashvd-multinode-test"  # + " tag= pid= started= root=" on each line
_TOOLS = ("ip", "nsenter", "unshare")


def _ip(*args, check=True):
    proc = subprocess.run([_find("ip"), *args], capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
    return proc


def _free_subnet():
    """A random 10.A.B.0/24 that no address or route of this machine overlaps."""
    used = []
    for args in (("-4", "-o", "addr"), ("-4", "route")):
        for word in _ip(*args).stdout.split():
            with contextlib.suppress(ValueError):
                used.append(ipaddress.ip_network(word, strict=False))
    for _ in range(100):
        net = ipaddress.ip_network(f"10.{random.randrange(128, 255)}.{random.randrange(256)}.0/24")
        if not any(net.overlaps(u) for u in used):
            return net
    raise RuntimeError(f"no free 10.x.y.0/24 subnet; in use: {used}")


def _ns_inode(pid, kind):
    """The inode of process ``pid``'s namespace ``kind`` ('net', 'mnt'), or None."""
    try:
        return os.stat(f"/proc/{pid}/ns/{kind}").st_ino
    except OSError:
        return None


def _cmdline(pid):
    """Process ``pid``'s command line, its arguments joined by spaces, or None when it is gone."""
    try:
        return " ".join(psutil.Process(int(pid)).cmdline()).strip()
    except (psutil.Error, ValueError):
        return None


def _started(pid):
    """Process ``pid``'s start time (clock ticks after boot, as a string), or None.

    Read from /proc, not psutil: the value goes into /etc/hosts lines that fixtures of other
    sessions on this machine compare in this same form."""
    try:
        with open(f"/proc/{int(pid)}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, ValueError, IndexError):
        return None


@contextlib.contextmanager
def _locked_hosts():
    """/etc/hosts, locked against other fixtures (of this or a parallel session)."""
    with open(HOSTS, "r+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield f
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _rewrite_hosts(keep):
    """Keeps the lines of /etc/hosts for which ``keep(line)`` is true; returns those dropped.

    Rewritten in place (/etc/hosts may be a bind mount that a rename would not replace).
    """
    with _locked_hosts() as f:
        lines = f.read().splitlines(keepends=True)
        kept = [line for line in lines if keep(line)]
        if len(kept) != len(lines):
            f.seek(0)
            f.write("".join(kept))
            f.truncate()
    return [line for line in lines if not keep(line)]


def _remove_stale():
    """Removes what the fixture of a pytest that died left: hosts lines, namespaces, links.

    Its daemons died with it (PR_SET_PDEATHSIG); its /etc/hosts lines name its tag, and its
    pid and start time (a pid alone may have been reused).
    """
    with open(HOSTS) as f:
        lines = [line for line in f if MARKER in line]
    stale = set()
    for line in lines:
        fields = dict(w.split("=", 1) for w in line.split(MARKER, 1)[1].split() if "=" in w)
        alive = _started(fields.get("pid", "0")) == fields.get("started")
        tag = fields.get("tag", "")
        node = line.split()[1]
        if not alive and tag and node.startswith(f"khvd{tag}"):
            stale.add(line)
            _ip("link", "del", f"khvd{tag}v{node[4 + len(tag):]}", check=False)
            _ip("netns", "del", node, check=False)
            _ip("link", "del", f"khvd{tag}br", check=False)
            root = fields.get("root", "")
            if os.path.basename(root).startswith("khvd-nodes-"):
                shutil.rmtree(root, ignore_errors=True)
    if stale:
        _rewrite_hosts(lambda line: line not in stale)


class NoNetworkNamespaces(RuntimeError):
    """This machine does not let the fixture make bridges or namespaces (the fixture skips)."""

class NodeNetwork:
    """The "nodes" of a test cluster: network namespaces on a bridge, their /etc/hosts lines,
    and the command that starts a process as one of them (see the module docstring).

    Besides the nodes, ``spare`` names get an /etc/hosts line with an address of the subnet
    that no namespace holds: a host that does not answer (connections to it fail within a
    few seconds, "No route to host", once the bridge's ARP queries go unanswered).

    Attributes: ``tag``, ``nodes``, ``spares``, ``bridge``, ``veths``, ``addresses`` (name ->
    IP, nodes and spares), ``bridge_ip`` and ``net_inodes`` (after :meth:`make`).
    """

    def __init__(self, root, count, spare=0):
        self.root = root
        self.tag = "".join(random.choices(string.ascii_lowercase, k=4))
        self.nodes = [f"khvd{self.tag}{i}" for i in range(1, count + 1)]
        self.spares = [f"khvd{self.tag}x{i}" for i in range(1, spare + 1)]
        self.bridge = f"khvd{self.tag}br"
        self.veths = [f"khvd{self.tag}v{i}" for i in range(1, count + 1)]
        self.addresses = {}
        self.bridge_ip = None
        self.net_inodes = set()
        self._hosts_lines = []
        self._made = []  # ("netns"|"link", name), in creation order

    def make(self):
        _remove_stale()
        net = _free_subnet()
        hosts = list(net.hosts())
        bridge_ip = hosts[0]
        self.bridge_ip = str(bridge_ip)
        proc = _ip("link", "add", self.bridge, "type", "bridge", check=False)
        if proc.returncode != 0:
            raise NoNetworkNamespaces(f"cannot make a bridge: ip link add {self.bridge} type "
                                      f"bridge: {proc.stderr.strip()} (root without "
                                      "CAP_NET_ADMIN, e.g. in a container?)")
        self._made.append(("link", self.bridge))
        _ip("addr", "add", f"{bridge_ip}/{net.prefixlen}", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for i, (node, veth) in enumerate(zip(self.nodes, self.veths)):
            address = str(hosts[i + 1])
            self.addresses[node] = address
            _ip("netns", "add", node)
            self._made.append(("netns", node))
            self.net_inodes.add(os.stat(f"/run/netns/{node}").st_ino)
            _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", node)
            self._made.append(("link", veth))
            _ip("link", "set", veth, "master", self.bridge, "up")
            _ip("-n", node, "addr", "add", f"{address}/{net.prefixlen}", "dev", "eth0")
            _ip("-n", node, "link", "set", "eth0", "up")
            _ip("-n", node, "link", "set", "lo", "up")
        for i, name in enumerate(self.spares):
            self.addresses[name] = str(hosts[-1 - i])  # from the top: no node gets them
        with _locked_hosts() as f:
            self._hosts_lines = [f"{self.addresses[n]}\t{n}\t{MARKER} tag={self.tag} "
                                 f"pid={os.getpid()} started={_started(os.getpid())} "
                                 f"root={self.root}\n" for n in self.nodes + self.spares]
            text = f.read()
            f.seek(0, os.SEEK_END)
            f.write(("" if not text or text.endswith("\n") else "\n")
                    + "".join(self._hosts_lines))

    def node_argv(self, node, command, setup=""):
        """The argv that runs ``command`` as ``node``: in its network namespace, with its own
        UTS (hostname ``node``) and mount namespace (its own /dev/shm), after the shell
        commands ``setup`` (run in that mount namespace, e.g. more mounts)."""
        # Its own boot id too (kept in its private /dev/shm): UCX takes processes with one
        # boot id for one host and would connect the "nodes" through shared memory.
        script = ('mount --make-rprivate / && hostname "$1" && '
                  'mount -t tmpfs -o mode=1777 tmpfs /dev/shm && '
                  'cat /proc/sys/kernel/random/uuid > /dev/shm/.kerashvd_boot_id && '
                  'mount --bind /dev/shm/.kerashvd_boot_id /proc/sys/kernel/random/boot_id && '
                  f'{setup + " && " if setup else ""}shift && exec "$@"')
        return [_find("nsenter"), f"--net=/run/netns/{node}", _find("unshare"),
                "--uts", "--mount", "sh", "-c", script, "sh", node, *command]

    def processes(self, mnt_inodes=()):
        """Pids in the nodes' network namespaces or in the mount namespaces ``mnt_inodes``."""
        mnt = set(v for v in mnt_inodes if v)
        pids = []
        for pid in psutil.pids():  # psutil has no namespaces: /proc/PID/ns tells them
            if _ns_inode(pid, "net") in self.net_inodes or _ns_inode(pid, "mnt") in mnt:
                pids.append(pid)
        return pids

    def remove(self):
        """Deletes the veths, namespaces and bridge and the hosts lines; returns problems."""
        problems = []
        for kind, name in reversed(self._made):
            if kind == "link":
                _ip("link", "del", name, check=False)
            else:
                _ip("netns", "del", name, check=False)
        removed = _rewrite_hosts(lambda line: line not in self._hosts_lines)
        if sorted(removed) != sorted(self._hosts_lines):
            problems.append(f"/etc/hosts: expected to remove {self._hosts_lines}, removed "
                            f"{removed}")
        # Checks: nothing of it is left (a veth may outlive its namespace for a moment).
        deadline = time.monotonic() + 10
        while True:
            links = [n for k, n in self._made if k == "link"
                     and _ip("link", "show", n, check=False).returncode == 0]
            if not links or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        if links:
            problems.append(f"links still there after 'ip link del': {links}")
        namespaces = _ip("netns", "list").stdout
        left = [n for n in self.nodes if n in namespaces.split() or
                os.path.exists(f"/run/netns/{n}")]
        if left:
            problems.append(f"network namespaces still there after 'ip netns del': {left}")
        with open(HOSTS) as f:
            if any(f"tag={self.tag} " in line for line in f):
                problems.append(f"/etc/hosts still names the cluster's nodes (tag {self.tag})")
        self._made = []
        return problems

"""This rank's end of the elastic protocol with ``kerashvdrun`` (the launcher's end, and the
protocol itself, are in ``kerashvd/launcher/handover.py``).

kerashvdrun's elastic mode gives every rank ``KERASHVD_ELASTIC="HOST:PORT TOKEN"``: where its
world's report server listens, and the world's token. Outside that mode the variable is unset,
:func:`current` returns ``None``, and ``hvd.elastic`` works without a launcher to talk to (no
host updates, and a failure ends the job as any failure does).

Every exchange is a new TCP connection that starts with one line ``TOKEN RANK VERB ...``;
connecting is bounded by :data:`CONNECT_TIMEOUT` and each transfer by :data:`TIMEOUT` seconds
without progress, and every connection ends once kerashvdrun's host has not answered for the
link timeout (``kerashvd/launcher/keepalive.py``), so no rank waits for ever on a launcher
that is gone or cut off.
"""

import os
import socket
import sys
import threading

from kerashvd.launcher import keepalive
from kerashvd.launcher.handover import VARIABLE

WORLD_VARIABLE = "KERASHVD_RESTART_COUNT"  # the world's number, 0 first
CONNECT_TIMEOUT = 10.0
TIMEOUT = 60.0

_current = None
_lock = threading.Lock()


class LinkError(RuntimeError):
    """The launcher could not be reached or broke off an exchange; the message says which."""


class LauncherLink:
    """The connection details of this world, and what rank 0 heard about hosts.

    Attributes:
        world: this world's number (0 for the first).
        hosts_update: the kind of host change the launcher announced (``"added"``,
            ``"removed"``, ``"changed"``), or ``None``.
        resumed: whether ``hvd.elastic.run`` has synchronized this process's state once.
    """

    def __init__(self, address, token, world):
        host, _, port = address.rpartition(":")
        self._address = (host, int(port))
        self._token = token
        self.world = world
        self.hosts_update = None
        self.resumed = False
        self._joined = False

    @classmethod
    def from_environment(cls, environ=None):
        """The link described by ``KERASHVD_ELASTIC``, or None when it is unset.

        Raises:
            ValueError: the variable is set but malformed.
        """
        environ = os.environ if environ is None else environ
        text = environ.get(VARIABLE, "").strip()
        if not text:
            return None
        parts = text.split()
        if len(parts) != 2 or ":" not in parts[0] or not parts[0].rpartition(":")[2].isdigit():
            raise ValueError(f"{VARIABLE} must be 'HOST:PORT TOKEN' (kerashvdrun sets it in "
                             f"elastic mode); received {text!r}")
        world = environ.get(WORLD_VARIABLE, "0")
        return cls(parts[0], parts[1], int(world) if world.isdigit() else 0)

    def _open(self, rank, verb, *fields):
        """A connection on which ``TOKEN RANK VERB FIELDS`` has been sent."""
        try:
            conn = socket.create_connection(self._address, timeout=CONNECT_TIMEOUT)
        except OSError as err:
            raise LinkError(f"cannot reach kerashvdrun at {self._address[0]}:"
                            f"{self._address[1]} ({err})") from None
        keepalive.enable(conn, keepalive.link_timeout())
        conn.settimeout(TIMEOUT)
        line = " ".join([self._token, str(rank), verb, *map(str, fields)])
        conn.sendall(line.encode() + b"\n")
        return conn

    def _exchange(self, rank, verb, *fields):
        """Sends one line and returns the launcher's one-line answer."""
        with self._open(rank, verb, *fields) as conn:
            return _read_line(conn)

    def join(self, rank):
        """Opens this rank's member connection, kept until the process ends, in a thread
        that records host announcements (``hosts_update``) and ends the process at once when
        kerashvdrun closes the connection (kerashvdrun has died, or this rank outlived its
        world by more than the hand-over grace) or stops answering (a cut link)."""
        if self._joined:
            return
        self._joined = True
        conn = self._open(rank, "member")
        conn.settimeout(None)

        def watch():
            why = "closed this rank's connection (it ended, or this world is over)"
            with conn:
                try:
                    while True:
                        words = _read_line(conn).split()
                        if len(words) == 2 and words[0] == "updated":
                            self.hosts_update = words[1]
                except LinkError:
                    pass
                except OSError as err:
                    if keepalive.timed_out(err):
                        why = (f"stopped answering (nothing came back for "
                               f"{keepalive.link_timeout():g} s: a cut link?)")
            try:
                sys.stderr.write(f"kerashvd: rank {rank}: kerashvdrun {why}; exiting.\n")
                sys.stderr.flush()
            except (OSError, ValueError):
                pass  # the supervisor, which copied the output, may be gone
            os._exit(1)

        threading.Thread(target=watch, name="kerashvd-elastic-member", daemon=True).start()

    def hand_over(self, rank, number, make_payload):
        """Offers commit ``number``; sends ``make_payload()`` (bytes) if the launcher wants it.

        Returns:
            True when the launcher has stored the commit, False when it did not want it.
        """
        payload = make_payload() if number >= 0 else b""
        with self._open(rank, "commit", number, len(payload)) as conn:
            answer = _read_line(conn)
            if answer != "send":
                if answer == "skip":
                    _read_line(conn)  # "ok": registered as a survivor
                return False
            conn.sendall(payload)
            if _read_line(conn) != "ok":
                raise LinkError("kerashvdrun did not confirm the commit it was sent")
            return True

    def fetch(self, rank):
        """Returns ``(number, bytes)`` of the commit the launcher holds, or ``None``."""
        with self._open(rank, "state") as conn:
            header = _read_line(conn).split()
            length, number = int(header[0]), int(header[1])
            if length == 0:
                return None
            parts, size = [], 0
            while size < length:
                chunk = conn.recv(min(1 << 20, length - size))
                if not chunk:
                    raise LinkError(f"kerashvdrun closed the connection after {size} of the "
                                    f"{length} bytes of commit {number}")
                parts.append(chunk)
                size += len(chunk)
            return number, b"".join(parts)

    def report(self, rank, verb, *fields):
        """Sends ``synced NUMBER``, ``done`` or ``failed TEXT``; an unreachable launcher is
        ignored."""
        try:
            self._exchange(rank, verb, *fields)
        except (OSError, LinkError):
            pass


def _read_line(conn):
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(1)
        if not chunk:
            raise LinkError("kerashvdrun closed the connection")
        data += chunk
    return data.decode("ascii", "replace").strip()


def current():
    """This process's :class:`LauncherLink` (made once), or None outside the elastic mode."""
    global _current
    with _lock:
        if _current is None:
            _current = LauncherLink.from_environment() or False
        return _current or None

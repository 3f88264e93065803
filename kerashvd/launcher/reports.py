"""The launcher's end of the connections from each rank's supervisor (and, for
:func:`kerashvd.run`, its worker).

Every line sent to the server starts with the job's token (a random value per job, so that a
stale process of another job cannot stop this one) and its rank; HOST is the sender's host
name:

- ``TOKEN RANK watch HOST``, once, when the rank starts: the server keeps the connection open
  and never writes to it; the supervisor writes ``bye`` on it when its rank has ended. When
  the launcher process ends -- killed with SIGKILL included -- the operating system closes
  it, and the supervisor stops its rank: no rank outlives its launcher, on this host or
  another. A watch that ends without ``bye`` is a lost rank (``watches.py``).
- ``TOKEN RANK RETURNCODE HOST``, on a new connection, only when the rank's command failed
  (``RETURNCODE`` as ``subprocess`` gives it: ``-N`` for signal ``N``): the server answers
  ``ok`` and puts a :class:`FailureReport` on the event queue.
- ``TOKEN RANK payload`` (kerashvd.run's worker, at its start): the server sends the payload
  it was given (the pickled function and arguments) and closes the connection.
- ``TOKEN RANK result LENGTH``, then LENGTH bytes (the worker, at its end): the rank's pickled
  outcome; the server keeps it in :attr:`ReportServer.results` and answers ``ok``, after which
  the worker exits. Going through the connection rather than a file lets ranks on other hosts
  return results without a shared file system.
- ``TOKEN RANK VERB ...`` for a verb given in ``handlers`` (kerashvdrun's elastic mode:
  ``launcher/handover.py``): the connection is handed to that handler, in a thread of its own.

Every accepted connection gets the job's link timeout (``keepalive.py``): one whose other end
stops answering ends within that time, so no connection from a host that was cut off or went
down holds the launcher.
"""

import dataclasses
import resource
import secrets
import socket
import threading

from . import exit_status, keepalive
from .watches import Watches


@dataclasses.dataclass(frozen=True)
class FailureReport:
    """A rank whose command ended with a non-zero status."""

    rank: int
    returncode: int  # negative: killed by that signal
    host: str | None = None  # set when the job's ranks run on several hosts

    @property
    def exit_code(self):
        """The code a shell would show (``128 + N`` for signal ``N``)."""
        return exit_status.shell_code(self.returncode)

    def describe(self):
        """Returns e.g. ``"rank 1 exited with code 7"``, or ``"rank 3 on node2 exited with
        code 7"`` when the host is known."""
        where = f" on {self.host}" if self.host else ""
        return f"rank {self.rank}{where} {exit_status.describe(self.returncode)}"


class ReportServer:
    """Listens for the ranks' connections in a background thread; use as a context manager.

    Args:
        events: a ``queue.Queue`` that receives one :class:`FailureReport` per valid report.
        local: listen on 127.0.0.1 only (every rank runs on this machine); otherwise listen on
            all interfaces.
        address: the host or IP address to advertise when not ``local`` (default: this
            machine's host name).
        name_hosts: put the reporting rank's host in each :class:`FailureReport` (for jobs
            on several hosts).
        payload: bytes to send to each ``payload`` request (kerashvd.run), or ``None``.
        handlers: ``{verb: handler}`` for more verbs: ``handler(conn, rank, fields, rest)`` is
            called in a new thread with the connection, the rank, the words after the verb
            and the bytes read past the first line; it owns (and closes) the connection.
        link_timeout: seconds of silence after which a connection counts as lost
            (default: ``keepalive.link_timeout()`` of this process's environment); lost
            watches put a :class:`~kerashvd.launcher.watches.RankLost` on ``events``.

    Attributes:
        address: ``"host:port"`` for the ranks.
        token: the job's token.
        hosts: ``{rank: host}`` of the ranks that started (from their watch lines).
        results: ``{rank: bytes}`` the ranks sent with ``result``.

    Example:

    >>> import queue
    >>> with ReportServer(queue.Queue()) as server:
    ...     server.address.startswith("127.0.0.1:")
    True
    """

    def __init__(self, events, local=True, address=None, name_hosts=False, payload=None,
                 handlers=None, link_timeout=None):
        self._events = events
        self.link_timeout = link_timeout if link_timeout is not None else \
            keepalive.link_timeout()
        self._watches = Watches(events, self.link_timeout)
        self._handlers = dict(handlers or {})
        self.token = secrets.token_hex(16)
        self._name_hosts = name_hosts
        self._payload = payload
        self.hosts = {}
        self.results = {}
        _allow_many_connections()
        self._socket = socket.create_server(("127.0.0.1" if local else "", 0), backlog=1024,
                                            family=_family(address))
        self._socket.settimeout(0.2)
        port = self._socket.getsockname()[1]
        host = "127.0.0.1" if local else (address or socket.gethostname())
        self.address = f"{host}:{port}"
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="kerashvd-reports",
                                        daemon=True)
        self._thread.start()

    def _serve(self):
        while not self._closed.is_set():
            try:
                conn, _ = self._socket.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            keepalive.enable(conn, self.link_timeout)
            if not self._handle(conn):
                conn.close()

    def _handle(self, conn):
        """Reads one line; returns True when ``conn`` is kept open (a rank's watch connection
        or a transfer running in its own thread)."""
        conn.settimeout(5)
        data = b""
        try:
            while b"\n" not in data and len(data) < 512:
                chunk = conn.recv(512)
                if not chunk:
                    break
                data += chunk
            line, _, rest = data.partition(b"\n")
            fields = line.decode("ascii", "replace").split()
            if len(fields) < 3 or not secrets.compare_digest(fields[0], self.token):
                return False
            rank, verb, extra = int(fields[1]), fields[2], fields[3:]
            if verb == "watch":
                self.hosts[rank] = extra[0] if extra else None
                conn.settimeout(None)
                self._watches.add(conn, rank, self.hosts[rank])
                return True
            if verb in ("payload", "result"):
                threading.Thread(target=self._transfer, args=(conn, rank, verb, extra, rest),
                                 name="kerashvd-transfer", daemon=True).start()
                return True
            if verb in self._handlers:
                conn.settimeout(None)
                threading.Thread(target=self._handlers[verb], args=(conn, rank, extra, rest),
                                 name=f"kerashvd-{verb}", daemon=True).start()
                return True
            host = extra[0] if extra and self._name_hosts else None
            self._events.put(FailureReport(rank, int(verb), host))
            conn.sendall(b"ok\n")
        except (OSError, ValueError):
            pass
        return False

    def watched(self):
        """The server's ends of the watch connections open now."""
        return self._watches.connections()

    def _transfer(self, conn, rank, verb, extra, received):
        """Sends the payload to, or receives a result from, one rank; then closes ``conn``."""
        conn.settimeout(_TRANSFER_TIMEOUT)
        try:
            if verb == "payload":
                conn.sendall(self._payload or b"")
            else:
                length = int(extra[0])
                parts, size = [received], len(received)
                while size < length:
                    chunk = conn.recv(min(1 << 20, length - size))
                    if not chunk:
                        return  # the rank died while sending: no result
                    parts.append(chunk)
                    size += len(chunk)
                self.results[rank] = b"".join(parts)[:length]
                conn.sendall(b"ok\n")
        except (OSError, ValueError, IndexError):
            pass
        finally:
            conn.close()

    def close(self):
        """Stops listening, waits for the background thread and closes the watch connections."""
        self._closed.set()
        self._thread.join()
        self._socket.close()
        self._watches.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


_TRANSFER_TIMEOUT = 600.0  # seconds without progress before a payload or result is dropped


def _family(address):
    """The address family to listen on for ranks that connect to ``address``."""
    return socket.AF_INET6 if address and ":" in address else socket.AF_INET


_WANTED_FILES = 65536


def _allow_many_connections():
    """Raises the open-file limit toward the hard limit: the server holds one socket per rank
    (a soft limit of 1024 is common). The ranks inherit it."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        wanted = _WANTED_FILES if hard == resource.RLIM_INFINITY else min(hard, _WANTED_FILES)
        if soft != resource.RLIM_INFINITY and soft < wanted:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    except (ValueError, OSError):
        pass  # keep the limit

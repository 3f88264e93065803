"""The launcher's end of the connections from each rank's supervisor.

Every line a supervisor sends starts with the job's token (a random value per job, so that a
stale supervisor of another job cannot stop this one) and its rank:

- ``TOKEN RANK watch``, once, when the rank starts: the server keeps the connection open and
  never writes to it. When the launcher process ends -- killed with SIGKILL included -- the
  operating system closes it, and the supervisor stops its rank: no rank outlives its
  launcher, on this host or another.
- ``TOKEN RANK RETURNCODE``, on a new connection, only when the rank's command failed
  (``RETURNCODE`` as ``subprocess`` gives it: ``-N`` for signal ``N``): the server answers
  ``ok`` and puts a :class:`FailureReport` on the event queue.
"""

import dataclasses
import resource
import secrets
import socket
import threading

from . import exit_status


@dataclasses.dataclass(frozen=True)
class FailureReport:
    """A rank whose command ended with a non-zero status."""

    rank: int
    returncode: int  # negative: killed by that signal

    @property
    def exit_code(self):
        """The code a shell would show (``128 + N`` for signal ``N``)."""
        return exit_status.shell_code(self.returncode)

    def describe(self):
        """Returns e.g. ``"rank 1 exited with code 7"``."""
        return f"rank {self.rank} {exit_status.describe(self.returncode)}"


class ReportServer:
    """Listens for failure reports in a background thread; use as a context manager.

    Args:
        events: a ``queue.Queue`` that receives one :class:`FailureReport` per valid report.
        local: listen on 127.0.0.1 only (every rank runs on this machine); otherwise listen on
            all interfaces and advertise this machine's host name.

    Example:

    >>> import queue
    >>> with ReportServer(queue.Queue()) as server:
    ...     server.address.startswith("127.0.0.1:")
    True
    """

    def __init__(self, events, local=True):
        self._events = events
        self.token = secrets.token_hex(16)
        self._watched = []  # one open connection per running rank
        _allow_many_connections()
        self._socket = socket.create_server(("127.0.0.1" if local else "", 0), backlog=1024)
        self._socket.settimeout(0.2)
        port = self._socket.getsockname()[1]
        self.address = f"{'127.0.0.1' if local else socket.gethostname()}:{port}"
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
            if not self._handle(conn):
                conn.close()

    def _handle(self, conn):
        """Reads one line; returns True when ``conn`` is a rank's watch connection (kept)."""
        conn.settimeout(5)
        data = b""
        try:
            while b"\n" not in data and len(data) < 512:
                chunk = conn.recv(512)
                if not chunk:
                    break
                data += chunk
            fields = data.decode("ascii", "replace").split()
            if len(fields) != 3 or not secrets.compare_digest(fields[0], self.token):
                return False
            if fields[2] == "watch":
                self._watched.append(conn)
                return True
            report = FailureReport(int(fields[1]), int(fields[2]))
            self._events.put(report)
            conn.sendall(b"ok\n")
        except (OSError, ValueError):
            pass
        return False

    def close(self):
        """Stops listening, waits for the background thread and closes the watch connections."""
        self._closed.set()
        self._thread.join()
        self._socket.close()
        for conn in self._watched:
            conn.close()
        self._watched.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


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

"""The launcher's end of the elastic protocol: handing the last commit from one world to the
next, and telling a world that its hosts changed.

MPI cannot shrink or grow a running world, so kerashvdrun's elastic mode replaces it: every
rank of the old world ends, and a new world of the new size starts on the hosts that are up
(``elastic_driver.py``). What carries training over is the *commit*: ``state.commit()`` keeps a
copy of the model, optimizer and object state in each rank's memory (``kerashvd.elastic``).
A rank of world ``W`` talks to the launcher over the report server of ``W``
(``reports.py``: every line starts with the world's token and the rank):

``TOKEN RANK hosts``
    rank 0, at the start of ``hvd.elastic.run``: the launcher keeps the connection and writes
    ``updated KIND\\n`` (``added``, ``removed`` or ``changed``) once discovery shows hosts that
    would give another world. Rank 0's ``check_host_updates()`` (run by every commit)
    broadcasts what it read, and every rank raises ``HostsUpdatedInterrupt`` at the same
    commit.
``TOKEN RANK commit NUMBER LENGTH``
    a rank leaving ``hvd.elastic.run`` for a reset (``HostsUpdatedInterrupt``, or a failed
    collective: a peer died): ``NUMBER`` counts the commits since training began (-1: the rank
    has no synchronized state to give). The launcher answers ``send`` when it holds no commit
    as new, else ``skip``; after ``send``, the rank sends ``LENGTH`` bytes and the launcher
    answers ``ok`` once they are stored. Either way the rank counts as a *survivor*: it ended
    on purpose (exit code :data:`RESET_EXIT_CODE`), and its slot stays usable. Ranks of one
    world may hold different commits (a peer died while some ranks had finished a step and
    others had not); the newest wins.
``TOKEN RANK state``
    rank 0 of the next world, before the first ``sync()``: the launcher answers
    ``LENGTH NUMBER\\n`` and the stored bytes (``0 -1`` when it holds none). Rank 0 loads them
    into its state, and ``sync()`` broadcasts them to the other ranks.
``TOKEN RANK synced NUMBER``
    rank 0, after that ``sync()``: the world trains from commit ``NUMBER``. The launcher logs
    it, with the time since the last world ended.
``TOKEN RANK done``
    a rank whose ``hvd.elastic.run`` function returned: training is over. A world whose ranks
    all end without a reset is the end of the job; one whose rank fails after others are
    done ends the job with that failure (there is nothing left to train).
``TOKEN RANK failed TEXT``
    a rank whose ``hvd.elastic.run`` function raised an error of the script's own (not one
    that a reset handles): ``TEXT`` is its type and message on one line. The rank then exits
    with an error; when every rank of a world failed so, the job ends with that error.

The bytes are the rank's pickled state; the launcher never reads them. It keeps the newest in
a file of a private temporary directory (not in memory: a model's commit can be gigabytes),
across worlds, so that a world that fails before its first commit still hands the same commit
on. Nothing goes through a shared file system, so ranks on other hosts need none.
"""

import os
import tempfile
import threading
import time

VARIABLE = "KERASHVD_ELASTIC"  # "HOST:PORT TOKEN" of the world's report server, in every rank
RESET_EXIT_CODE = 76  # a rank's exit code after it handed its commit over for a reset
_TIMEOUT = 60.0  # seconds without progress before a transfer is given up


class CommitStore:
    """The newest commit handed over, across worlds; use as a context manager.

    Attributes:
        number: its commit count (-1: none yet).
        size: its length in bytes.
    """

    def __init__(self):
        self._directory = tempfile.TemporaryDirectory(prefix="kerashvd-elastic-")
        self._path = os.path.join(self._directory.name, "commit")
        self._lock = threading.Lock()
        self._receiving = set()  # commit numbers being received
        self.number, self.size = -1, 0

    def wants(self, number):
        """Whether a commit numbered ``number`` would be newer than the one held or coming."""
        with self._lock:
            if number <= max([self.number, *self._receiving]):
                return False
            self._receiving.add(number)
            return True

    def receive(self, number, conn, length, received):
        """Reads ``length`` bytes of commit ``number`` (``received`` first) from ``conn``;
        keeps them unless a newer commit arrived meanwhile. Returns True once stored."""
        partial = f"{self._path}.{number}.part"
        try:
            with open(partial, "wb") as f:
                f.write(received[:length])
                size = min(len(received), length)
                while size < length:
                    chunk = conn.recv(min(1 << 20, length - size))
                    if not chunk:
                        return False
                    f.write(chunk)
                    size += len(chunk)
            with self._lock:
                if number > self.number:
                    os.replace(partial, self._path)
                    self.number, self.size = number, length
            return True
        finally:
            with self._lock:
                self._receiving.discard(number)
            if os.path.exists(partial):
                os.unlink(partial)

    def send(self, conn):
        """Sends ``LENGTH NUMBER\\n`` and the commit (``0 -1`` when there is none)."""
        with self._lock:
            number, size = self.number, self.size
            data = open(self._path, "rb") if number >= 0 else None
        if data is None:
            conn.sendall(b"0 -1\n")
            return
        with data:
            conn.sendall(f"{size} {number}\n".encode())
            while True:
                chunk = data.read(1 << 20)
                if not chunk:
                    break
                conn.sendall(chunk)

    def close(self):
        self._directory.cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class WorldChannel:
    """One world's side of the protocol: its handlers for the report server, and what its
    ranks said.

    Attributes:
        handlers: ``{verb: handler}`` to give :class:`~kerashvd.launcher.reports.ReportServer`.
        survivors: ``{rank: commit number}`` of the ranks that ended for a reset.
        synced: ``(commit number, time.monotonic())`` once rank 0 reported its first sync.
        done: the ranks whose training function returned.
        errors: ``{rank: "Type: message"}`` of the ranks whose training function raised.
        hosts_update: the kind of host change announced to the world, or ``None``.
    """

    def __init__(self, store):
        self._store = store
        self._lock = threading.Condition()
        self._members = {}  # rank -> its open member connection
        self._joined = 0
        self._last_left = None  # when the last member connection closed
        self.survivors = {}
        self.synced = None
        self.done = set()
        self.errors = {}
        self.hosts_update = None
        self.handlers = {"member": self._member, "commit": self._commit, "state": self._state,
                         "synced": self._synced, "done": self._done, "failed": self._failed}

    def announce_hosts_update(self, kind):
        """Tells the ranks (now, or when they connect) that the hosts changed (once)."""
        with self._lock:
            if self.hosts_update is not None:
                return
            self.hosts_update = kind
            members = list(self._members.values())
        for conn in members:
            _send_quietly(conn, f"updated {kind}\n".encode())

    def is_survivor(self, rank):
        with self._lock:
            return rank in self.survivors

    def all_left_for(self):
        """Seconds since every rank that joined has ended (None while one is still there,
        or before any joined)."""
        with self._lock:
            if self._members or not self._joined or self._last_left is None:
                return None
            return time.monotonic() - self._last_left

    def wait_for_members(self, timeout):
        """Waits until every member connection has closed (its rank ended), at most
        ``timeout`` seconds; returns the ranks still connected."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._members and time.monotonic() < deadline:
                self._lock.wait(max(0.0, min(0.2, deadline - time.monotonic())))
            return sorted(self._members)

    def close(self):
        """Closes the member connections still open: their ranks end themselves."""
        with self._lock:
            members, self._members = list(self._members.values()), {}
        for conn in members:
            conn.close()

    # -- handlers, each in its own thread with the connection -----------------------------

    def _member(self, conn, rank, fields, rest):
        with self._lock:
            self._members[rank] = conn
            self._joined += 1
            kind = self.hosts_update
        if kind is not None:
            _send_quietly(conn, f"updated {kind}\n".encode())
        try:
            while conn.recv(64):
                pass  # the rank never writes; an empty read means it ended
        except OSError:
            pass
        with self._lock:
            if self._members.get(rank) is conn:
                del self._members[rank]
            self._last_left = time.monotonic()
            self._lock.notify_all()
        conn.close()

    def _commit(self, conn, rank, fields, rest):
        conn.settimeout(_TIMEOUT)
        try:
            number, length = int(fields[0]), int(fields[1])
            wanted = number >= 0 and length > 0 and self._store.wants(number)
            conn.sendall(b"send\n" if wanted else b"skip\n")
            if wanted and not self._store.receive(number, conn, length, rest):
                return  # the rank died while sending: not a survivor
            with self._lock:
                self.survivors[rank] = number
            conn.sendall(b"ok\n")
        except (OSError, ValueError, IndexError):
            pass
        finally:
            conn.close()

    def _state(self, conn, rank, fields, rest):
        conn.settimeout(_TIMEOUT)
        try:
            self._store.send(conn)
        except OSError:
            pass
        finally:
            conn.close()

    def _synced(self, conn, rank, fields, rest):
        def record():
            if self.synced is None:
                self.synced = (int(fields[0]), time.monotonic())
        self._record(conn, record)

    def _done(self, conn, rank, fields, rest):
        self._record(conn, lambda: self.done.add(rank))

    def _failed(self, conn, rank, fields, rest):
        self._record(conn, lambda: self.errors.setdefault(rank, " ".join(fields)))

    def _record(self, conn, update):
        """Runs ``update()`` under the lock and answers ``ok``."""
        conn.settimeout(_TIMEOUT)
        try:
            with self._lock:
                update()
            conn.sendall(b"ok\n")
        except (OSError, ValueError, IndexError):
            pass
        finally:
            conn.close()


def _send_quietly(conn, data):
    try:
        conn.sendall(data)
    except OSError:
        pass

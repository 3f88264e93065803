"""The supervisors' watch connections, from the launcher's side: which ranks ended with a
goodbye, and which were lost.

Every rank's supervisor (``_supervisor.py``) opens one watch connection when its rank starts
(``TOKEN RANK watch HOST``; ``reports.py`` reads that line and hands the connection to
:class:`Watches`). The launcher never writes to it; the supervisor writes ``bye`` once its
rank has ended, whatever its exit code, just before it exits. A watch then ends in one of
three ways:

- after ``bye``: the rank ended, and its supervisor has said so (and reported a failure
  first, on a connection of its own, when there was one);
- closed without ``bye``: the supervisor died without a word (SIGKILL; every process of its
  host killed; MPI's process manager killing it after another rank failed);
- timed out: nothing came back from the host for the link timeout (``keepalive.py``): its
  link is cut, or the host is down or frozen.

The last two put a :class:`RankLost` on the job's event queue; ``job.run_job`` gathers the
losses of one host that come together into one :class:`RanksLost` (:class:`LossGatherer`):
the job's failure when nothing failed before it. When the launcher itself ends, its side of
every watch closes and each supervisor stops its rank, as before.
"""

import dataclasses
import queue
import selectors
import threading

from .keepalive import timed_out

LOST_EXIT_CODE = 255  # kerashvdrun's exit code when the job failed because ranks were lost
GATHER = 1.0  # seconds within which a host's losses count as one


@dataclasses.dataclass(frozen=True)
class RankLost:
    """A rank whose watch connection ended without its supervisor's goodbye.

    Attributes:
        rank: the rank.
        host: its host, as its supervisor named it (``None`` if unknown).
        unreachable: the connection timed out (the host stopped answering), rather than
            closed.
        timeout: the link timeout, in seconds.
        host_ranks: every rank of the job that had a watch from ``host`` when it was lost.
    """

    rank: int
    host: str | None
    unreachable: bool
    timeout: float
    host_ranks: tuple = ()


def _ranks(ranks):
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


@dataclasses.dataclass
class RanksLost:
    """The ranks of one host lost together (a job's failure; see the module docstring).

    Attributes:
        host: their host.
        ranks: the ranks, in the order they were lost.
        unreachable: the host stopped answering (else their supervisors ended without a word).
        timeout: the link timeout, in seconds.
        whole_host: every rank the job had on the host is among them.
    """

    host: str | None
    ranks: list
    unreachable: bool
    timeout: float
    whole_host: bool = False

    @property
    def rank(self):
        """The first rank lost."""
        return self.ranks[0]

    @property
    def exit_code(self):
        """The launcher's exit code for a job that failed this way."""
        return LOST_EXIT_CODE

    def describe(self):
        """The loss in words, naming the host and its ranks.

        Example:

        >>> RanksLost("node2", [2, 3], unreachable=True, timeout=28.0, whole_host=True).describe()
        'host node2 stopped answering (ranks 2, 3): nothing came back for 28 s (a cut link, or the host is down)'
        """
        ranks = _ranks(sorted(self.ranks))
        if self.unreachable:
            return (f"host {self.host} stopped answering ({ranks}): nothing came back for "
                    f"{self.timeout:g} s (a cut link, or the host is down)")
        if self.whole_host:
            return (f"host {self.host} was lost: {ranks} ended without a word (their processes "
                    "were killed, or the host went down)")
        whose = "its supervisor was" if len(self.ranks) == 1 else "their supervisors were"
        return f"{ranks} on {self.host} ended without a word ({whose} killed)"


class LossGatherer:
    """Turns the first :class:`RankLost` events of a job into one :class:`RanksLost`: the
    losses within :data:`GATHER` seconds of the first, grouped by host and kind (the ranks of
    a host that went down are lost within a moment of each other).

    The group that names the failure is the first whose host lost every rank it had, else the
    first: a host that goes down takes MPI's process manager with it, which may kill the
    supervisor of a rank on another host a moment before the lost host's own losses arrive.
    What it cannot tell apart: when the lost host's ssh session ends before its ranks do,
    hydra may end every rank of another host (the launcher's own) before the lost host's
    losses arrive, and that host, having lost every rank first, is the one named.

    Example:

    >>> gather = LossGatherer()
    >>> gather.add(RankLost(0, "n1", False, 28.0, (0, 1)), now=0.0).ranks
    [0]
    >>> gather.add(RankLost(2, "n2", False, 28.0, (2, 3)), now=0.1).host
    'n1'
    >>> group = gather.add(RankLost(3, "n2", False, 28.0, (2, 3)), now=0.2)
    >>> gather.due(now=0.2), group.host, group.ranks, group.whole_host
    (True, 'n2', [2, 3], True)
    """

    def __init__(self):
        self.announced = False
        self._groups = []  # RanksLost, in the order of their first loss
        self._host_ranks = {}  # (host, unreachable) -> every rank the job had on the host
        self._until = None

    @property
    def group(self):
        """The loss that names the job's failure (``None`` before the first)."""
        whole = [g for g in self._groups if g.whole_host]
        return (whole or self._groups or [None])[0]

    def add(self, event, now):
        """Takes a loss; returns :attr:`group` (the loss that names the failure so far)."""
        if self.announced or (self._until is not None and now > self._until):
            return self.group
        self._until = self._until if self._until is not None else now + GATHER
        kind = (event.host, event.unreachable)
        group = next((g for g in self._groups if (g.host, g.unreachable) == kind), None)
        if group is None:
            group = RanksLost(event.host, [], event.unreachable, event.timeout)
            self._groups.append(group)
        if event.rank not in group.ranks:
            group.ranks.append(event.rank)
        ranks = self._host_ranks.setdefault(kind, set())
        ranks |= set(event.host_ranks) | {event.rank}
        group.whole_host = ranks <= set(group.ranks)
        return self.group

    def due(self, now):
        """Whether the failure is known (a host lost every rank, or the gathering time is
        over) and not announced yet."""
        return bool(self._groups) and not self.announced and \
            (self.group.whole_host or now > self._until)


class Watches:
    """Reads every watch connection of a job in one thread (see the module docstring).

    Args:
        events: the job's event queue, for :class:`RankLost`.
        timeout: the link timeout set on the connections (for the messages).
    """

    def __init__(self, events, timeout):
        self._events = events
        self._timeout = timeout
        self._new = queue.Queue()
        self._hosts = {}  # rank -> host, of every watch that opened
        self._selector = selectors.DefaultSelector()
        self._lock = threading.Lock()  # the selector's map, changed by the reading thread
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kerashvd-watches", daemon=True)
        self._thread.start()

    def add(self, conn, rank, host):
        """Watches ``conn``, the open watch of ``rank`` on ``host``."""
        self._hosts[rank] = host
        self._new.put((conn, rank, host))

    def _run(self):
        while not self._closed.is_set():
            while True:
                try:
                    conn, rank, host = self._new.get_nowait()
                except queue.Empty:
                    break
                with self._lock:
                    self._selector.register(conn, selectors.EVENT_READ, [rank, host, b""])
            for key, _ in self._selector.select(timeout=0.2):
                self._read(key.fileobj, key.data)

    def _read(self, conn, data):
        rank, host, received = data
        try:
            chunk = conn.recv(256)
        except OSError as err:
            self._ended(conn, rank, host, lost=b"bye\n" not in received,
                        unreachable=timed_out(err))
            return
        if not chunk:
            self._ended(conn, rank, host, lost=b"bye\n" not in received, unreachable=False)
            return
        data[2] = (received + chunk)[-64:]

    def _ended(self, conn, rank, host, lost, unreachable):
        with self._lock:
            self._selector.unregister(conn)
        conn.close()
        if lost and not self._closed.is_set():
            host_ranks = tuple(sorted(r for r, h in self._hosts.items() if h == host))
            self._events.put(RankLost(rank, host, unreachable, self._timeout, host_ranks))

    def connections(self):
        """The watch connections open now (being read)."""
        with self._lock:
            return [key.fileobj for key in self._selector.get_map().values()]

    def close(self):
        """Stops reading and closes every watch still open (their supervisors then stop their
        ranks)."""
        self._closed.set()
        self._thread.join()
        while True:
            try:
                self._new.get_nowait()[0].close()
            except queue.Empty:
                break
        for key in list(self._selector.get_map().values()):
            key.fileobj.close()
        self._selector.close()
